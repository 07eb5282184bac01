"""OpenAI's chat completions at the edge: its wire body → `TurnRequest` (`to_turn`), and a
turn's result → its response body and stream chunks (`ChatReply`).

Python's `kaname.chat()` speaks this shape too, through `turn_from_chat`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from ..chat import TurnResult
from ..errors import TOO_DEEP, RequestError
from ..formats import items
from ..formats.request import ReasoningAsk, Tool, TurnRequest
from .common import (
    DocumentedAs,
    DraftCounts,
    Loose,
    OpenAIToolName,
    Refused,
    SamplingFields,
    TurnReport,
    Wire,
    custom_tool,
    draft_counts,
    extras,
    read,
    refuse,
)

# Fields that would change what the client gets back, which kaname does not serve (README,
# "Field policy"): a 400 naming them, unless they ask for nothing.
REFUSED = (
    Refused("n", "several choices are not served; send n requests", (None, 1)),
    Refused("logprobs", "log probabilities are not returned by this server"),
    Refused("top_logprobs", "log probabilities are not returned by this server", (None, 0)),
    Refused("logit_bias", "token biases are not applied by this server", (None, {})),
    Refused("modalities", "this server's model answers in text only", (None, ["text"])),
    Refused("audio", "this server's model answers in text only", (None,)),
)


class FunctionCall(Loose):
    name: str
    arguments: str | dict[str, Any] = "{}"


class CustomCall(Loose):
    name: str
    input: str = ""


class ToolCallIn(Loose):
    """A call in the history: a function call, or a custom tool's (`type: "custom"`)."""

    id: str = ""
    type: Literal["function", "custom"] = "function"
    function: FunctionCall | None = None
    custom: CustomCall | None = None

    @model_validator(mode="after")
    def _one_call(self) -> ToolCallIn:
        if (self.function if self.type == "function" else self.custom) is None:
            raise ValueError(f"a {self.type} tool call needs its `{self.type}` object")
        return self


class TextPart(Loose):
    type: Literal["text"]
    text: str


class OtherPart(Loose):
    """A part the API defines that a text-only model cannot read (image_url, input_audio,
    file...): a 400 naming it. Documented so that clients see what is defined."""

    type: str


class ChatMessage(Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    # parts are read by hand (`_text`): an error names the part
    content: Annotated[str | list[dict[str, Any]] | None,
                       DocumentedAs(str | list[TextPart | OtherPart] | None)] = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(Loose):
    name: OpenAIToolName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(Loose):
    type: Literal["function"] = "function"
    function: FunctionDef


class GrammarDef(Loose):
    syntax: Literal["lark", "regex"]
    definition: str = Field(min_length=1)


class CustomFormat(Loose):
    type: Literal["text", "grammar"] = "text"
    grammar: GrammarDef | None = None

    @model_validator(mode="after")
    def _grammar_given(self) -> CustomFormat:
        if self.type == "grammar" and self.grammar is None:
            raise ValueError('a format of type "grammar" needs its `grammar` object')
        return self


class CustomDef(Loose):
    name: OpenAIToolName
    description: str | None = None
    format: CustomFormat | None = None


class CustomToolDef(Loose):
    """OpenAI's custom tool: free-form input, bound to a Lark or regex grammar if given."""

    type: Literal["custom"]
    custom: CustomDef


def _tool_kind(value: Any) -> str:
    """Which tool model reads a tool: by its `type` (function where it has none). The tags
    are not field names, so error locations read against the body skip them."""
    kind = value.get("type", "function") if isinstance(value, dict) \
        else getattr(value, "type", "function")
    return "custom-tool" if kind == "custom" else "function-tool"


AnyTool = Annotated[Annotated[ToolDef, Tag("function-tool")]
                    | Annotated[CustomToolDef, Tag("custom-tool")], Discriminator(_tool_kind)]


class NamedFunction(Loose):
    name: str


class NamedToolChoice(Loose):
    type: Literal["function"] = "function"
    function: NamedFunction


class NamedCustomChoice(Loose):
    type: Literal["custom"]
    custom: NamedFunction


class AllowedTools(Loose):
    mode: Literal["auto", "required"] = "auto"
    tools: list[dict[str, Any]] = Field(min_length=1)


class AllowedToolsChoice(Loose):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class JsonSchemaSpec(Loose):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(Loose):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[AnyTool] | None = None
    tool_choice: (Literal["none", "auto", "required"] | NamedToolChoice | NamedCustomChoice
                  | AllowedToolsChoice | None) = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # kaname's extensions
    strict_level: Literal["full", "names", "off"] | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=1)
    allow_unenforced: bool = False


def turn_from_chat(body: Mapping[str, Any]) -> TurnRequest:
    """A chat-completions body (as a dict) → TurnRequest; errors name its pointers."""
    return to_turn(read(ChatCompletionRequest, body))


