"""Anthropic's Messages API at the edge: its wire body → `TurnRequest` (`to_turn`), and a
turn's result → its message and stream events (`MessageReply`, `BlockEvents`).

Field policy: what Anthropic's API defines and kaname has no meaning for (metadata,
cache_control, context_management, output_config.effort, server tools, MCP servers, the
billing header Claude Code puts in `system`...) is accepted and listed in `kaname.ignored`;
what a text-only model cannot read (images, documents) and a prefilled assistant turn are a
400 naming the field. Content blocks are read one at a time by their own model (`BLOCKS`), so
an error points at the block.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..chat import TurnResult
from ..decoding.generation import Usage
from ..errors import RequestError
from ..formats import ParsedTurn, items
from ..formats.items import Delta, TextDelta
from ..formats.request import Ignored, Origins, ReasoningAsk, Tool, TurnRequest
from ..grammar import JsonSchema
from .common import (
    AnthropicToolName,
    DocumentedAs,
    DraftCounts,
    KanameOptions,
    Loose,
    RequestBody,
    TurnReport,
    Wire,
    draft_counts,
    extras,
    read,
    sampling,
)


def _as_blocks(value: Any) -> Any:
    """A string is one text block (Anthropic takes either for message and system content)."""
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


def _invalid(message: str) -> PydanticCustomError:
    # (a ValueError's message would read "Value error, ...")
    return PydanticCustomError("value_error", message)


# ---- content blocks (read one at a time, see messages_api._block) ---------------------------

class TextBlockIn(Loose):
    type: Literal["text"]
    text: str


class ThinkingBlockIn(Loose):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # kaname's own are not checked: it has nothing to verify


class RedactedThinkingBlockIn(Loose):
    type: Literal["redacted_thinking"]
    data: str = ""


class ToolUseBlockIn(Loose):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class OtherBlockIn(Loose):
    """A block Anthropic's API defines that a text-only model cannot read (image, document,
    search_result...): a 400 naming it. Documented so that clients see what is defined."""

    type: str


class ToolResultBlockIn(Loose):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Annotated[list[dict[str, Any]],
                       DocumentedAs(str | list[TextBlockIn | OtherBlockIn])] = \
        Field(default_factory=list)
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class ToolIn(Loose):
    """A client tool (`type` absent or "custom"); server tools (web search, code execution,
    ...) are not offered to the model and are listed as ignored before this model reads
    them."""

    type: Literal["custom"] | None = None
    name: AnthropicToolName
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        # a tool's input is an object (tool_use.input); Anthropic refuses anything else too
        if v.get("type", "object") != "object":
            raise _invalid('input_schema must have type "object"')
        return v


class ServerToolIn(Loose):
    """A tool Anthropic runs (web search, code execution...: `type` names its version): not
    offered to the model here, listed in `kaname.ignored`."""

    type: str
    name: str


# What the request's block lists hold, as /openapi.json documents them: each block is read by
# its own model (`BLOCKS`) when the edge reaches it, so an error points at the block.
BlockIn = (TextBlockIn | ThinkingBlockIn | RedactedThinkingBlockIn | ToolUseBlockIn
           | ToolResultBlockIn | OtherBlockIn)


# ---- the request ---------------------------------------------------------------------------

class MessageIn(Loose):
    # "system": the per-turn-control / mid-conversation betas put system text between turns
    role: Literal["user", "assistant", "system"]
    content: Annotated[list[dict[str, Any]], DocumentedAs(str | list[BlockIn])]

    @field_validator("content", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class ToolChoiceIn(Loose):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoiceIn:
        if self.type == "tool" and not self.name:
            raise _invalid('tool_choice of type "tool" needs the tool\'s name')
        return self


class ThinkingIn(Loose):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)
    # "omitted" leaves the text out of the reply; other displays (summarized, updates...)
    # show it whole: kaname has no summariser
    display: str | None = None

    @model_validator(mode="after")
    def _budget(self) -> ThinkingIn:
        if self.type == "enabled" and self.budget_tokens is None:
            raise _invalid('thinking of type "enabled" needs budget_tokens')
        return self


class OutputFormatIn(Loose):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")
    # kaname's: Anthropic's structured outputs are always strict (a schema that cannot be
    # enforced fully is a 400); false enforces what can be and post-checks the rest
    strict: bool = True


class OutputConfigIn(Loose):
    format: OutputFormatIn | None = None
    effort: str | None = None  # accepted, ignored (reported in kaname.ignored)


class CountTokensRequest(RequestBody):
    """`POST /v1/messages/count_tokens`: a Messages request without max_tokens."""

    model: str
    messages: list[MessageIn] = Field(min_length=1)
    system: Annotated[list[dict[str, Any]] | None,
                      DocumentedAs(str | list[TextBlockIn | OtherBlockIn] | None)] = None
    tools: Annotated[list[dict[str, Any]] | None,
                     DocumentedAs(list[ToolIn | ServerToolIn] | None)] = None
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None
    output_config: OutputConfigIn | None = None
    output_format: OutputFormatIn | None = None  # the structured-outputs beta's spelling
    # kaname's extensions, with their chat-completions meaning
    strict_level: Literal["full", "names", "off"] | None = None
    allow_unenforced: bool = False
    kaname: KanameOptions | None = None

    @field_validator("system", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)  # Anthropic's range; 0 keeps every token
    stream: bool = False
    seed: int | None = None  # kaname's (Anthropic has none): the same seed, the same answer


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
# Claude Code's first system block: billing metadata for Anthropic's servers, not prompt text
BILLING_HEADER = "x-anthropic-billing-header:"

ORIGINS = Origins(messages="/messages", tools="/tools", tool_choice="/tool_choice",
                  allowed_tools="/tool_choice", content="/output_config/format",
                  schema="/output_config/format/schema", reasoning="/thinking",
                  max_reasoning_tokens="/thinking/budget_tokens", max_tokens="/max_tokens")


def to_turn(req: CountTokensRequest) -> TurnRequest:
    """A Messages (or count_tokens) request as the one request inside."""
    ignored = extras(req)
    turn: list[items.Item] = []
    _system(req, turn, ignored)
    if req.messages[-1].role == "assistant":
        # Anthropic continues a trailing assistant turn; kaname's grammar starts a new one
        raise RequestError("prefilling the assistant turn is not supported: end with a user "
                           "message (for structured output use output_config.format)",
                           pointer=f"/messages/{len(req.messages) - 1}/role",
                           code="unsupported_parameter")
    for i, m in enumerate(req.messages):
        _message(m, f"/messages/{i}", turn, ignored)
    tools = _tools(req, ignored)
    choice, parallel = _tool_choice(req, tools)
    constraint, origins = _output_format(req, ignored)
    thinking = req.thinking
    budget = thinking.budget_tokens if thinking is not None and thinking.type == "enabled" \
        else None
    extra: dict[str, Any] = {}
    if isinstance(req, MessagesRequest):
        if budget is not None and budget >= req.max_tokens:
            raise RequestError(f"must be less than max_tokens ({req.max_tokens}): thinking "
                               "counts toward max_tokens", pointer="/thinking/budget_tokens")
        extra = {"max_tokens": req.max_tokens,
                 "sampling": sampling(req.temperature, req.top_p, req.seed,
                                      req.stop_sequences, top_k=req.top_k)}
    return TurnRequest(
        tools=tools, tool_choice=choice, parallel_tool_calls=parallel, constraint=constraint,
        max_reasoning_tokens=budget, messages=tuple(turn), model=req.model,
        reasoning_asked=_reasoning(req), allow_unenforced=req.allow_unenforced,
        strict_level_asked=req.strict_level, origins=origins,
        guards=req.kaname.guard_overrides() if req.kaname else {},
        draft=req.kaname.draft if req.kaname else True, ignored=tuple(ignored),
        **extra)


def _block(raw: Any, at: str, holder: str) -> Any:
    """One content block, read by the model for its type in `holder` (user, assistant, system,
    tool_result)."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(kind, str):  # (first: a type such as {} cannot even be looked up)
        raise RequestError("each content block needs a type: " + ", ".join(BLOCKS[holder]),
                           pointer=f"{at}/type")
    if kind in UNREADABLE:
        raise RequestError(f"{kind} blocks are not supported: this server's model reads text "
                           "only; send the content as text", pointer=f"{at}/type",
                           code="unsupported_parameter")
    model = BLOCKS[holder].get(kind)
    if model is None:
        where = {"system": "system", "tool_result": "a tool_result's content"}.get(
            holder, f"an {holder} message" if holder == "assistant" else f"a {holder} message")
        raise RequestError(f"{kind!r} blocks are not supported in {where}; it takes "
                           + ", ".join(BLOCKS[holder]), pointer=f"{at}/type",
                           code="unsupported_parameter")
    return read(model, raw, at)


