"""Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), as a
translation onto the one turn pipeline (turn.Turns).

Two translations, each written once:
- the request → a chat-completions request (`_translate`), with the `Pointers` that move every
  chat pointer back into the Anthropic request (so errors name what the client sent);
- the turn → Anthropic's shape: a finished `TurnResult` → content blocks (`_blocks`), and chat
  deltas → content-block events (`_BlockEvents`). Blocks are never empty in either, so a stream
  adds up to the message the same request gets unstreamed.

What kaname accepts but cannot act on (top_k, output_config.effort, redacted thinking) is listed
in the response's `kaname.ignored`; what it cannot serve (images, documents, server tools,
prefill) is a 400 naming the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse, Response

from .errors import APIError, pointer_of
from .messages_protocol import (
    CountTokensRequest,
    MessageIn,
    MessagesRequest,
    RedactedThinkingBlockIn,
    TextBlockIn,
    ThinkingBlockIn,
    ToolIn,
    ToolResultBlockIn,
    ToolUseBlockIn,
)
from .protocol import ChatCompletionRequest
from .sse import EventStream
from .turn import Pointers, Turn, TurnResult, Turns

# The blocks each kind of content may hold (by `type`), and the model that reads each.
BLOCKS: dict[str, dict[str, type[BaseModel]]] = {
    "user": {"text": TextBlockIn, "tool_result": ToolResultBlockIn},
    "assistant": {"text": TextBlockIn, "thinking": ThinkingBlockIn,
                  "redacted_thinking": RedactedThinkingBlockIn, "tool_use": ToolUseBlockIn},
    "system": {"text": TextBlockIn},
    "tool_result": {"text": TextBlockIn},
}
# Blocks Anthropic's API takes that a text-only model cannot read: a 400, never dropped.
UNREADABLE = {"image", "document", "search_result", "container_upload"}

# Chat fields whose Anthropic counterpart has another name (errors are moved back to it).
FIXED_MOVES = (
    ("/max_completion_tokens", "/max_tokens"),
    ("/stop", "/stop_sequences"),
    ("/chat_template_kwargs.enable_thinking", "/thinking"),
    ("/chat_template_kwargs", "/thinking"),
    ("/max_reasoning_tokens", "/thinking/budget_tokens"),
    ("/parallel_tool_calls", "/tool_choice/disable_parallel_tool_use"),
    ("/tool_choice/function/name", "/tool_choice/name"),
    ("/tool_choice/function", "/tool_choice"),
)
SCHEMA_NAME = "output"  # Anthropic's output format has no name; OpenAI's json_schema wants one


def add_messages_routes(app: FastAPI, turns: Turns) -> None:
    """Register /v1/messages and /v1/messages/count_tokens on `app`."""

    @app.post("/v1/messages")
    async def messages(req: MessagesRequest, request: Request) -> Response:
        asked = _translate(turns, req)
        # tool_use ids as Anthropic writes them; they come back as tool_result.tool_use_id
        turn = turns.prepare(asked.chat, asked.where, call_ids="toolu_")
        reply = _Reply(asked, turn, turns.backend.model_id)
        if req.stream:
            slot = await turns.admit(turn)
            return EventStream(_events(turns, turn, reply), slot, dialect="anthropic")
        return JSONResponse(reply.message(await turns.complete(request, turn)))

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(req: CountTokensRequest) -> dict[str, int]:
        """The prompt's tokens as the model sees them (rendered, tools included); nothing is
        generated."""
        asked = _translate(turns, req)
        turn = turns.prepare(asked.chat, asked.where)
        return {"input_tokens": turns.backend.count_tokens(turn.call.prompt)}


# ---- the request → chat completions ---------------------------------------------------------

@dataclass
class _Asked:
    """A translated request: the chat request, where its fields sit in the Anthropic one, and
    what the reply needs to know."""

    chat: ChatCompletionRequest
    where: Pointers
    thinking: bool = False  # thinking enabled: every reply opens with a thinking block
    hide_thinking: bool = False  # thinking.display "omitted"
    ignored: list[str] = field(default_factory=list)


@dataclass
class _Translation:
    body: dict[str, Any] = field(default_factory=dict)
    moves: list[tuple[str, str]] = field(default_factory=lambda: list(FIXED_MOVES))
    ignored: list[str] = field(default_factory=list)

    def add(self, message: dict[str, Any], at: str) -> int:
        """Append a chat message that came from `at`; its chat index."""
        messages = self.body.setdefault("messages", [])
        messages.append(message)
        self.moves.append((f"/messages/{len(messages) - 1}", at))
        return len(messages) - 1


def _translate(turns: Turns, req: CountTokensRequest) -> _Asked:
    t = _Translation()
    t.body.update(model=req.model, messages=[], allow_unenforced=req.allow_unenforced)
    if req.strict_level is not None:
        t.body["strict_level"] = req.strict_level
    if req.kaname is not None:
        t.body["kaname"] = req.kaname
    _system(t, req)
    _messages(t, req.messages)
    _tools(t, req)
    _output_format(t, req)
    hide = _thinking(t, req)
    if isinstance(req, MessagesRequest):
        _sampling(t, req)
    where = Pointers(tuple(t.moves))
    enabled = req.thinking is not None and req.thinking.type == "enabled"
    return _Asked(turns.chat_request(t.body, where), where, enabled, hide, t.ignored)


def _error(pointer: str, message: str) -> APIError:
    # Anthropic's errors carry no param: the message names the field
    return APIError(400, f"{pointer}: {message}", param=pointer, code="invalid_request")


def _parse(model: type[BaseModel], raw: Any, at: str) -> Any:
    """`raw` read by `model`; a 400 pointing into it."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = pointer_of(first.get("loc", ()), raw) or ""
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise _error(at + loc, message) from None


