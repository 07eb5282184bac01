"""OpenAI's Responses API at the edge: its wire body → `TurnRequest` (`to_turn`), and a
turn's result → output items and the events that build them (`Output`, `Context`).

Field policy (README, "Field policy"): every field the API defines is accepted. Those kaname
acts on are read here; the rest (`client_metadata`, `prompt_cache_key`, `include`, `store`'s
siblings...) are listed in `kaname.ignored` with their pointers. Tools kaname cannot run for
the client (hosted tools: web_search, file_search, ...) are not offered to the model and are
listed; a `namespace` tool offers its functions (their calls carry the namespace back); a
client-executed `tool_search` is a function tool with its `parameters`. A 400 is kept for
what would change the answer silently: logprobs, background responses, conversations and
prompt templates kaname does not keep, content a text-only model cannot read.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..chat import TurnResult
from ..errors import TOO_DEEP, RequestError
from ..formats import ParsedTurn, items
from ..formats.items import CallDelta, Delta, TextDelta
from ..formats.request import Ignored, Origins, ReasoningAsk, Tool, TurnRequest
from ..grammar import Constraint, from_response_format
from .common import (
    DocumentedAs,
    DraftCounts,
    KanameOptions,
    MinP,
    OpenAIToolName,
    Refused,
    RequestBody,
    TopK,
    TurnReport,
    Wire,
    check_tool_name,
    custom_tool,
    draft_counts,
    extras,
    refuse,
    sampling,
)

_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_TOOL_CHOICES = ("none", "auto", "required")
# Tools the API runs on OpenAI's side; nothing here runs them for the client
HOSTED_TOOLS = ("web_search", "web_search_preview", "file_search", "code_interpreter",
                "image_generation", "computer_use", "computer_use_preview", "mcp",
                "local_shell", "shell", "apply_patch")

ORIGINS = Origins(messages="/input", tools="/tools", tool_choice="/tool_choice",
                  allowed_tools="/tool_choice/tools", content="/text/format",
                  schema="/text/format/schema", reasoning="/reasoning/effort",
                  max_reasoning_tokens="/max_reasoning_tokens", max_tokens="/max_output_tokens")


# Fields whose meaning kaname cannot serve and that would change the answer silently: a 400
# naming them, unless they ask for nothing (README, "Field policy").
REFUSED = (
    Refused("background", "background responses are not supported"),
    Refused("conversation", "conversations are not supported; use previous_response_id",
            (None,)),
    Refused("prompt", "prompt templates are not supported", (None,)),
    Refused("top_logprobs", "log probabilities are not returned by this server", (None, 0)),
)


# ---- the request's shape, as /openapi.json documents it -------------------------------------
# The request reads `input`, `tools`, `tool_choice`, `text`, `reasoning`... by hand (errors name
# the exact pointer; what the API defines and kaname does not use is listed, never refused):
# these models only say what the API defines (`DocumentedAs`), for clients and fuzzers.

class Doc(BaseModel):
    """A documented request shape; open, as every request model here."""

    model_config = ConfigDict(extra="allow")


class InputText(Doc):
    type: Literal["input_text"]
    text: str


class InputImage(Doc):
    """Defined by the API; a text-only model cannot read it (400)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] | None = None


class InputFile(Doc):
    """Defined by the API; a text-only model cannot read it (400)."""

    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    filename: str | None = None


class OutputTextIn(Doc):
    """An assistant message's text, as a previous response gave it."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None


class RefusalIn(Doc):
    type: Literal["refusal"]
    refusal: str


InputContent = InputText | InputImage | InputFile | OutputTextIn | RefusalIn


class MessageItemIn(Doc):
    """A message: its `type` may be left out (the API's "easy" input message)."""

    type: Literal["message"] | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputContent]
    id: str | None = None
    status: str | None = None


class SummaryText(Doc):
    type: Literal["summary_text"]
    text: str