def to_turn(req: ChatCompletionRequest) -> TurnRequest:
    refuse(req, REFUSED)
    tools = tuple(_tool(t, i) for i, t in enumerate(req.tools or ()))
    choice, allowed = _tool_choice(req, tools)
    ignored = [*extras(req), *(i for k, m in enumerate(req.messages)
                               for i in extras(m, f"/messages/{k}"))]
    return TurnRequest(
        tools=tools, tool_choice=choice, allowed_tools=allowed,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        response_format=_response_format(req),
        max_reasoning_tokens=req.max_reasoning_tokens,
        messages=tuple(m for k, msg in enumerate(req.messages) for m in _items(msg, k)),
        model=req.model, reasoning_asked=_reasoning(req),
        max_tokens=req.max_completion_tokens or req.max_tokens,
        sampling=req.to_sampling(),
        guards=req.kaname.guard_overrides() if req.kaname else {},
        draft=req.kaname.draft if req.kaname else True,
        allow_unenforced=req.allow_unenforced, strict_level_asked=req.strict_level,
        ignored=tuple(ignored))


def _text(content: str | list[dict[str, Any]] | None, at: str) -> str:
    """A message's content: a string, or text parts (a model here reads text only)."""
    if content is None or isinstance(content, str):
        return content or ""
    out = []
    for j, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestError(f"content part type {part.get('type')!r} is not supported: "
                               "this server's model reads text only",
                               pointer=f"{at}/{j}", code="unsupported_parameter")
        out.append(part["text"])
    return "".join(out)


def _items(m: ChatMessage, k: int) -> list[items.Item]:
    at = f"/messages/{k}"
    if m.role in ("system", "developer", "user"):
        return [items.Text(m.role, _text(m.content, f"{at}/content"), at)]
    if m.role == "tool":
        return [items.ToolResult(m.tool_call_id or "", _text(m.content, f"{at}/content"), at,
                                 name=m.name)]
    out: list[items.Item] = []
    if m.reasoning_content:
        out.append(items.Reasoning(m.reasoning_content, at))
    if m.content is not None or not (m.tool_calls or m.reasoning_content):
        out.append(items.AssistantText(_text(m.content, f"{at}/content"), at))
    for j, call in enumerate(m.tool_calls or ()):
        where = f"{at}/tool_calls/{j}"
        if call.type == "custom" and call.custom is not None:
            out.append(items.ToolCall(call.id, call.custom.name, call.custom.input, where,
                                      custom=True))
        elif call.function is not None:
            args = call.function.arguments
            out.append(items.ToolCall(call.id, call.function.name,
                                      _arguments(args, f"{where}/function/arguments"), where))
    if out:  # one chat message is one assistant turn
        out[0] = items.starting_turn(out[0])
    return out


def _arguments(args: str | dict[str, Any], at: str) -> str:
    """A call's arguments as JSON text (templates write them verbatim); checked here, where
    the pointer is known."""
    if isinstance(args, dict):
        return json.dumps(args, ensure_ascii=False)
    try:
        json.loads(args)
    except ValueError as e:
        raise RequestError(f"tool call arguments are not JSON: {e}", pointer=at) from None
    except RecursionError:
        raise RequestError(TOO_DEEP, pointer=at) from None
    return args


def _tool(t: ToolDef | CustomToolDef, i: int) -> Tool:
    at = f"/tools/{i}"
    if isinstance(t, CustomToolDef):
        fmt = t.custom.format
        if fmt is None or fmt.type == "text" or fmt.grammar is None:
            return custom_tool(t.custom.name, t.custom.description, None, None,
                               f"{at}/custom/format")
        return custom_tool(t.custom.name, t.custom.description, fmt.grammar.syntax,
                           fmt.grammar.definition, f"{at}/custom/format/grammar")
    fn = t.function
    return Tool(fn.name, fn.parameters, fn.description or "", strict=fn.strict is True,
                schema_at=f"{at}/function/parameters")


def _tool_choice(req: ChatCompletionRequest, tools: tuple[Tool, ...]
                 ) -> tuple[str, tuple[str, ...] | None]:
    """(tool_choice, allowed_tools) as TurnRequest reads them."""
    choice = req.tool_choice
    if choice is None:
        return ("auto" if tools else "none"), None
    if isinstance(choice, str):
        return choice, None
    if isinstance(choice, AllowedToolsChoice):
        names = []
        for j, t in enumerate(choice.allowed_tools.tools):
            inner = t.get(t.get("type", "function"))
            name = inner.get("name") if isinstance(inner, dict) else t.get("name")
            if not isinstance(name, str):
                raise RequestError("each allowed tool names a tool",
                                   pointer=f"/tool_choice/allowed_tools/tools/{j}")
            names.append(name)
        return choice.allowed_tools.mode, tuple(names)
    kind, name = ("function", choice.function.name) if isinstance(choice, NamedToolChoice) \
        else ("custom", choice.custom.name)
    for tool in tools:
        if tool.name == name and tool.custom != (kind == "custom"):
            other = "custom" if tool.custom else "function"
            raise RequestError(f"tool_choice names the {kind} tool {name!r}, but {name!r} is "
                               f"a {other} tool", pointer="/tool_choice")
    return name, None


