"""What one chat turn asks of the grammar: tools, tool_choice, reasoning, response format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConstraintError
from ..grammar import Constraint, from_response_format

StrictLevel = Literal["full", "names", "off"]
ReasoningMode = Literal["off", "on", "required"]


@dataclass(frozen=True)
class Tool:
    """A function tool. strict: OpenAI's `function.strict`; true means its parameters are
    enforced fully or the request is refused, otherwise what cannot be enforced is reported and
    the arguments are post-checked."""

    name: str
    parameters: Mapping[str, Any] | None = None  # None: any JSON object
    description: str = ""
    strict: bool = False

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

    tool_choice: "none" | "auto" | "required" | a function name.
    response_format: the request's, as sent: None / text / json_object / json_schema.
    """

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    response_format: Mapping[str, Any] | None = None
    reasoning: ReasoningMode = "off"
    max_reasoning_tokens: int | None = None
    strict_level: StrictLevel = "full"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConstraintError("tool names must be unique", pointer="/tools")
        if self.tool_choice not in ("none", "auto", "required") and self.tool_choice not in names:
            raise ConstraintError(f"tool_choice names unknown function {self.tool_choice!r}",
                                  pointer="/tool_choice")
        if self.tool_choice == "required" and not self.tools:
            raise ConstraintError("tool_choice 'required' needs at least one tool",
                                  pointer="/tool_choice")
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
            return self.tools
        return tuple(t for t in self.tools if t.name == self.tool_choice)


def tools_from_openai(tools: Sequence[Mapping[str, Any]] | None) -> tuple[Tool, ...]:
    """OpenAI `tools` list → Tools; bad shapes are a ConstraintError naming the pointer."""
    out = []
    for i, t in enumerate(tools or ()):
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