class ReasoningTextIn(Doc):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItemIn(Doc):
    """Reasoning from a previous turn: read where it has text (encrypted reasoning is left
    out and listed)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] | None = None
    content: list[ReasoningTextIn] | None = None
    encrypted_content: str | None = None


class FunctionCallIn(Doc):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text
    namespace: str | None = None
    id: str | None = None
    status: str | None = None


class CustomToolCallIn(Doc):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    namespace: str | None = None
    id: str | None = None


class CallOutputIn(Doc):
    """A tool's output, matched to its call by `call_id`."""

    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str
    output: str | list[InputContent]
    id: str | None = None
    status: str | None = None


class OtherItemIn(Doc):
    """Any other item the API defines (item references, hosted tools' calls...): left out of
    the prompt and listed in `kaname.ignored`."""

    type: str


InputItem = (MessageItemIn | ReasoningItemIn | FunctionCallIn | CustomToolCallIn
             | CallOutputIn | OtherItemIn)


class FunctionToolIn(Doc):
    type: Literal["function"]
    name: OpenAIToolName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # true unless false: the Responses API's default


class TextFormatIn(Doc):
    type: Literal["text"]


class GrammarFormatIn(Doc):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str = Field(min_length=1)


class CustomToolIn(Doc):
    """Free-form input, bound to a Lark or regex grammar if given."""

    type: Literal["custom"]
    name: OpenAIToolName
    description: str | None = None
    format: TextFormatIn | GrammarFormatIn | None = None


class NamespaceToolIn(Doc):
    """A group of function tools; their calls carry the namespace back."""

    type: Literal["namespace"]
    name: OpenAIToolName
    tools: list[FunctionToolIn | CustomToolIn]


class HostedToolIn(Doc):
    """A tool the API runs on its side (web_search, file_search, mcp...): not offered to the
    model here, listed in `kaname.ignored`."""

    type: str


ResponsesTool = FunctionToolIn | CustomToolIn | NamespaceToolIn | HostedToolIn


class NamedToolChoiceIn(Doc):
    type: Literal["function", "custom"]
    name: str


class AllowedToolIn(Doc):
    type: Literal["function", "custom"]
    name: str


class AllowedToolsChoiceIn(Doc):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"] = "auto"
    tools: list[AllowedToolIn] = Field(min_length=1)


ResponsesToolChoice = (Literal["none", "auto", "required"] | NamedToolChoiceIn
                | AllowedToolsChoiceIn)


class PlainFormatIn(Doc):
    type: Literal["text", "json_object"]


class JsonSchemaFormatIn(Doc):
    type: Literal["json_schema"]
    schema_: dict[str, Any] | bool = Field(alias="schema")
    name: str | None = None
    description: str | None = None
    strict: bool | None = None


class TextConfigIn(Doc):
    format: PlainFormatIn | JsonSchemaFormatIn | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted, not used


class ReasoningConfigIn(Doc):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # accepted, not used


class ConversationIn(Doc):
    id: str


class PromptIn(Doc):
    id: str
    version: str | None = None
    variables: dict[str, Any] | None = None


class ResponsesRequest(RequestBody):
    """The body of `POST /v1/responses`. Fields the API defines that kaname does not read are
    kept (extra) and listed in `kaname.ignored`."""

    model_config = ConfigDict(extra="allow")

    model: str
    # read by hand (see "the request's shape" above): an error names the field rather than
    # a member of a union
    input: Annotated[Any, DocumentedAs(str | list[InputItem] | None)] = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: Annotated[list[Any] | None, DocumentedAs(list[ResponsesTool] | None)] = None
    tool_choice: Annotated[Any, DocumentedAs(ResponsesToolChoice | None)] = None
    parallel_tool_calls: bool | None = None
    text: Annotated[dict[str, Any] | None, DocumentedAs(TextConfigIn | None)] = None
    reasoning: Annotated[dict[str, Any] | None, DocumentedAs(ReasoningConfigIn | None)] = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: TopK = None  # vLLM's (OpenAI's Responses has none)
    min_p: MinP = None  # vLLM's
    stream: bool | None = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = Field(default=None, ge=0)  # bounds built-in tools: none here
    # refused unless unset / off (see `refuse`)
    background: bool | None = None
    conversation: Annotated[Any, DocumentedAs(str | ConversationIn | None)] = None
    prompt: Annotated[Any, DocumentedAs(PromptIn | None)] = None
    top_logprobs: int | None = None
    # chat completions' and kaname's extensions
    seed: int | None = None
    stop: str | list[str] | None = None
    strict_level: Literal["full", "names", "off"] | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=1)
    allow_unenforced: bool = False
    kaname: KanameOptions | None = None

    def refuse(self) -> None:
        """A 400 for a field whose meaning kaname cannot serve and would otherwise change the
        answer silently."""
        refuse(self, REFUSED)
        for i, inc in enumerate(self.include or ()):
            if inc == "message.output_text.logprobs":
                raise _unsupported("logprobs are not supported", f"/include/{i}")


