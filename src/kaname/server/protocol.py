"""The request bodies kaname accepts, as pydantic models (they also make the OpenAPI schema).

Unknown fields are ignored, as OpenAI does. kaname's own fields (`strict_level`,
`max_reasoning_tokens`, `allow_unenforced`) sit beside OpenAI's and vLLM's.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from ..errors import ConstraintError
from ..formats.request import CUSTOM_INPUT
from ..grammar import Constraint, Guards, to_constraint


@dataclasses.dataclass(frozen=True)
class ReasoningAsk:
    """A request's reasoning switch: the mode it asks for and the field that asked (for errors)."""

    mode: Literal["off", "required"]
    param: str


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class FunctionCall(_Loose):
    name: str
    arguments: str | dict[str, Any] = "{}"


class CustomCall(_Loose):
    name: str
    input: str = ""


class ToolCallIn(_Loose):
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

    def as_function(self) -> dict[str, Any]:
        """Prompts show a custom tool's call as a call of a function of one string argument
        (`CUSTOM_INPUT`), as they show the tool itself."""
        if self.custom is not None and self.type == "custom":
            args = json.dumps({CUSTOM_INPUT: self.custom.input}, ensure_ascii=False)
            return {"id": self.id, "type": "function",
                    "function": {"name": self.custom.name, "arguments": args}}
        return self.model_dump(exclude_none=True, exclude={"custom"})


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(_Loose):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Loose):
    type: Literal["function"] = "function"
    function: FunctionDef


class GrammarDef(_Loose):
    syntax: Literal["lark", "regex"]
    definition: str = Field(min_length=1)


class CustomFormat(_Loose):
    type: Literal["text", "grammar"] = "text"
    grammar: GrammarDef | None = None

    @model_validator(mode="after")
    def _grammar_given(self) -> CustomFormat:
        if self.type == "grammar" and self.grammar is None:
            raise ValueError('a format of type "grammar" needs its `grammar` object')
        return self


class CustomDef(_Loose):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    format: CustomFormat | None = None


class CustomToolDef(_Loose):
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


class NamedFunction(_Loose):
    name: str


class NamedToolChoice(_Loose):
    type: Literal["function"] = "function"
    function: NamedFunction


class NamedCustomChoice(_Loose):
    type: Literal["custom"]
    custom: NamedFunction


class AllowedTools(_Loose):
    mode: Literal["auto", "required"] = "auto"
    tools: list[dict[str, Any]] = Field(min_length=1)

    def names(self) -> list[str]:
        """The tools' names ({"type": "function", "function": {"name"}}, the custom shape,
        or the flat {"type", "name"} of the Responses API)."""
        out = []
        for i, t in enumerate(self.tools):
            inner = t.get(t.get("type", "function"))
            name = inner.get("name") if isinstance(inner, dict) else t.get("name")
            if not isinstance(name, str):
                raise ConstraintError("each allowed tool names a tool",
                                      pointer=f"/tool_choice/allowed_tools/tools/{i}")
            out.append(name)
        return out


class AllowedToolsChoice(_Loose):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class JsonSchemaSpec(_Loose):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class StreamOptions(_Loose):
    include_usage: bool = False


class GuardsIn(_Loose):
    """Runaway guards for this request (kaname's; see Guards). Unset fields keep the server's
    defaults; null turns a guard off."""

    separators: tuple[str, str] | None = None
    max_whitespace: int | None = Field(default=None, ge=0, le=64)
    separator_space: int | None = Field(default=None, ge=0, le=4)
    max_integer_digits: int | None = Field(default=None, ge=1, le=308)
    max_fraction_digits: int | None = Field(default=None, ge=0, le=300)
    max_string_length: int | None = Field(default=None, ge=1)
    max_array_items: int | None = Field(default=None, ge=1)
    max_depth: int | None = Field(default=None, ge=1, le=32)

    @field_validator("separators")
    @classmethod
    def _json_separators(cls, v: tuple[str, str] | None) -> tuple[str, str] | None:
        # anything else would make the output not JSON
        if v is not None and not (re.fullmatch(r"[ \t\n\r]*,[ \t\n\r]*", v[0])
                                  and re.fullmatch(r"[ \t\n\r]*:[ \t\n\r]*", v[1])):
            raise ValueError('separators are [",", ":"] with optional JSON whitespace around')
        return v

    def over(self, default: Guards) -> Guards:
        return dataclasses.replace(default, **self.model_dump(exclude_unset=True))


class KanameOptions(_Loose):
    """The request's `kaname` object."""

    guards: GuardsIn | None = None


class _Sampling(_Loose):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    kaname: KanameOptions | None = None

    def guards(self, default: Guards) -> Guards:
        """The server's guards with what this request sets in `kaname.guards`."""
        given = self.kaname.guards if self.kaname is not None else None
        return default if given is None else given.over(default)

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in stops if s]