def _texts(blocks: list[dict[str, Any]], at: str, holder: str,
           ignored: list[Ignored]) -> str:
    """The text of text blocks (system text or a system message); Claude Code's billing
    header is metadata, not prompt text: left out and listed."""
    out = []
    for k, raw in enumerate(blocks):
        block = _block(raw, f"{at}/{k}", holder)
        ignored += extras(block, f"{at}/{k}")
        if block.text.startswith(BILLING_HEADER):
            ignored.append(Ignored(f"{at}/{k}", "billing metadata for Anthropic's servers; "
                                                "left out of the prompt"))
            continue
        out.append(block.text)
    return "\n\n".join(t for t in out if t)


def _system(req: CountTokensRequest, turn: list[items.Item], ignored: list[Ignored]) -> None:
    if req.system:
        text = _texts(req.system, "/system", "system", ignored)
        if text:
            turn.append(items.Text("system", text, "/system"))


def _message(m: MessageIn, at: str, turn: list[items.Item], ignored: list[Ignored]) -> None:
    if m.role == "system":
        turn.append(items.Text("system", _texts(m.content, f"{at}/content", "system",
                                                ignored), at))
        return
    if m.role == "user":
        _user(m, at, turn, ignored)
        return
    start = len(turn)
    for k, raw in enumerate(m.content):
        where = f"{at}/content/{k}"
        block = _block(raw, where, "assistant")
        ignored += extras(block, where)
        if isinstance(block, TextBlockIn):
            turn.append(items.AssistantText(block.text, where))
        elif isinstance(block, ThinkingBlockIn):
            turn.append(items.Reasoning(block.thinking, where))
        elif isinstance(block, RedactedThinkingBlockIn):
            ignored.append(Ignored(where, "redacted_thinking is encrypted by Anthropic, "
                                          "unreadable here; left out of the prompt"))
        else:
            turn.append(items.ToolCall(block.id, block.name,
                                       json.dumps(block.input, ensure_ascii=False), where))
    if len(turn) > start:  # one message is one assistant turn
        turn[start] = items.starting_turn(turn[start])