def _unsupported(message: str, pointer: str) -> RequestError:
    return RequestError(message, pointer=pointer, code="unsupported_parameter")


def _bad(message: str, pointer: str) -> RequestError:
    return RequestError(message, pointer=pointer)


# One item of the conversation and where it came from: "/input/3", or "/previous_response_id"
# for the items a stored response brings.
Located = tuple[Any, str]


def input_items(req: ResponsesRequest) -> list[Located]:
    """The request's own input as items (a string is one user message)."""
    if req.input is None:
        return []
    if not isinstance(req.input, str | list):
        raise _bad("input is a string or a list of input items", "/input")
    if isinstance(req.input, str):
        return [({"type": "message", "role": "user", "content": req.input}, "/input")]
    return [(item, f"/input/{i}") for i, item in enumerate(req.input)]


def to_turn(req: ResponsesRequest, history: Sequence[Located]) -> TurnRequest:
    """The turn of a Responses request whose conversation is `history` (a stored chain, may
    be empty) followed by its own input."""
    req.refuse()
    ignored = _ignored(req)
    conversation: list[items.Item] = []
    if req.instructions is not None:
        conversation.append(items.Text("system", req.instructions, "/instructions"))
    for item, at in [*history, *input_items(req)]:
        conversation += _item(item, at, ignored)
    tools: list[Tool] = []
    for i, t in enumerate(req.tools or ()):
        tools += _tools(t, f"/tools/{i}", ignored)
    choice, allowed = _tool_choice(req.tool_choice)
    return TurnRequest(
        tools=tuple(tools), tool_choice=choice if choice is not None else
        ("auto" if tools else "none"), allowed_tools=allowed,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        constraint=_text_format(req.text), max_reasoning_tokens=req.max_reasoning_tokens,
        messages=tuple(items.resolve_results(conversation)), model=req.model,
        reasoning_asked=_reasoning(req.reasoning), max_tokens=req.max_output_tokens,
        sampling=sampling(req.temperature, req.top_p, req.seed, req.stop, top_k=req.top_k,
                          min_p=req.min_p),
        guards=req.kaname.guard_overrides() if req.kaname else {},
        draft=req.kaname.draft if req.kaname else True,
        allow_unenforced=req.allow_unenforced, strict_level_asked=req.strict_level,
        origins=ORIGINS, ignored=tuple(ignored))


def _ignored(req: ResponsesRequest) -> list[Ignored]:
    out = extras(req)
    for name, why in (("metadata", None), ("user", None), ("safety_identifier", None),
                      ("prompt_cache_key", "no prompt cache"), ("service_tier", None),
                      ("truncation", None), ("max_tool_calls", "no built-in tools run here")):
        if getattr(req, name) is not None:
            out.append(Ignored(f"/{name}", why or "not used by kaname"))
    for i, inc in enumerate(req.include or ()):
        out.append(Ignored(f"/include/{i}", f"{inc!r}: nothing to include"))
    return out


def _reasoning(reasoning: Mapping[str, Any] | None) -> ReasoningAsk | None:
    effort = (reasoning or {}).get("effort")
    if effort is None:
        return None
    if effort not in _EFFORTS:
        raise _bad(f"reasoning.effort is one of {', '.join(_EFFORTS)}", "/reasoning/effort")
    return ReasoningAsk("off" if effort == "none" else "required", "/reasoning/effort")


# ---- input items -> the conversation --------------------------------------------------------

