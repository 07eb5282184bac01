"""What one chat turn asks of the grammar: tools, tool_choice, reasoning, response format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConstraintError
from ..grammar import Constraint, Lark, Regex, Text, from_response_format

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

    @property
    def custom(self) -> bool:
        return self.grammar is not None

    def to_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        if self.parameters is not None:
            fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class TurnRequest:
    """The grammar-shaping part of an OpenAI chat request.

    tool_choice: "none" | "auto" | "required" | a tool's name.
    allowed_tools: OpenAI's `allowed_tools`: only these may be called (all are in the prompt).
    response_format: the request's, as sent: None / text / json_object / json_schema.
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

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConstraintError("tool names must be unique", pointer="/tools")
        if self.tool_choice not in ("none", "auto", "required") and self.tool_choice not in names:
            raise ConstraintError(f"tool_choice names unknown tool {self.tool_choice!r}",
                                  pointer="/tool_choice")
        if self.tool_choice == "required" and not self.callable_tools:
            raise ConstraintError("tool_choice 'required' needs at least one tool",
                                  pointer="/tool_choice")
        for i, name in enumerate(self.allowed_tools or ()):
            if name not in names:
                raise ConstraintError(f"allowed_tools names unknown tool {name!r}",
                                      pointer=f"/tool_choice/allowed_tools/tools/{i}")
        if self.max_reasoning_tokens is not None and self.max_reasoning_tokens < 1:
            raise ConstraintError("max_reasoning_tokens must be >= 1",
                                  pointer="/max_reasoning_tokens")

    @property
    def content(self) -> Constraint:
        """What the content is bound to: `response_format` read by the one reader (text,
        json_object, or json_schema with OpenAI's strict default)."""
        try:
            return from_response_format(self.response_format)
        except ConstraintError as e:
            raise type(e)(e.message, keyword=e.keyword,
                          pointer=f"/response_format{e.pointer or ''}") from e

    @property
    def callable_tools(self) -> tuple[Tool, ...]:
        if self.tool_choice == "none":
            return ()
        if self.tool_choice in ("auto", "required"):
            if self.allowed_tools is None:
                return self.tools
            return tuple(t for t in self.tools if t.name in self.allowed_tools)
        return tuple(t for t in self.tools if t.name == self.tool_choice)


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