def _response_format(req: ChatCompletionRequest) -> dict[str, Any] | None:
    rf = req.response_format
    if rf is None:
        return None
    out: dict[str, Any] = {"type": rf.type}
    if rf.type == "json_schema":
        spec = rf.json_schema or JsonSchemaSpec()
        out["json_schema"] = {"name": spec.name, "schema": spec.schema_, "strict": spec.strict}
    return out


def _reasoning(req: ChatCompletionRequest) -> ReasoningAsk | None:
    """What the request says about reasoning: switched off by reasoning_effort "none" or
    enable_thinking false; asked for by an effort, or enable_thinking true."""
    kwargs = req.chat_template_kwargs or {}
    key = "enable_thinking" if "enable_thinking" in kwargs else "thinking"
    thinking = kwargs.get(key)
    effort = (req.reasoning_effort or "").lower()
    if thinking is False:
        return ReasoningAsk("off", f"/chat_template_kwargs/{key}")
    if effort == "none":
        return ReasoningAsk("off", "/reasoning_effort")
    if thinking is True:
        return ReasoningAsk("required", f"/chat_template_kwargs/{key}")
    if effort in ("minimal", "low", "medium", "high", "xhigh"):
        return ReasoningAsk("required", "/reasoning_effort")
    return None


# ---- the turn → chat completions ------------------------------------------------------------

def usage(result: TurnResult) -> dict[str, Any]:
    u = result.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": result.reasoning_tokens},
            **draft_counts(u)}


class ChatReply:
    """One chat completion's response body, or its chunks."""

    def __init__(self, response_id: str, model: str, created: int):
        self.id, self.model, self.created = f"chatcmpl-{response_id}", model, created

    def body(self, result: TurnResult) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "message": result.turn.to_message(),
                             "finish_reason": result.finish, "logprobs": None}],
                "usage": usage(result), "kaname": result.report}

    def chunk(self, delta: dict[str, Any], finish: str | None = None,
              **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish, "logprobs": None}],
                **extra}

    def delta(self, delta: items.Delta) -> dict[str, Any]:
        """A typed delta as a chat chunk."""
        if isinstance(delta, items.TextDelta):
            key = "reasoning_content" if delta.kind == "reasoning" else "content"
            return self.chunk({key: delta.text})
        kind, value = ("custom", "input") if delta.custom else ("function", "arguments")
        call: dict[str, Any] = {"index": delta.index}
        if delta.id is not None:  # first sight: id, type, name
            call |= {"id": delta.id, "type": kind, kind: {"name": delta.name, value: ""}}
            if delta.fragment:
                call[kind][value] = delta.fragment
        else:
            call[kind] = {value: delta.fragment}
        return self.chunk({"tool_calls": [call]})

    def last(self, result: TurnResult, include_usage: bool) -> list[dict[str, Any]]:
        out = [self.chunk({}, result.finish, kaname=result.report)]
        if include_usage:
            out.append({"id": self.id, "object": "chat.completion.chunk",
                        "created": self.created, "model": self.model, "choices": [],
                        "usage": usage(result)})
        return out


# ---- the answer's shape, as /openapi.json documents it ---------------------------------------

Finish = Literal["stop", "length", "tool_calls"]


class FunctionOut(Wire):
    name: str
    arguments: str  # JSON text


class CustomOut(Wire):
    name: str
    input: str


class ToolCallOut(Wire):
    id: str
    type: Literal["function", "custom"]
    function: FunctionOut | None = None  # type function
    custom: CustomOut | None = None  # type custom


class AssistantMessage(Wire):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None  # where the turn reasoned
    tool_calls: list[ToolCallOut] | None = None  # where the turn called tools


class ChatChoice(Wire):
    index: int
    message: AssistantMessage
    finish_reason: Finish
    logprobs: None


class ReasoningTokens(Wire):
    reasoning_tokens: int


class ChatUsage(DraftCounts):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: ReasoningTokens


class ChatCompletion(Wire):
    """The body of a chat completion (`stream` false)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    kaname: TurnReport


class FunctionDelta(Wire):
    name: str | None = None  # the call's first chunk
    arguments: str | None = None


class CustomDelta(Wire):
    name: str | None = None  # the call's first chunk
    input: str | None = None


class ToolCallDelta(Wire):
    index: int
    id: str | None = None  # the call's first chunk: id, type and name
    type: Literal["function", "custom"] | None = None
    function: FunctionDelta | None = None
    custom: CustomDelta | None = None


class ChunkDelta(Wire):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(Wire):
    index: int
    delta: ChunkDelta
    finish_reason: Finish | None
    logprobs: None


class ChatCompletionChunk(Wire):
    """One event of a streamed chat completion: deltas, then the finish (with `kaname`), then
    usage (no choices) where `stream_options.include_usage` asked for it."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None
    kaname: TurnReport | None = None


__all__ = ["ChatCompletion", "ChatCompletionChunk", "ChatCompletionRequest", "ChatReply",
           "to_turn", "turn_from_chat"]