def _item(item: Any, at: str, ignored: list[Ignored]) -> list[items.Item]:
    if not isinstance(item, Mapping):
        raise _bad("each input item is an object", at)
    kind = item.get("type", "message" if "role" in item else None)
    if kind is None:
        raise _bad("each input item has a type", f"{at}/type")
    if kind == "message":
        return _message(item, at)
    if kind == "reasoning":
        text = _reasoning_text(item, at)
        if not text:
            ignored.append(Ignored(at, "reasoning without readable text (encrypted or "
                                       "empty): left out of the prompt"))
            return []
        return [items.Reasoning(text, at)]
    if kind in ("function_call", "custom_tool_call"):
        return [_call(item, at, custom=kind == "custom_tool_call")]
    if kind in ("function_call_output", "custom_tool_call_output"):
        return [_output(item, at)]
    ignored.append(Ignored(at, f"input item type {kind!r}: kaname has no meaning for it; left "
                               "out of the prompt"))
    return []


def _message(item: Mapping[str, Any], at: str) -> list[items.Item]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise _bad("a message's role is user, system, developer or assistant", f"{at}/role")
    text = _content(item.get("content"), f"{at}/content", assistant=role == "assistant")
    if role == "assistant":
        return [items.AssistantText(text, at)]
    return [items.Text(role, text, at)]


def _call(item: Mapping[str, Any], at: str, *, custom: bool) -> items.ToolCall:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _bad("a tool call needs its call_id", f"{at}/call_id")
    name = _name(item, at)
    namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
    if custom:
        value = item.get("input", "")
        if not isinstance(value, str):
            raise _bad("a custom tool call's input is a string", f"{at}/input")
        return items.ToolCall(call_id, name, value, at, custom=True, namespace=namespace)
    arguments = item.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise _bad("a function call's arguments are a string of JSON", f"{at}/arguments")
    try:
        json.loads(arguments)
    except ValueError as e:
        raise _bad(f"a function call's arguments are not JSON: {e}", f"{at}/arguments") \
            from None
    except RecursionError:
        raise _bad(TOO_DEEP, f"{at}/arguments") from None
    return items.ToolCall(call_id, name, arguments, at, namespace=namespace)


def _output(item: Mapping[str, Any], at: str) -> items.ToolResult:
    """A tool's output, matched to its call by call_id, else (as Codex sends some) by the
    call's name and namespace (`items.resolve_results`)."""
    call_id = item.get("call_id")
    name = item.get("name") if isinstance(item.get("name"), str) else None
    if not (isinstance(call_id, str) and call_id) and name is None:
        raise _bad("a tool call's output needs the call_id it answers (or the call's name)",
                   f"{at}/call_id")
    if "output" not in item:
        raise _bad("a tool call's output needs its output", f"{at}/output")
    namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
    return items.ToolResult(call_id if isinstance(call_id, str) else "",
                            _content(item["output"], f"{at}/output"), at, name=name,
                            namespace=namespace)


_TEXT_PARTS = ("input_text", "output_text", "text")


def _part_text(part: Any, at: str, *, assistant: bool = False) -> str:
    """The text of one content part; a part that is not text (an image, a file...) is a 400."""
    if not isinstance(part, Mapping):
        raise _bad("each content part is an object", at)
    kind = part.get("type")
    key = "refusal" if kind == "refusal" and assistant else "text"
    if kind not in _TEXT_PARTS and key != "refusal":
        raise _unsupported(f"content part type {kind!r} is not supported: this server's "
                           "model reads text only", f"{at}/type")
    text = part.get(key)
    if not isinstance(text, str):
        raise _bad(f"a {kind} part needs its {key}", f"{at}/{key}")
    return text


