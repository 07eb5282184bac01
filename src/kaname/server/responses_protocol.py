"""The Responses API's request (`POST /v1/responses`) and its translation into the one request
inside, a chat-completions body, with `Pointers` that lead errors back into what was sent.

Everything the client sends is either carried over, tolerated (a field that changes nothing
here: `store` is kaname's, `user`, `service_tier`...) or refused with a 400 naming it: an input
item, content part, tool or `include` value kaname cannot honour is never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import APIError
from .turn import Pointers

# Fields of a chat request (kaname's and vLLM's extensions) a Responses request may carry too;
# they are passed on as they are, so their errors keep their own names.
CHAT_EXTENSIONS = ("seed", "stop", "strict_level", "max_reasoning_tokens", "allow_unenforced",
                   "kaname", "chat_template_kwargs")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_TOOL_CHOICES = ("none", "auto", "required")


class ResponsesRequest(BaseModel):
    """The body of `POST /v1/responses`. Unknown fields are kept (extra) so the endpoint can
    refuse them by name, as OpenAI does ("Unknown parameter")."""

    model_config = ConfigDict(extra="allow")

    model: str
    # str | list of items | None, and a str | object: checked here, so that an error names
    # the field rather than a member of a union
    input: Any = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # tolerated: they change nothing in how kaname answers (echoed where OpenAI echoes them)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    max_tool_calls: int | None = Field(default=None, ge=0)  # bounds built-in tools: none here
    image: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None
    background_options: dict[str, Any] | None = None
    # refused unless unset / off (see `unsupported`)
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    context_management: Any = None
    moderation: Any = None
    top_logprobs: int | None = None
    # chat fields carried over (CHAT_EXTENSIONS)
    seed: Any = None
    stop: Any = None
    strict_level: Any = None
    max_reasoning_tokens: Any = None
    allow_unenforced: Any = None
    kaname: Any = None
    chat_template_kwargs: Any = None

    def refuse_unsupported(self) -> None:
        """A 400 for the first field kaname cannot honour (unknown ones included)."""
        for name in self.model_extra or {}:
            raise APIError(400, f"Unknown parameter: '{name}'.", param=name,
                           code="unknown_parameter")
        refused = (
            ("background", self.background, "background responses are not supported"),
            ("conversation", self.conversation, "conversations are not supported; use "
                                                "previous_response_id"),
            ("prompt", self.prompt, "prompt templates are not supported"),
            ("context_management", self.context_management,
             "context management (compaction) is not supported"),
            ("moderation", self.moderation, "moderation is not supported"),
            ("top_logprobs", self.top_logprobs, "logprobs are not supported"),
        )
        for name, value, why in refused:
            if value not in (None, False, 0, []):
                raise _unsupported(why, name)
        for i, inc in enumerate(self.include or ()):
            if inc == "message.output_text.logprobs":
                raise _unsupported("logprobs are not supported", f"/include/{i}")


def _unsupported(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="unsupported_parameter")


def _bad(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_request")


class ResponsesPointers(Pointers):
    """Pointers whose moved bare params (`reasoning_effort`, `max_tokens`, `messages`) come out
    in OpenAI's Responses spelling: `reasoning.effort`, `max_output_tokens`, `input`."""

    def __call__(self, pointer: str | None) -> str | None:
        moved = super().__call__(pointer)
        if pointer and moved and not pointer.startswith("/") and moved != pointer:
            return moved.replace("/", ".")
        return moved


@dataclass
class ChatBody:
    """A Responses request as a chat-completions body, and where its fields came from."""

    body: dict[str, Any] = field(default_factory=dict)
    moves: list[tuple[str, str]] = field(default_factory=list)

    def move(self, chat: str, sent: str) -> None:
        self.moves.append((chat, sent))

    @property
    def where(self) -> Pointers:
        return ResponsesPointers(tuple(self.moves))


# One item of the conversation and where it came from: "/input/3", or "/previous_response_id"
# for the items a stored response brings.
Located = tuple[Any, str]