def _user(m: MessageIn, at: str, turn: list[items.Item], ignored: list[Ignored]) -> None:
    """Text runs become user text and each tool_result a tool result, in their order."""
    text: list[str] | None = None
    for k, raw in enumerate(m.content):
        where = f"{at}/content/{k}"
        block = _block(raw, where, "user")
        ignored += extras(block, where)
        if isinstance(block, TextBlockIn):
            text = [*(text or []), block.text]
            continue
        if text is not None:
            turn.append(items.Text("user", "".join(text), at))
            text = None
        result = "".join(_block(b, f"{where}/content/{n}", "tool_result").text
                         for n, b in enumerate(block.content))
        turn.append(items.ToolResult(block.tool_use_id, result, where,
                                     is_error=block.is_error))
    if text is not None or not m.content:
        turn.append(items.Text("user", "".join(text or []), at))


def _tools(req: CountTokensRequest, ignored: list[Ignored]) -> tuple[Tool, ...]:
    tools = []
    for i, raw in enumerate(req.tools or []):
        at = f"/tools/{i}"
        kind = raw.get("type") if isinstance(raw, dict) else None
        if kind not in (None, "custom"):
            ignored.append(Ignored(at, f"{kind!r} is one of Anthropic's server tools, which "
                                       "this server does not run: not offered to the model"))
            continue
        tool = read(ToolIn, raw, at)
        ignored += extras(tool, at)
        tools.append(Tool(tool.name, tool.input_schema, tool.description or "",
                          strict=tool.strict is True, schema_at=f"{at}/input_schema"))
    return tuple(tools)