def _content(content: Any, at: str, *, assistant: bool = False) -> str:
    """A message's (or an output's) content: a string, or text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("content is a string or a list of content parts", at)
    return "".join(_part_text(p, f"{at}/{j}", assistant=assistant)
                   for j, p in enumerate(content))


def _reasoning_text(item: Mapping[str, Any], at: str) -> str:
    """A reasoning item's text: its reasoning_text parts (what kaname returns), else its
    summary; "" where it has neither (encrypted reasoning cannot be read here)."""
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
    return ""


# ---- tools, tool_choice, text.format --------------------------------------------------------

def _name(obj: Mapping[str, Any], at: str) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 256:
        raise _bad("a name is a string of 1 to 256 characters", f"{at}/name")
    return name


def _tools(tool: Any, at: str, ignored: list[Ignored], namespace: str | None = None
           ) -> list[Tool]:
    if not isinstance(tool, Mapping):
        raise _bad("each tool is an object", at)
    kind = tool.get("type")
    if kind == "function" or (kind == "tool_search" and tool.get("execution") == "client"):
        return [_function(tool, at, ignored, namespace)]
    if kind == "custom":
        return [_custom(tool, at, namespace)]
    if kind == "namespace" and namespace is None:
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise _bad("a namespace tool lists its tools", f"{at}/tools")
        ns = check_tool_name(tool.get("name"), f"{at}/name")
        return [t for j, sub in enumerate(inner)
                for t in _tools(sub, f"{at}/tools/{j}", ignored, ns)]
    if not isinstance(kind, str):
        raise _bad("each tool has a type", f"{at}/type")
    hosted = "a hosted tool, which this server does not run" if kind.split("_20")[0] in \
        HOSTED_TOOLS or kind == "tool_search" else "a tool type kaname does not know"
    ignored.append(Ignored(at, f"{kind!r} is {hosted}: not offered to the model"))
    return []


def _function(tool: Mapping[str, Any], at: str, ignored: list[Ignored],
              namespace: str | None) -> Tool:
    name = "tool_search" if tool.get("type") == "tool_search" and "name" not in tool \
        else check_tool_name(tool.get("name"), f"{at}/name")
    for key, want in (("description", str), ("parameters", dict)):
        if tool.get(key) is not None and not isinstance(tool[key], want):
            raise _bad(f"a function's {key} is a{'n object' if want is dict else ' string'}",
                       f"{at}/{key}")
    if tool.get("defer_loading"):
        ignored.append(Ignored(f"{at}/defer_loading", "every tool is in the prompt here"))
    # the Responses API's function tools are strict unless they say otherwise
    return Tool(name, tool.get("parameters"), tool.get("description") or "",
                strict=tool.get("strict") is not False, schema_at=f"{at}/parameters",
                namespace=namespace)


def _custom(tool: Mapping[str, Any], at: str, namespace: str | None) -> Tool:
    name = check_tool_name(tool.get("name"), f"{at}/name")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad("a custom tool's description is a string", f"{at}/description")
    fmt = tool.get("format")
    if fmt is None or (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        t = custom_tool(name, description, None, None, f"{at}/format")
    elif isinstance(fmt, Mapping) and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if syntax not in ("lark", "regex"):
            raise _bad('a grammar format\'s syntax is "lark" or "regex"', f"{at}/format/syntax")
        if not isinstance(definition, str) or not definition:
            raise _bad("a grammar format needs its definition", f"{at}/format/definition")
        t = custom_tool(name, description, syntax, definition, f"{at}/format")
    else:
        raise _bad('a custom tool\'s format is {"type": "text"} or {"type": "grammar", ...}',
                   f"{at}/format")
    return Tool(t.name, t.parameters, t.description, t.strict, t.grammar, t.schema_at,
                namespace)


def _tool_choice(choice: Any) -> tuple[str | None, tuple[str, ...] | None]:
    at = "/tool_choice"
    if choice is None:
        return None, None
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise _bad("tool_choice is none, auto, required or an object", at)
        return choice, None
    if not isinstance(choice, Mapping):
        raise _bad("tool_choice is none, auto, required or an object", at)
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return _name(choice, at), None
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise _bad("allowed_tools' mode is auto or required", f"{at}/mode")
        tools = choice.get("tools")
        if not isinstance(tools, list) or not tools:
            raise _bad("allowed_tools names at least one tool", f"{at}/tools")
        names = []
        for j, t in enumerate(tools):
            if not isinstance(t, Mapping) or t.get("type") not in ("function", "custom"):
                raise _unsupported("each allowed tool is a function or custom tool "
                                   '({"type", "name"})', f"{at}/tools/{j}")
            names.append(_name(t, f"{at}/tools/{j}"))
        return mode, tuple(names)
    raise _unsupported(f"tool_choice type {kind!r} is not supported (function, custom, "
                       "allowed_tools)", f"{at}/type")


def _text_format(text: Mapping[str, Any] | None) -> Constraint | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    at = "/text/format"
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object",
                                                                "json_schema"):
        raise _bad("text.format's type is text, json_object or json_schema", f"{at}/type")
    if fmt["type"] == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict | bool):
            raise _bad("a json_schema format needs its schema (an object)", f"{at}/schema")
        for key, want in (("name", str), ("description", str), ("strict", bool)):
            if fmt.get(key) is not None and not isinstance(fmt[key], want):
                raise _bad(f"text.format.{key} is a {want.__name__}", f"{at}/{key}")
        spec = {"schema": schema, "strict": fmt.get("strict"), "name": fmt.get("name")}
        return from_response_format({"type": "json_schema", "json_schema": spec})
    return from_response_format({"type": fmt["type"]})


# ---- deltas -> output items and their events -------------------------------------------

# Each kind of output item: (its content part's type, or the field a call's text accumulates
# in; the prefix of its delta and done events; the done event's text key)
_KINDS: dict[str, tuple[str, str, str]] = {
    "reasoning": ("reasoning_text", "response.reasoning_text", "text"),
    "message": ("output_text", "response.output_text", "text"),
    "function_call": ("arguments", "response.function_call_arguments", "arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input", "input"),
}
_ID_PREFIX = {"reasoning": "rs", "message": "msg", "function_call": "fc",
              "custom_tool_call": "ctc"}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Output:
    """A turn's output items, built from typed deltas, with the stream events that build them.

    The one translation of a turn's result in both modes: a stream feeds the deltas as they
    come and then `finish`es with the final message; a non-streamed response only
    `finish`es, which brings the (empty) items to the final message."""

    def __init__(self, namespaces: Mapping[str, str] | None = None) -> None:
        self.namespaces = namespaces or {}  # tool name -> its namespace, for calls' items
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self._index: dict[str, int] = {}  # item id -> output_index

    # the text an item accumulates, wherever its kind keeps it
    @staticmethod
    def _get(item: dict[str, Any]) -> str:
        if item["type"] in ("reasoning", "message"):
            return str(item["content"][0]["text"]) if item["content"] else ""
        return str(item[_KINDS[item["type"]][0]])

    def feed(self, delta: Delta) -> list[dict[str, Any]]:
        """The events of one delta."""
        if isinstance(delta, TextDelta):
            return self._text("reasoning" if delta.kind == "reasoning" else "message",
                              delta.text)
        return self._call(delta)

    def finish(self, turn: ParsedTurn, finish: str) -> list[dict[str, Any]]:
        """The events that bring the items to `turn` (the final one: after a cut turn it may
        hold text no delta carried) and close the last item."""
        events: list[dict[str, Any]] = []
        for delta, item_kind in ((TextDelta("reasoning", turn.reasoning_content or ""),
                                  "reasoning"),
                                 (TextDelta("content", turn.content or ""), "message")):
            rest = self._rest(delta.text, [i for i in self.items if i["type"] == item_kind])
            if rest:
                events += self.feed(TextDelta(delta.kind, rest))
        for j, call in enumerate(turn.tool_calls):
            item = self._calls.get(j)
            if item is None:
                events += self._call(CallDelta(j, "", call.id, call.name, call.custom))
                item = self._calls[j]
            rest = self._rest(call.input if call.custom else call.arguments, [item])
            if rest:
                events += self._call(CallDelta(j, rest, custom=call.custom))
        events += self._close("incomplete" if finish == "length" else "completed")
        return events

    def _rest(self, final: Any, items: list[dict[str, Any]]) -> str:
        """What `final` adds to the text already streamed into `items`. Events that were
        sent cannot be taken back: a final text that does not extend them adds nothing."""
        sent = "".join(self._get(i) for i in items)
        if not isinstance(final, str) or not final.startswith(sent):
            return ""
        return final[len(sent):]

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        events = []
        item = self._open
        if item is None or item["type"] != kind:
            events += self._close("completed")
            item = {"id": _new_id(_ID_PREFIX[kind]), "type": kind, "content": []}
            if kind == "reasoning":
                item["summary"] = []
            else:
                item["role"] = "assistant"
            item["status"] = "in_progress"
            events += self._add(item)
            part: dict[str, Any] = {"type": _KINDS[kind][0], "text": ""}
            if kind == "message":
                part |= {"annotations": [], "logprobs": []}
            item["content"].append(part)
            events.append({"type": "response.content_part.added", **self._at(item),
                           "content_index": 0, "part": copy.deepcopy(part)})
        item["content"][0]["text"] += text
        delta = {"type": f"{_KINDS[kind][1]}.delta", **self._at(item), "content_index": 0,
                 "delta": text}
        if kind == "message":
            delta["logprobs"] = []
        return [*events, delta]

    def _call(self, call: CallDelta) -> list[dict[str, Any]]:
        events = []
        item = self._calls.get(call.index)
        value = "input" if call.custom else "arguments"
        if item is None:
            events += self._close("completed")
            kind = "custom_tool_call" if call.custom else "function_call"
            item = {"id": _new_id(_ID_PREFIX[kind]), "type": kind, "call_id": call.id,
                    "name": call.name, value: ""}
            if call.name is not None and call.name in self.namespaces:
                item["namespace"] = self.namespaces[call.name]
            if not call.custom:  # OpenAI's custom tool calls have no status
                item["status"] = "in_progress"
            self._calls[call.index] = item
            events += self._add(item)
        if call.fragment:
            if item is not self._open:
                raise RuntimeError(f"a delta for tool call {call.index} after it was closed")
            item[value] += call.fragment
            events.append({"type": f"{_KINDS[item['type']][1]}.delta", **self._at(item),
                           "delta": call.fragment})
        return events

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self._index[item["id"]] = len(self.items)
        self.items.append(item)
        self._open = item
        return [{"type": "response.output_item.added", "output_index": len(self.items) - 1,
                 "item": copy.deepcopy(item)}]

    def _at(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self._index[item["id"]]}

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        kind = item["type"]
        _, name, key = _KINDS[kind]
        done: dict[str, Any] = {"type": f"{name}.done", **self._at(item), key: self._get(item)}
        events = [done]
        if kind in ("reasoning", "message"):
            done["content_index"] = 0
            if kind == "message":
                done["logprobs"] = []
            events.append({"type": "response.content_part.done", **self._at(item),
                           "content_index": 0, "part": copy.deepcopy(item["content"][0])})
        elif kind == "function_call":
            done["name"] = item["name"]
        if "status" in item:
            item["status"] = status
        events.append({"type": "response.output_item.done",
                       "output_index": self._index[item["id"]], "item": copy.deepcopy(item)})
        return events


# ---- the response object --------------------------------------------------------------------

@dataclass
class Context:
    """One response being made: its id, what it echoes of the request, where it is stored."""

    req: ResponsesRequest
    response_id: str
    created: int
    model: str
    history: Sequence[Located]

    @property
    def id(self) -> str:
        return f"resp_{self.response_id}"

    def response(self, status: str, output: list[dict[str, Any]] | None = None,
                 result: TurnResult | None = None,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        req = self.req
        done = status in ("completed", "incomplete", "failed")
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created,
            "status": status, "completed_at": int(time.time()) if done else None,
            "background": False, "error": error,
            "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                   else None),
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls, "model": self.model,
            "output": copy.deepcopy(output or []),
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "prompt_cache_key": req.prompt_cache_key,
            "reasoning": {"effort": (req.reasoning or {}).get("effort"),
                          "summary": (req.reasoning or {}).get("summary")},
            "safety_identifier": req.safety_identifier,
            "service_tier": req.service_tier or "default",
            "store": req.store is not False,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": req.text if req.text is not None else {"format": {"type": "text"}},
            "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
            "tools": [_echo_tool(t) for t in req.tools or ()],
            "top_logprobs": 0, "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": req.truncation or "disabled", "user": req.user,
            "metadata": req.metadata or {}, "usage": None,
        }
        if result is not None:
            u = result.usage
            body["usage"] = {
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": result.reasoning_tokens},
                "total_tokens": u.prompt_tokens + u.completion_tokens, **draft_counts(u)}
            body["kaname"] = result.report
        return body


def _echo_tool(tool: Any) -> Any:
    """A tool as the response echoes it: as sent, a function's strict default filled in."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return {"description": None, "parameters": None, **tool,
                "strict": tool.get("strict") is not False}
    return tool