def _block(raw: Any, at: str, holder: str) -> Any:
    """One content block, read by the model for its type in `holder` (user, assistant, system,
    tool_result)."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in UNREADABLE:
        raise _error(f"{at}/type", f"{kind} blocks are not supported: this server's model "
                                   "reads text only; send the content as text")
    if not isinstance(kind, str):
        raise _error(f"{at}/type", "each content block needs a type: "
                                   + ", ".join(BLOCKS[holder]))
    model = BLOCKS[holder].get(kind)
    if model is None:
        where = {"system": "system", "tool_result": "a tool_result's content"}.get(
            holder, f"an {holder} message" if holder == "assistant" else f"a {holder} message")
        raise _error(f"{at}/type", f"{kind!r} blocks are not supported in {where}; it takes "
                                   + ", ".join(BLOCKS[holder]))
    return _parse(model, raw, at)


def _system(t: _Translation, req: CountTokensRequest) -> None:
    if not req.system:
        return
    text = "".join(_block(b, f"/system/{k}", "system").text for k, b in enumerate(req.system))
    t.add({"role": "system", "content": text}, "/system")


def _messages(t: _Translation, messages: list[MessageIn]) -> None:
    if messages[-1].role == "assistant":
        # Anthropic continues a trailing assistant turn; kaname's grammar starts a new one
        raise _error(f"/messages/{len(messages) - 1}/role",
                     "prefilling the assistant turn is not supported: end with a user message "
                     "(for structured output use output_config.format)")
    for i, m in enumerate(messages):
        (_user if m.role == "user" else _assistant)(t, m, f"/messages/{i}")


def _user(t: _Translation, m: MessageIn, at: str) -> None:
    """Text runs become user messages and each tool_result a tool message, in their order."""
    text: list[str] | None = None
    for k, raw in enumerate(m.content):
        where = f"{at}/content/{k}"
        block = _block(raw, where, "user")
        if isinstance(block, TextBlockIn):
            text = [*(text or []), block.text]
            continue
        if text is not None:
            t.add({"role": "user", "content": "".join(text)}, at)
            text = None
        t.add({"role": "tool", "tool_call_id": block.tool_use_id,
               "content": _result_text(block, where)}, where)
    if text is not None or not m.content:
        t.add({"role": "user", "content": "".join(text or [])}, at)


def _result_text(block: ToolResultBlockIn, at: str) -> str:
    text = "".join(_block(b, f"{at}/content/{n}", "tool_result").text
                   for n, b in enumerate(block.content))
    # chat has no error flag on a tool result: the model reads it in the text
    return f"Error: {text}" if block.is_error else text


def _assistant(t: _Translation, m: MessageIn, at: str) -> None:
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    call_moves: list[tuple[str, str]] = []
    for k, raw in enumerate(m.content):
        where = f"{at}/content/{k}"
        block = _block(raw, where, "assistant")
        if isinstance(block, TextBlockIn):
            content.append(block.text)
        elif isinstance(block, ThinkingBlockIn):
            reasoning.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlockIn):
            t.ignored.append(f"{where} (redacted_thinking: encrypted by Anthropic, unreadable "
                             "here; left out of the prompt)")
        else:
            call_moves += [(f"/tool_calls/{len(calls)}/function/arguments", f"{where}/input"),
                           (f"/tool_calls/{len(calls)}/function/name", f"{where}/name"),
                           (f"/tool_calls/{len(calls)}", where)]
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    j = t.add(message, at)
    t.moves += [(f"/messages/{j}{old}", new) for old, new in call_moves]


def _tools(t: _Translation, req: CountTokensRequest) -> None:
    tools = []
    for i, raw in enumerate(req.tools or []):
        at = f"/tools/{i}"
        kind = raw.get("type")
        if kind not in (None, "custom"):
            raise _error(f"{at}/type", f"tool type {kind!r} is one of Anthropic's server tools, "
                                       "which this server does not run; give a client tool "
                                       "(name, input_schema)")
        tool = _parse(ToolIn, raw, at)
        tools.append({"type": "function", "function": {
            "name": tool.name, "parameters": tool.input_schema,
            **({"description": tool.description} if tool.description is not None else {}),
            **({"strict": tool.strict} if tool.strict is not None else {})}})
        t.moves += [(f"{at}/function/parameters", f"{at}/input_schema"),
                    (f"{at}/function", at)]
    if tools:
        t.body["tools"] = tools
    choice = req.tool_choice
    if choice is None:
        return
    if choice.type in ("any", "tool") and not tools:
        raise _error("/tool_choice/type", f"tool_choice {choice.type!r} needs tools")
    t.body["tool_choice"] = (
        {"type": "function", "function": {"name": choice.name}} if choice.type == "tool"
        else {"auto": "auto", "any": "required", "none": "none"}[choice.type])
    if choice.disable_parallel_tool_use:
        t.body["parallel_tool_calls"] = False


def _output_format(t: _Translation, req: CountTokensRequest) -> None:
    config = req.output_config
    given = [(at, f) for at, f in (("/output_config/format", config.format if config else None),
                                   ("/output_format", req.output_format)) if f is not None]
    if config is not None and config.effort is not None:
        t.ignored.append("/output_config/effort (kaname's budget for reasoning is "
                         "thinking.budget_tokens)")
    if len(given) > 1:
        raise _error("/output_format", "give one of output_config.format and output_format")
    if not given:
        return
    at, fmt = given[0]
    # Anthropic's structured outputs always match their schema: strict, as OpenAI's strict
    # true (a schema kaname cannot enforce fully is a 400 naming keyword and pointer)
    t.body["response_format"] = {"type": "json_schema", "json_schema": {
        "name": SCHEMA_NAME, "schema": fmt.schema_, "strict": fmt.strict}}
    t.moves.append(("/response_format/json_schema/strict", f"{at}/strict"))
    t.moves += [("/response_format/json_schema/schema", f"{at}/schema"), ("/response_format", at)]


def _thinking(t: _Translation, req: CountTokensRequest) -> bool:
    """Maps `thinking`; whether the thinking text is to be left out of the reply."""
    thinking = req.thinking
    if thinking is None:  # Anthropic's API thinks only when asked to
        t.body["chat_template_kwargs"] = {"enable_thinking": False}
        return False
    if thinking.type == "adaptive":  # the server's default: the model may reason
        return thinking.display == "omitted"
    t.body["chat_template_kwargs"] = {"enable_thinking": thinking.type == "enabled"}
    if thinking.type == "enabled":
        budget = thinking.budget_tokens
        if isinstance(req, MessagesRequest) and budget is not None and budget >= req.max_tokens:
            raise _error("/thinking/budget_tokens", f"must be less than max_tokens "
                                                    f"({req.max_tokens}): thinking counts "
                                                    "toward max_tokens")
        t.body["max_reasoning_tokens"] = budget
    return thinking.display == "omitted"


def _sampling(t: _Translation, req: MessagesRequest) -> None:
    if req.mcp_servers:  # their tools would silently be missing from the turn
        raise _error("/mcp_servers", "the MCP connector is not supported: Anthropic's API "
                                     "runs those servers; give their tools in `tools` and call "
                                     "them from the client")
    t.body.update(max_completion_tokens=req.max_tokens, stream=req.stream)
    for name in ("temperature", "top_p", "seed"):
        if getattr(req, name) is not None:
            t.body[name] = getattr(req, name)
    if req.stop_sequences:
        t.body["stop"] = req.stop_sequences
    if req.top_k is not None:
        t.ignored.append("/top_k (kaname samples from the whole masked distribution)")


# ---- the turn → Anthropic's shape -----------------------------------------------------------

@dataclass
class _Reply:
    asked: _Asked
    turn: Turn
    model: str

    @property
    def id(self) -> str:
        return f"msg_{self.turn.response_id}"

    def head(self, content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": None, "stop_sequence": None,
                "usage": usage}

    def message(self, result: TurnResult) -> dict[str, Any]:
        reason, sequence = _stop(result)
        return {**self.head(_blocks(result.message, self.asked),
                            _usage(result.gen.prompt_tokens, result.gen.completion_tokens)),
                "stop_reason": reason, "stop_sequence": sequence,
                "kaname": self.report(result)}

    def report(self, result: TurnResult) -> dict[str, Any]:
        return {**result.kaname, "ignored": self.asked.ignored}


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    # no prompt cache here: Anthropic's cache counters are always 0
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _stop(result: TurnResult) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished turn."""
    if result.finish == "length":
        return "max_tokens", None
    if result.finish == "tool_calls":  # complete calls: the agent loop must run them
        return "tool_use", None
    if result.stopped_by_string:
        return "stop_sequence", result.stop_sequence
    return "end_turn", None