def _tool_choice(req: CountTokensRequest, tools: tuple[Tool, ...]) -> tuple[str, bool]:
    choice = req.tool_choice
    if choice is None:
        return ("auto" if tools else "none"), True
    if choice.type in ("any", "tool") and not tools:
        raise RequestError(f"tool_choice {choice.type!r} needs tools", pointer="/tool_choice/type")
    name = choice.name if choice.type == "tool" and choice.name else \
        {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, "auto")
    return name, not choice.disable_parallel_tool_use


def _output_format(req: CountTokensRequest, ignored: list[Ignored]
                   ) -> tuple[JsonSchema | None, Origins]:
    config = req.output_config
    given = [(at, f) for at, f in (("/output_config/format", config.format if config else None),
                                   ("/output_format", req.output_format)) if f is not None]
    if config is not None and config.effort is not None:
        ignored.append(Ignored("/output_config/effort", "kaname's budget for reasoning is "
                                                        "thinking.budget_tokens"))
    if len(given) > 1:
        raise RequestError("give one of output_config.format and output_format",
                           pointer="/output_format")
    if not given:
        return None, ORIGINS
    at, fmt = given[0]
    origins = dataclasses.replace(ORIGINS, content=at, schema=f"{at}/schema")
    # Anthropic's structured outputs always match their schema: strict, as OpenAI's strict
    # true (a schema kaname cannot enforce fully is a 400 naming keyword and pointer)
    return JsonSchema(fmt.schema_, strict=fmt.strict), origins


def _reasoning(req: CountTokensRequest) -> ReasoningAsk | None:
    thinking = req.thinking
    if thinking is None:  # Anthropic's API thinks only when asked to
        return ReasoningAsk("off", "/thinking")
    if thinking.type == "adaptive":  # the server's default: the model may reason
        return None
    return ReasoningAsk("required" if thinking.type == "enabled" else "off", "/thinking")


# ---- the turn → Anthropic's shape -----------------------------------------------------------

def usage(result: TurnResult | None, input_tokens: int = 0) -> dict[str, int]:
    # no prompt cache here: Anthropic's cache counters are always 0
    u = result.usage if result is not None else Usage(input_tokens, 0)
    return {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, **draft_counts(u)}