def status(result: TurnResult) -> str:
    """A finished response's status."""
    return "incomplete" if result.finish == "length" else "completed"




# ---- the answer's shape, as /openapi.json documents it ---------------------------------------

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(Wire):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class ReasoningText(Wire):
    type: Literal["reasoning_text"]
    text: str


class OutputMessage(Wire):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    status: ItemStatus
    content: list[OutputText]


class OutputReasoning(Wire):
    id: str
    type: Literal["reasoning"]
    summary: list[Any]
    content: list[ReasoningText]
    status: ItemStatus


class OutputFunctionCall(Wire):
    id: str
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text (a call cut off by max_output_tokens: as far as it went)
    status: ItemStatus
    namespace: str | None = None  # a namespace tool's function


class OutputCustomToolCall(Wire):
    id: str
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    namespace: str | None = None


OutputItem = OutputMessage | OutputReasoning | OutputFunctionCall | OutputCustomToolCall
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class ResponseError(Wire):
    code: str
    message: str


class IncompleteDetails(Wire):
    reason: str


class ReasoningEcho(Wire):
    effort: str | None
    summary: Any


class InputTokensDetails(Wire):
    cached_tokens: int


class OutputTokensDetails(Wire):
    reasoning_tokens: int


class ResponseUsage(DraftCounts):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseObject(Wire):
    """A response (`POST /v1/responses` with `stream` false, `GET /v1/responses/{id}`, and the
    `response` of the stream's lifecycle events). What the request set is echoed as sent."""

    id: str
    object: Literal["response"]
    created_at: int
    status: ResponseStatus
    completed_at: int | None
    background: bool
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    prompt_cache_key: str | None
    reasoning: ReasoningEcho
    safety_identifier: str | None
    service_tier: str
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: Any
    tools: list[Any]
    top_logprobs: int
    top_p: float
    truncation: str
    user: str | None
    metadata: dict[str, str]
    usage: ResponseUsage | None  # once finished
    kaname: TurnReport | None = None  # once finished