def _tool_name(tool: ToolDef | CustomToolDef) -> str:
    return tool.function.name if isinstance(tool, ToolDef) else tool.custom.name


class ChatCompletionRequest(_Sampling):
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

    def message_dicts(self) -> list[dict[str, Any]]:
        out = []
        for m in self.messages:
            d = m.model_dump(exclude_none=True)
            if m.tool_calls:
                d["tool_calls"] = [c.as_function() for c in m.tool_calls]
            out.append(d)
        return out

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def tool_choice_name(self) -> str:
        choice = self.tool_choice
        if choice is None:
            return "auto" if self.tools else "none"
        if isinstance(choice, str):
            return choice
        if isinstance(choice, AllowedToolsChoice):
            return choice.allowed_tools.mode
        kind, name = ("function", choice.function.name) if isinstance(choice, NamedToolChoice) \
            else ("custom", choice.custom.name)
        for tool in self.tools or ():
            if _tool_name(tool) == name and tool.type != kind:
                raise ConstraintError(f"tool_choice names the {kind} tool {name!r}, but "
                                      f"{name!r} is a {tool.type} tool", pointer="/tool_choice")
        return name

    def allowed_tool_names(self) -> list[str] | None:
        """`tool_choice: {"type": "allowed_tools", ...}`: the tools that may be called."""
        choice = self.tool_choice
        if isinstance(choice, AllowedToolsChoice):
            return choice.allowed_tools.names()
        return None

    def reasoning_asked(self) -> ReasoningAsk | None:
        """What the request says about reasoning, and in which field; None when it says
        nothing. Switched off: reasoning_effort "none" or enable_thinking false. Asked for: an
        effort, or enable_thinking true (the turn then starts with a reasoning block, as
        reasoning models' templates make it)."""
        kwargs = self.chat_template_kwargs or {}
        key = "enable_thinking" if "enable_thinking" in kwargs else "thinking"
        thinking = kwargs.get(key)
        effort = (self.reasoning_effort or "").lower()
        if thinking is False:
            return ReasoningAsk("off", f"chat_template_kwargs.{key}")
        if effort == "none":
            return ReasoningAsk("off", "reasoning_effort")
        if thinking is True:
            return ReasoningAsk("required", f"chat_template_kwargs.{key}")
        if effort in ("minimal", "low", "medium", "high"):
            return ReasoningAsk("required", "reasoning_effort")
        return None

    def response_format_dict(self) -> dict[str, Any] | None:
        rf = self.response_format
        if rf is None:
            return None
        out: dict[str, Any] = {"type": rf.type}
        if rf.type == "json_schema":
            spec = rf.json_schema or JsonSchemaSpec()
            out["json_schema"] = {"name": spec.name, "schema": spec.schema_,
                                  "strict": spec.strict}
        return out


class StructuredOutputs(_Loose):
    """vLLM's `structured_outputs` (one of them)."""

    json_: dict[str, Any] | str | bool | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str] = ""
    response_format: ResponseFormat | dict[str, Any] | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's older spelling of the same thing
    guided_grammar: str | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    # SGLang's name for a grammar (llguidance reads Lark or GBNF from it)
    ebnf: str | None = None
    # vLLM's: each choice (each streamed chunk) also carries the ids of its tokens
    return_token_ids: bool = False
    allow_unenforced: bool = False

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ConstraintError("prompt: exactly one prompt per request", pointer="/prompt")
        return self.prompt[0]

    def constraint(self) -> Constraint:
        """The one constraint this request gives, in whichever spelling it uses (OpenAI's
        response_format, vLLM's structured_outputs or guided_*, SGLang's ebnf); errors point
        at the field it came from."""
        given: list[tuple[str, Any]] = []
        rf = self.response_format
        if rf is not None:
            given.append(("response_format", rf.model_dump(by_alias=True, exclude_none=True)
                          if isinstance(rf, BaseModel) else rf))
        so = self.structured_outputs
        if so is not None:
            for name, kind, value in (("json", None, so.json_), ("regex", "regex", so.regex),
                                      ("choice", "choice", so.choice),
                                      ("grammar", "grammar", so.grammar)):
                if value is not None:
                    given.append((f"structured_outputs/{name}",
                                  value if kind is None else {"type": kind, kind: value}))
            if so.json_object:
                given.append(("structured_outputs/json_object", {"type": "json_object"}))
        for name, kind in (("guided_json", None), ("guided_regex", "regex"),
                           ("guided_choice", "choice"), ("guided_grammar", "grammar"),
                           ("ebnf", "grammar")):
            value = getattr(self, name)
            if value is not None:
                given.append((name, value if kind is None else {"type": kind, kind: value}))
        if len(given) > 1:
            raise ConstraintError("give one constraint: " + ", ".join(n for n, _ in given),
                                  pointer=f"/{given[1][0]}")
        if not given:
            return to_constraint(None)
        name, value = given[0]
        try:
            return to_constraint(value)
        except ConstraintError as e:
            raise e.at(f"/{name}") from e