def stop_reason(result: TurnResult) -> tuple[str, str | None]:
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
    off by max_tokens), or are nested deeper than Python reads (a grammar that allows any
    value bounds no depth; the call's post-check says it could not check them)."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _thinking_block(text: str, hide: bool) -> dict[str, Any]:
    return {"type": "thinking", "thinking": "" if hide else text, "signature": _signature(text)}


def _tool_use(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": _input(arguments)}


class MessageReply:
    """How a request's reply looks: thinking shown or not, a thinking block always first
    (thinking enabled, as Anthropic's models answer)."""

    def __init__(self, req: CountTokensRequest, response_id: str, model: str):
        thinking = req.thinking
        self.id, self.model = f"msg_{response_id}", model
        self.thinking_first = thinking is not None and thinking.type == "enabled"
        self.hide = thinking is not None and thinking.display == "omitted"

    def head(self, content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": None, "stop_sequence": None,
                "usage": usage}

    def body(self, result: TurnResult) -> dict[str, Any]:
        reason, sequence = stop_reason(result)
        return {**self.head(self.blocks(result.turn), usage(result)),
                "stop_reason": reason, "stop_sequence": sequence, "kaname": result.report}

    def blocks(self, turn: ParsedTurn) -> list[dict[str, Any]]:
        """A parsed turn as content blocks: thinking, text, tool_use (none empty)."""
        blocks = []
        if turn.reasoning_content or self.thinking_first:
            blocks.append(_thinking_block(turn.reasoning_content or "", self.hide))
        if turn.content:
            blocks.append({"type": "text", "text": turn.content})
        for call in turn.tool_calls:
            # (Messages tools are all JSON tools: no custom call comes back here)
            blocks.append(_tool_use(call.id, call.name, call.arguments))
        return blocks

    def delta(self, result: TurnResult) -> list[dict[str, Any]]:
        reason, sequence = stop_reason(result)
        return [{"type": "message_delta",
                 "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": usage(result), "kaname": result.report},
                {"type": "message_stop"}]


class BlockEvents:
    """Typed deltas → content-block events. A block opens at its first non-empty delta (as
    `blocks` leaves empty ones out; an enabled thinking block opens before anything else) and
    closes when another kind of delta comes."""

    def __init__(self, reply: MessageReply):
        self.hide, self.thinking_first = reply.hide, reply.thinking_first
        self.count = 0  # blocks started
        self.open: tuple[str, int] | None = None  # (kind, tool call index) of the open block
        self.tool_block: dict[int, int] = {}  # tool call index -> block index
        self.thinking = ""  # the open thinking block's text, for its signature

    def feed(self, delta: Delta) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if isinstance(delta, TextDelta) and delta.kind == "reasoning":
            out += self._start_thinking()
            self.thinking += delta.text
            if not self.hide:
                out.append(self._delta(self.count - 1, {"type": "thinking_delta",
                                                        "thinking": delta.text}))
            return out
        if self.thinking_first and self.count == 0:  # thinking enabled, none written
            out += self._start_thinking()
        if isinstance(delta, TextDelta):
            out += self._start(("text", 0), {"type": "text", "text": ""})
            out.append(self._delta(self.count - 1, {"type": "text_delta",
                                                    "text": delta.text}))
            return out
        if delta.id is not None:  # first sight of a call
            out += self._start(("tool", delta.index), _tool_use(delta.id, delta.name or "", ""))
            self.tool_block[delta.index] = self.count - 1
        if delta.fragment:  # (Messages tools are all JSON: no custom tool streams here)
            out.append(self._delta(self.tool_block[delta.index], {
                "type": "input_json_delta", "partial_json": delta.fragment}))
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


# ---- the answer's shape, as /openapi.json documents it ---------------------------------------

class TextBlock(Wire):
    type: Literal["text"]
    text: str


class ThinkingBlock(Wire):
    type: Literal["thinking"]
    thinking: str  # "" with thinking.display "omitted"
    signature: str


class ToolUseBlock(Wire):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


Block = TextBlock | ThinkingBlock | ToolUseBlock
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class MessageUsage(DraftCounts):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class Message(Wire):
    """The body of a message (`stream` false); `message_start` carries it without `kaname`,
    stop_reason null."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[Block]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: MessageUsage
    kaname: TurnReport | None = None  # on every complete message


class TokenCount(Wire):
    """The body of `POST /v1/messages/count_tokens`."""

    input_tokens: int


class MessageStart(Wire):
    type: Literal["message_start"]
    message: Message


class Ping(Wire):
    type: Literal["ping"]


class BlockStart(Wire):
    type: Literal["content_block_start"]
    index: int
    content_block: Block


class TextDeltaOut(Wire):
    type: Literal["text_delta"]
    text: str


class ThinkingDeltaOut(Wire):
    type: Literal["thinking_delta"]
    thinking: str


class SignatureDelta(Wire):
    type: Literal["signature_delta"]
    signature: str


class InputJsonDelta(Wire):
    type: Literal["input_json_delta"]
    partial_json: str


class BlockDelta(Wire):
    type: Literal["content_block_delta"]
    index: int
    delta: TextDeltaOut | ThinkingDeltaOut | SignatureDelta | InputJsonDelta


class BlockStop(Wire):
    type: Literal["content_block_stop"]
    index: int


class StopDelta(Wire):
    stop_reason: StopReason
    stop_sequence: str | None


class MessageDelta(Wire):
    type: Literal["message_delta"]
    delta: StopDelta
    usage: MessageUsage
    kaname: TurnReport


class MessageStop(Wire):
    type: Literal["message_stop"]


# One event of a streamed message (its SSE event name is its `type`); an error after the 200
# is an `error` event in the shape of Anthropic's error bodies.
StreamEvent = (MessageStart | Ping | BlockStart | BlockDelta | BlockStop | MessageDelta
               | MessageStop)