class DeletedResponse(Wire):
    """The body of `DELETE /v1/responses/{id}`."""

    id: str
    object: Literal["response.deleted"]
    deleted: bool


class LifecycleEvent(Wire):
    type: Literal["response.created", "response.in_progress", "response.completed",
                  "response.incomplete", "response.failed"]
    sequence_number: int
    response: ResponseObject


class OutputItemEvent(Wire):
    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(Wire):
    type: Literal["response.content_part.added", "response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class DeltaEvent(Wire):
    type: Literal["response.output_text.delta", "response.reasoning_text.delta",
                  "response.function_call_arguments.delta",
                  "response.custom_tool_call_input.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    delta: str
    content_index: int | None = None  # text and reasoning
    logprobs: list[Any] | None = None  # output text


class DoneEvent(Wire):
    type: Literal["response.output_text.done", "response.reasoning_text.done",
                  "response.function_call_arguments.done",
                  "response.custom_tool_call_input.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int | None = None  # text and reasoning
    text: str | None = None  # text and reasoning
    arguments: str | None = None  # function call
    input: str | None = None  # custom tool call
    name: str | None = None  # function call
    logprobs: list[Any] | None = None  # output text


class ErrorEvent(Wire):
    """An error the stream could not turn into `response.failed`."""

    type: Literal["error"]
    code: str | None
    message: str
    param: str | None


# One event of a streamed response (its SSE event name is its `type`)
StreamEvent = (LifecycleEvent | OutputItemEvent | ContentPartEvent | DeltaEvent | DoneEvent
               | ErrorEvent)