def _signature(thinking: str) -> str:
    """Anthropic's thinking blocks carry a signature that clients send back unchanged; kaname
    verifies none, so its own is a digest of the text (opaque, stable)."""
    return "kaname-" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as tool_use.input; {} where they are not a JSON object (a call cut
    off by max_tokens)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _thinking_block(text: str, hide: bool) -> dict[str, Any]:
    return {"type": "thinking", "thinking": "" if hide else text, "signature": _signature(text)}


def _tool_use(call: dict[str, Any], arguments: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
            "input": _input(arguments)}


def _blocks(message: dict[str, Any], asked: _Asked) -> list[dict[str, Any]]:
    """A chat assistant message as content blocks: thinking (always, where thinking is
    enabled, as Anthropic's models answer), text, tool_use (none empty)."""
    blocks = []
    if message.get("reasoning_content") or asked.thinking:
        blocks.append(_thinking_block(message.get("reasoning_content") or "",
                                      asked.hide_thinking))
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append(_tool_use(call, call["function"]["arguments"]))
    return blocks


class _BlockEvents:
    """Chat deltas → content-block events. A block opens at its first non-empty delta (as
    `_blocks` leaves empty ones out; an enabled thinking block opens before anything else) and
    closes when another kind of delta comes."""

    def __init__(self, asked: _Asked):
        self.hide, self.thinking_first = asked.hide_thinking, asked.thinking
        self.count = 0  # blocks started
        self.open: tuple[str, int] | None = None  # (kind, tool call index) of the open block
        self.tool_block: dict[int, int] = {}  # tool call index -> block index
        self.thinking = ""  # the open thinking block's text, for its signature

    def feed(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if text := delta.get("reasoning_content"):
            out += self._start_thinking()
            self.thinking += text
            if not self.hide:
                out.append(self._delta(self.count - 1, {"type": "thinking_delta",
                                                        "thinking": text}))
        if self.thinking_first and self.count == 0:  # thinking enabled, none written
            out += self._start_thinking()
        if text := delta.get("content"):
            out += self._start(("text", 0), {"type": "text", "text": ""})
            out.append(self._delta(self.count - 1, {"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or []:
            index, fn = call["index"], call.get("function") or {}
            if "id" in call:  # first sight of a call
                out += self._start(("tool", index), _tool_use(call, ""))
                self.tool_block[index] = self.count - 1
            if fn.get("arguments"):
                out.append(self._delta(self.tool_block[index], {
                    "type": "input_json_delta", "partial_json": fn["arguments"]}))
        return out

    def close(self) -> list[dict[str, Any]]:
        """Close the open block (at the end: after the thinking block it owes, if any)."""
        out = self._start_thinking() if self.thinking_first and self.count == 0 else []
        return out + self._stop()

    def _stop(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        out = []
        if self.open[0] == "thinking":
            out.append(self._delta(self.count - 1, {"type": "signature_delta",
                                                    "signature": _signature(self.thinking)}))
            self.thinking = ""
        out.append({"type": "content_block_stop", "index": self.count - 1})
        self.open = None
        return out

    def _start(self, key: tuple[str, int], block: dict[str, Any]) -> list[dict[str, Any]]:
        if self.open == key:
            return []
        out = self._stop()
        out.append({"type": "content_block_start", "index": self.count, "content_block": block})
        self.open, self.count = key, self.count + 1
        return out

    def _start_thinking(self) -> list[dict[str, Any]]:
        return self._start(("thinking", 0), {"type": "thinking", "thinking": "",
                                             "signature": ""})

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": delta}


async def _events(turns: Turns, turn: Turn, reply: _Reply
                  ) -> AsyncGenerator[dict[str, Any], None]:
    """message_start, ping, the blocks' events, message_delta, message_stop."""
    yield {"type": "message_start",
           "message": reply.head([], _usage(turns.backend.count_tokens(turn.call.prompt), 0))}
    yield {"type": "ping"}
    blocks = _BlockEvents(reply.asked)
    async with aclosing(turns.stream(turn)) as items:
        async for item in items:
            if not isinstance(item, TurnResult):
                for event in blocks.feed(item):
                    yield event
                continue
            for event in blocks.close():
                yield event
            reason, sequence = _stop(item)
            yield {"type": "message_delta",
                   "delta": {"stop_reason": reason, "stop_sequence": sequence},
                   "usage": _usage(item.gen.prompt_tokens, item.gen.completion_tokens),
                   "kaname": reply.report(item)}
            yield {"type": "message_stop"}