def to_chat(req: ResponsesRequest, history: Sequence[Located]) -> ChatBody:
    """The chat-completions body of a Responses request whose conversation is `history` (a
    stored chain, may be empty) followed by its own input."""
    out = ChatBody()
    out.move("/messages", "/input")
    out.move("/max_completion_tokens", "/max_output_tokens")
    out.move("/max_tokens", "/max_output_tokens")
    out.move("/reasoning_effort", "/reasoning/effort")
    body = out.body
    body["model"] = req.model
    body["messages"] = _Messages(out).build(req.instructions, [*history, *input_items(req)])
    if req.tools is not None:
        body["tools"] = [_tool(t, i, out) for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        body["tool_choice"] = _tool_choice(req.tool_choice, out)
    if req.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.text is not None:
        fmt = _response_format(req.text, out)
        if fmt is not None:
            body["response_format"] = fmt
    if req.reasoning is not None:
        effort = reasoning_effort(req.reasoning)
        if effort is not None:
            body["reasoning_effort"] = "high" if effort == "xhigh" else effort
    for name in ("temperature", "top_p"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    if req.max_output_tokens is not None:
        body["max_completion_tokens"] = req.max_output_tokens
    for name in CHAT_EXTENSIONS:
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    return out


def input_items(req: ResponsesRequest) -> list[Located]:
    """The request's own input as items (a string is one user message)."""
    if req.input is None:
        return []
    if not isinstance(req.input, str | list):
        raise _bad("input is a string or a list of input items", "input")
    if isinstance(req.input, str):
        return [({"type": "message", "role": "user", "content": req.input}, "/input")]
    return [(item, f"/input/{i}") for i, item in enumerate(req.input)]


def reasoning_effort(reasoning: Mapping[str, Any]) -> str | None:
    effort = reasoning.get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise _bad(f"reasoning.effort is one of {', '.join(_EFFORTS)}", "/reasoning/effort")
    return effort


# ---- input items -> chat messages -----------------------------------------------------------

@dataclass
class _Turn:
    message: dict[str, Any]
    k: int  # its index in the messages
    stage: int  # the last stage it took: 0 reasoning, 1 text, 2 calls


class _Messages:
    """Input items → chat messages. A model's turn arrives as several items (reasoning, a
    message, function calls): consecutive ones become one assistant message, in that order."""

    def __init__(self, out: ChatBody):
        self.out = out
        self.messages: list[dict[str, Any]] = []
        self.turn: _Turn | None = None  # the assistant message being assembled

    def build(self, instructions: str | None, items: Sequence[Located]) -> list[dict[str, Any]]:
        if instructions is not None:
            self._add({"role": "system", "content": instructions}, "/instructions",
                      content="/instructions")
        for item, at in items:
            self._item(item, at)
        self._end_turn()
        return self.messages

    def _add(self, message: dict[str, Any], at: str, content: str | None = None) -> int:
        k = len(self.messages)
        self.messages.append(message)
        self.out.move(f"/messages/{k}", at)
        if content is not None:
            self.out.move(f"/messages/{k}/content", content)
        return k

    def _end_turn(self) -> None:
        self.turn = None

    def _assistant(self, at: str, stage: int) -> tuple[dict[str, Any], int]:
        """The assistant message (and its index) an item of `stage` (0 reasoning, 1 text,
        2 a call) belongs to: the open one while the items keep a turn's order (several
        calls, or reasoning in several items, stay in one), else a new one."""
        turn = self.turn
        if turn is None or turn.stage > stage or turn.stage == stage == 1:
            message: dict[str, Any] = {"role": "assistant", "content": None}
            turn = self.turn = _Turn(message, self._add(message, at), stage)
        turn.stage = stage
        return turn.message, turn.k

    def _item(self, item: Any, at: str) -> None:
        if not isinstance(item, Mapping):
            raise _bad("each input item is an object", at)
        kind = item.get("type", "message" if "role" in item else None)
        handlers = {"message": self._message, "reasoning": self._reasoning,
                    "function_call": self._call, "custom_tool_call": self._call,
                    "function_call_output": self._output,
                    "custom_tool_call_output": self._output}
        if kind is None:
            raise _bad("each input item has a type", f"{at}/type")
        handler = handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise _unsupported(f"input item type {kind!r} is not supported (message, "
                               "reasoning, function_call, function_call_output, "
                               "custom_tool_call, custom_tool_call_output)", f"{at}/type")
        handler(item, at)

    def _message(self, item: Mapping[str, Any], at: str) -> None:
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise _bad("a message's role is user, system, developer or assistant", f"{at}/role")
        if role == "assistant":
            message, k = self._assistant(at, 1)
            message["content"] = _text(item.get("content"), f"{at}/content")
            self.out.move(f"/messages/{k}/content", f"{at}/content")
            return
        self._end_turn()
        self._add({"role": role, "content": _parts(item.get("content"), f"{at}/content")},
                  at, content=f"{at}/content")

    def _reasoning(self, item: Mapping[str, Any], at: str) -> None:
        text = _reasoning_text(item, at)
        message, k = self._assistant(at, 0)
        # consecutive reasoning items are one block of reasoning
        message["reasoning_content"] = message.get("reasoning_content", "") + text
        self.out.move(f"/messages/{k}/reasoning_content", at)

    def _call(self, item: Mapping[str, Any], at: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _bad("a tool call needs its call_id", f"{at}/call_id")
        message, k = self._assistant(at, 2)
        calls = message.setdefault("tool_calls", [])
        c = len(calls)
        if item["type"] == "custom_tool_call":
            calls.append({"id": call_id, "type": "custom",
                          "custom": _present(item, "name", "input")})
            self.out.move(f"/messages/{k}/tool_calls/{c}/custom", at)
        else:
            _json_string(item.get("arguments", "{}"), f"{at}/arguments")
            calls.append({"id": call_id, "type": "function",
                          "function": _present(item, "name", "arguments")})
            self.out.move(f"/messages/{k}/tool_calls/{c}/function", at)
        self.out.move(f"/messages/{k}/tool_calls/{c}", at)

    def _output(self, item: Mapping[str, Any], at: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _bad("a tool call's output needs the call_id it answers", f"{at}/call_id")
        self._end_turn()
        if "output" not in item:
            raise _bad("a tool call's output needs its output", f"{at}/output")
        self._add({"role": "tool", "tool_call_id": call_id,
                   "content": _parts(item["output"], f"{at}/output")}, at,
                  content=f"{at}/output")


def _json_string(value: Any, at: str) -> None:
    """A function call's arguments: JSON text (checked here, where the pointer is known)."""
    if not isinstance(value, str):
        raise _bad("a function call's arguments are a string of JSON", at)
    try:
        json.loads(value)
    except ValueError as e:
        raise _bad(f"a function call's arguments are not JSON: {e}", at) from None


def _present(item: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The keys of `item` that it has (a missing one is then the chat request's error)."""
    return {k: item[k] for k in keys if k in item}


_TEXT_PARTS = ("input_text", "output_text", "text")


def _part_text(part: Any, at: str, *, assistant: bool = False) -> str:
    """The text of one content part; a part that is not text (an image, a file...) is a 400."""
    if not isinstance(part, Mapping):
        raise _bad("each content part is an object", at)
    kind = part.get("type")
    key = "refusal" if kind == "refusal" and assistant else "text"
    if kind not in _TEXT_PARTS and key != "refusal":
        raise _unsupported(f"content part type {kind!r} is not supported (text only)",
                           f"{at}/type")
    text = part.get(key)
    if not isinstance(text, str):
        raise _bad(f"a {kind} part needs its {key}", f"{at}/{key}")
    return text


def _parts(content: Any, at: str) -> Any:
    """A message's content (a string, or text parts) in chat shape."""
    if not isinstance(content, list):
        return content  # a string; anything else is the chat request's error, moved here
    return [{"type": "text", "text": _part_text(p, f"{at}/{j}")} for j, p in enumerate(content)]


def _text(content: Any, at: str) -> Any:
    """An assistant message's content as one string (output_text and refusal parts)."""
    if not isinstance(content, list):
        return content
    return "".join(_part_text(p, f"{at}/{j}", assistant=True) for j, p in enumerate(content))


def _reasoning_text(item: Mapping[str, Any], at: str) -> str:
    """A reasoning item's text: its reasoning_text parts (what kaname returns), else its
    summary. Encrypted reasoning alone cannot be read here: a 400, not a silent drop."""
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise _bad(f"a reasoning item's {key} is a list", f"{at}/{key}")
        texts = []
        for j, p in enumerate(parts):
            if not isinstance(p, Mapping) or p.get("type") != kind \
                    or not isinstance(p.get("text"), str):
                raise _bad(f"each part of a reasoning item's {key} is "
                           f'{{"type": "{kind}", "text"}}', f"{at}/{key}/{j}")
            texts.append(p["text"])
        if texts:
            return "".join(texts)
    if item.get("encrypted_content"):
        raise _unsupported("encrypted reasoning is not supported; send the reasoning_text "
                           "content kaname returned", f"{at}/encrypted_content")
    return ""


# ---- tools, tool_choice, text.format --------------------------------------------------------

def _name(obj: Mapping[str, Any], at: str) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 256:
        raise _bad("a name is a string of 1 to 256 characters", f"{at}/name")
    return name


def _tool(tool: Any, i: int, out: ChatBody) -> dict[str, Any]:
    at = f"/tools/{i}"
    if not isinstance(tool, Mapping):
        raise _bad("each tool is an object", at)
    kind = tool.get("type")
    if kind == "function":
        fn: dict[str, Any] = {"name": _name(tool, at), **_present(tool, "description",
                                                                  "parameters")}
        # the Responses API's function tools are strict unless they say otherwise
        fn["strict"] = tool.get("strict") is not False
        if tool.get("defer_loading"):
            raise _unsupported("deferred tools (tool search) are not supported",
                               f"{at}/defer_loading")
        for key, want in (("description", str), ("parameters", dict)):
            if fn.get(key) is not None and not isinstance(fn[key], want):
                raise _bad(f"a function's {key} is a{'n object' if want is dict else ' string'}",
                           f"{at}/{key}")
        out.move(f"{at}/function", at)
        return {"type": "function", "function": fn}
    if kind == "custom":
        spec: dict[str, Any] = {"name": _name(tool, at), **_present(tool, "description")}
        if spec.get("description") is not None and not isinstance(spec["description"], str):
            raise _bad("a custom tool's description is a string", f"{at}/description")
        fmt = tool.get("format")
        if fmt is not None:
            spec["format"] = _custom_format(fmt)
        out.move(f"{at}/custom", at)
        out.move(f"{at}/custom/format/grammar", f"{at}/format")
        return {"type": "custom", "custom": spec}
    raise _unsupported(f"tool type {kind!r} is not supported (function and custom tools)",
                       f"{at}/type")


def _custom_format(fmt: Any) -> Any:
    """The flat grammar format in chat's shape; the chat request's model checks it (its
    errors are moved back to this format's pointers)."""
    if isinstance(fmt, Mapping) and fmt.get("type") == "grammar":
        return {"type": "grammar", "grammar": _present(fmt, "syntax", "definition")}
    return fmt


def _tool_choice(choice: Any, out: ChatBody) -> Any:
    at = "/tool_choice"
    if not isinstance(choice, str | Mapping):
        raise _bad("tool_choice is none, auto, required or an object", at)
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise _bad("tool_choice is none, auto, required or an object", at)
        return choice
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return {"type": kind, kind: {"name": _name(choice, at)}}
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise _bad("allowed_tools' mode is auto or required", f"{at}/mode")
        tools = choice.get("tools")
        if not isinstance(tools, list) or not tools:
            raise _bad("allowed_tools names at least one tool", f"{at}/tools")
        for j, t in enumerate(tools):
            if not isinstance(t, Mapping) or t.get("type") not in ("function", "custom"):
                raise _unsupported("each allowed tool is a function or custom tool "
                                   '({"type", "name"})', f"{at}/tools/{j}")
            _name(t, f"{at}/tools/{j}")
        out.move(f"{at}/allowed_tools", at)
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}
    raise _unsupported(f"tool_choice type {kind!r} is not supported (function, custom, "
                       "allowed_tools)", f"{at}/type")


def _response_format(text: Mapping[str, Any], out: ChatBody) -> dict[str, Any] | None:
    fmt = text.get("format")
    if fmt is None:
        return None
    at = "/text/format"
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object",
                                                                "json_schema"):
        raise _bad("text.format's type is text, json_object or json_schema", f"{at}/type")
    if fmt["type"] != "json_schema":
        return {"type": fmt["type"]}
    schema = fmt.get("schema")
    if not isinstance(schema, dict | bool):
        raise _bad("a json_schema format needs its schema (an object)", f"{at}/schema")
    spec = {"schema": schema, **_present(fmt, "name", "description", "strict")}
    for key, want in (("name", str), ("description", str), ("strict", bool)):
        if spec.get(key) is not None and not isinstance(spec[key], want):
            raise _bad(f"text.format.{key} is a {want.__name__}", f"{at}/{key}")
    out.move("/response_format/json_schema", at)
    out.move("/response_format", at)
    return {"type": "json_schema", "json_schema": spec}
