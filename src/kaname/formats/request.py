"""The one request model inside: `TurnRequest`, a whole assistant turn, whichever API asked.

Each API's edge (`kaname.edges`) turns its wire body into a TurnRequest and never lets its wire
shape in: messages are typed items (`formats.items`), tools are `Tool`s, the content
constraint is a `Constraint`, and every field knows the JSON pointer it came from in the body
that was sent (`Origins`, `Tool.schema_at`, each item's `at`), so an error raised inside names
what the client wrote without any table of pointer moves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConstraintError, InvalidSchemaError
from ..grammar import Constraint, Lark, Regex, Text, from_response_format
from ..grammar.complement import REF_OVERRIDES
from ..grammar.dialect import dialect_of
from .items import Item

StrictLevel = Literal["full", "names", "off"]
ReasoningMode = Literal["off", "on", "required"]


# A custom tool's free-form input travels in the model's call syntax as the one string
# argument `input` (raw where the format writes string values raw, a JSON string elsewhere);
# the models see the tool as a function of that argument.
CUSTOM_INPUT = "input"
_CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
    "required": [CUSTOM_INPUT], "additionalProperties": False}


@dataclass(frozen=True)
class Tool:
    """A function tool, or a custom tool (OpenAI's `type: "custom"`) whose input is free text,
    bound to `grammar` where it has one (Lark or Regex; Text for `format: text`).

    strict: OpenAI's `function.strict`; true means its parameters are enforced fully or the
    request is refused, otherwise what cannot be enforced is reported and the arguments are
    post-checked."""

    name: str
    parameters: Mapping[str, Any] | None = None  # None: any JSON object
    description: str = ""
    strict: bool = False
    grammar: Lark | Regex | Text | None = None  # set: a custom tool
    # where the parameters (a custom tool: its grammar's definition) sit in the body that was
    # sent; None: `/tools/<i>/function/parameters`, chat completions' place
    schema_at: str | None = None
    # the Responses API's namespace tools: the client's name of the group this function is
    # in; its calls carry it back
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.parameters is not None and self.grammar is None:
            object.__setattr__(self, "parameters", object_parameters(self.parameters))

    @property
    def custom(self) -> bool:
        return self.grammar is not None

    def schema_pointer(self, index: int) -> str:
        """Where the parameters (a custom tool: its grammar's definition) sat in the body."""
        if self.schema_at is not None:
            return self.schema_at
        if self.custom:
            return f"/tools/{index}/custom/format" + (
                "" if isinstance(self.grammar, Text) else "/grammar/definition")
        return f"/tools/{index}/function/parameters"

    def to_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        if self.parameters is not None:
            fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class Origins:
    """Where each field of a TurnRequest sat in the body the caller sent (JSON pointers).
    The defaults are chat completions' places, as a Python caller writes them."""

    messages: str = "/messages"
    tools: str = "/tools"
    tool_choice: str = "/tool_choice"
    allowed_tools: str = "/tool_choice/allowed_tools/tools"
    content: str = "/response_format"  # the content constraint, as given
    schema: str = "/response_format/json_schema/schema"  # its JSON Schema
    reasoning: str = "/reasoning_effort"
    max_reasoning_tokens: str = "/max_reasoning_tokens"
    max_tokens: str = "/max_completion_tokens"


@dataclass(frozen=True)
class Sampling:
    """How a request asks to sample: temperature, then the truncations (top_k 0 and min_p 0
    keep every token), a seed, and its stop strings."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ignored:
    """A field the caller's API defines that kaname accepted without acting on it (reported
    in `kaname.ignored`): where it was, and why nothing was done with it."""

    pointer: str
    reason: str


@dataclass(frozen=True)
class ReasoningAsk:
    """What a request said about reasoning: "off" or "required" (an effort, thinking
    enabled), and the field that said it."""

    mode: Literal["off", "required"]
    pointer: str


@dataclass(frozen=True)
class TurnRequest:
    """One assistant turn, as kaname understands it whatever API asked.

    tool_choice: "none" | "auto" | "required" | a tool's name.
    allowed_tools: OpenAI's `allowed_tools`: only these may be called (all are in the prompt).
    constraint: what the content is bound to (None: read `response_format`, chat completions'
    spelling, which Python callers use).
    reasoning: the mode the grammar builds (the pipeline sets it from `reasoning_asked` and the
    server's default).
    """

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    allowed_tools: tuple[str, ...] | None = None
    parallel_tool_calls: bool = True
    response_format: Mapping[str, Any] | None = None
    reasoning: ReasoningMode = "off"
    max_reasoning_tokens: int | None = None
    # what the prompt already wrote of the turn (what a Jinja template's generation prompt
    # ends with; None: ChatFormat.opening of the reasoning mode): the grammar starts after it,
    # the parser is given it before the generated text
    opening: str | None = None

    def opening_in(self, fmt: Any) -> str:
        """The turn's opening in format `fmt` (a ChatFormat)."""
        return self.opening if self.opening is not None else fmt.opening(self.reasoning)
    strict_level: StrictLevel = "full"
    extra: dict[str, Any] = field(default_factory=dict)
    # the conversation, and the rest of the turn (the grammar reads none of these)
    messages: tuple[Item, ...] = ()
    model: str = "default"
    constraint: Constraint | None = None
    reasoning_asked: ReasoningAsk | None = None
    max_tokens: int | None = None  # the output budget asked for; None: the server's default
    sampling: Sampling = field(default_factory=Sampling)
    guards: Mapping[str, Any] = field(default_factory=dict)  # over the server's Guards
    allow_unenforced: bool = False
    draft: bool = True  # drafts the model verifies, where the server drafts (`kaname.draft`)
    strict_level_asked: StrictLevel | None = None  # None: the server's level
    origins: Origins = field(default_factory=Origins)
    ignored: tuple[Ignored, ...] = ()

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        o = self.origins
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ConstraintError(f"tool names must be unique ({dup!r} is given twice)",
                                  pointer=o.tools)
        if self.tool_choice not in ("none", "auto", "required") and self.tool_choice not in names:
            raise ConstraintError(f"tool_choice names unknown tool {self.tool_choice!r}",
                                  pointer=o.tool_choice)
        if self.tool_choice == "required" and not self.callable_tools:
            raise ConstraintError("tool_choice 'required' needs at least one tool",
                                  pointer=o.tool_choice)
        for i, name in enumerate(self.allowed_tools or ()):
            if name not in names:
                raise ConstraintError(f"allowed_tools names unknown tool {name!r}",
                                      pointer=f"{o.allowed_tools}/{i}")
        for i, t in enumerate(self.tools):
            if t.parameters is not None and t.parameters.get("type") != "object":
                raise InvalidSchemaError(
                    f"tool {t.name!r}: a function's parameters are the schema of its arguments "
                    f"object, \"type\": \"object\", not {json.dumps(t.parameters['type'])}",
                    keyword="type", pointer=f"{t.schema_pointer(i)}/type")
        if self.max_reasoning_tokens is not None and self.max_reasoning_tokens < 1:
            raise ConstraintError("max_reasoning_tokens must be >= 1",
                                  pointer=o.max_reasoning_tokens)

    @property
    def content(self) -> Constraint:
        """What the content is bound to: `constraint`, else `response_format` read by the one
        reader (text, json_object, or json_schema with OpenAI's strict default)."""
        if self.constraint is not None:
            return self.constraint
        try:
            return from_response_format(self.response_format)
        except ConstraintError as e:
            raise type(e)(e.message, keyword=e.keyword,
                          pointer=f"{self.origins.content}{e.pointer or ''}") from e

    @property
    def callable_tools(self) -> tuple[Tool, ...]:
        if self.tool_choice == "none":
            return ()
        if self.tool_choice in ("auto", "required"):
            if self.allowed_tools is None:
                return self.tools
            return tuple(t for t in self.tools if t.name in self.allowed_tools)
        return tuple(t for t in self.tools if t.name == self.tool_choice)


def object_parameters(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A function's parameters as OpenAI reads them, in every API: the schema of an object
    (a call's arguments are a JSON object). `{}`, or `properties` without a type, is an object
    schema: `"type": "object"` is added (seen: with `{}` the arguments came out `null`, `2`,
    `[]` or a string, the last a 422 from the parser); a type list holding "object" is
    narrowed to it. A type without "object" is left as it is, refused by TurnRequest.

    In draft 4-7 a root `$ref` overrides its siblings, so there the type goes beside it in an
    allOf (the siblings it overrode are dropped, as they meant nothing)."""
    t = params.get("type")
    if t == "object":
        return params
    if isinstance(t, list) and "object" in t:
        return {**params, "type": "object"}
    if t is not None:
        return params
    if "$ref" in params and dialect_of(params) in REF_OVERRIDES:
        root = {k: v for k, v in params.items() if k in _ROOT_KEYWORDS}
        return {**root, "type": "object", "allOf": [{"$ref": params["$ref"]}]}
    return {"type": "object", **params}


# what a root `$ref` does not override: the dialect, the base URI, the definitions, notes
_ROOT_KEYWORDS = ("$schema", "$id", "id", "$defs", "definitions", "title", "description")


def tools_from_openai(tools: Sequence[Mapping[str, Any]] | None) -> tuple[Tool, ...]:
    """OpenAI `tools` list (chat shape: function and custom tools) → Tools; bad shapes are a
    ConstraintError naming the pointer."""
    out = []
    for i, t in enumerate(tools or ()):
        if isinstance(t, Mapping) and t.get("type") == "custom":
            out.append(_custom_tool(t.get("custom"), f"/tools/{i}/custom"))
            continue
        fn = t.get("function") if isinstance(t, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ConstraintError("each tool needs a function with a name",
                                  pointer=f"/tools/{i}/function")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise ConstraintError("function parameters must be a JSON Schema object",
                                  pointer=f"/tools/{i}/function/parameters")
        out.append(Tool(fn["name"], params, str(fn.get("description") or ""),
                        strict=fn.get("strict") is True))
    return tuple(out)


def _custom_tool(spec: Any, at: str) -> Tool:
    """A chat-shape custom tool: {"name", "description", "format": {"type": "text"} |
    {"type": "grammar", "grammar": {"syntax": "lark" | "regex", "definition"}}}."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise ConstraintError("each custom tool needs a name", pointer=at)
    fmt = spec.get("format") or {"type": "text"}
    grammar: Lark | Regex | Text
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "grammar"):
        raise ConstraintError("a custom tool's format is {\"type\": \"text\"} or "
                              "{\"type\": \"grammar\", ...}", pointer=f"{at}/format")
    g: Any = None
    if fmt["type"] == "text":
        grammar = Text()
    else:
        g = fmt.get("grammar")
        if not isinstance(g, Mapping) or g.get("syntax") not in ("lark", "regex") \
                or not isinstance(g.get("definition"), str):
            raise ConstraintError('a grammar format needs "syntax" ("lark" or "regex") and '
                                  'a "definition" string', pointer=f"{at}/format/grammar")
        grammar = Lark(g["definition"]) if g["syntax"] == "lark" else Regex(g["definition"])
    description = str(spec.get("description") or "")
    if not isinstance(grammar, Text):
        # prompts show a custom tool as a function of its one string argument: the model
        # learns the input's grammar from the description
        description = (f"{description}\n\n" if description else "") + (
            f"`{CUSTOM_INPUT}` is text in this {g['syntax']} grammar:\n{g['definition']}")
    return Tool(spec["name"], _CUSTOM_PARAMETERS, description, strict=True, grammar=grammar)
