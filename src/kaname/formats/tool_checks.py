"""What a turn enforces of each tool's parameters, as OpenAI defines `strict` per function.

A tool with `"strict": true` is enforced fully or the request is refused (keyword + pointer).
Any other tool is enforced wherever it can be: what cannot (a keyword llguidance lacks, a
constraint per-key syntax cannot bind) is listed with its pointer into the request, and every
call's arguments are post-checked against the tool's whole schema with jsonschema. The strict
level stays the ceiling: below "full" no argument schema is enforced or checked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llguidance as llg

from ..errors import ConstraintError
from ..grammar import CompiledConstraint, GrammarCompiler, JsonSchema, NotEnforced
from ..grammar.compiler import accepts
from . import keyed
from .parser import custom_input
from .request import CUSTOM_INPUT, Tool, TurnRequest
from .spec import ChatFormat


@dataclass(frozen=True)
class ToolCheck:
    """One callable tool: where it sits in the request, what of it is not enforced, and the
    compiled parameters whose `validate` post-checks a call's arguments."""

    index: int
    tool: Tool
    compiled: CompiledConstraint | None
    not_enforced: tuple[NotEnforced, ...] = ()
    tokenizer: llg.LLTokenizer | None = None  # a custom tool's grammar is checked on tokens

    def verdict(self, arguments: str) -> bool | None:
        """The post-check of one call's arguments (None: nothing to check against)."""
        if self.compiled is None:
            return None
        if self.tool.custom:
            assert self.tokenizer is not None
            return accepts(self.compiled, self.tokenizer, custom_input(arguments))
        return self.compiled.validate(arguments)


def check_tools(fmt: ChatFormat, req: TurnRequest,
                compiler: GrammarCompiler | None) -> dict[str, ToolCheck]:
    """Compile each callable tool's parameters alone (so errors name the tool's pointer,
    `Tool.schema_pointer`); raise for a strict tool that cannot be enforced.
    Without a compiler only what the format's syntax cannot bind is checked."""
    if req.strict_level != "full":
        return {}
    callable_names = {t.name for t in req.callable_tools}
    per_key = fmt.tool_calls is not None and fmt.tool_calls.layout == "per_key"
    checks: dict[str, ToolCheck] = {}
    for i, t in enumerate(req.tools):
        if t.name not in callable_names:
            continue
        if t.parameters is None:
            checks[t.name] = ToolCheck(i, t, None)
            continue
        if t.custom:
            checks[t.name] = _custom_check(i, t, compiler)
            continue
        at = t.schema_pointer(i)
        problems = keyed.unenforceable(t.parameters, at) if per_key else []
        if t.strict and problems:
            raise problems[0]
        skipped = [NotEnforced(p.keyword or "", p.pointer or at) for p in problems]
        if compiler is None:
            checks[t.name] = ToolCheck(i, t, None, tuple(skipped))
            continue
        try:
            compiled = compiler.compile(JsonSchema(t.parameters, strict=t.strict))
        except ConstraintError as e:
            raise e.at(at, what=f"tool {t.name!r}") from e
        skipped += [NotEnforced(n.keyword, f"{at}{n.pointer}") for n in compiled.not_enforced]
        checks[t.name] = ToolCheck(i, t, compiled, tuple(dict.fromkeys(skipped)))
    return checks


def _custom_check(i: int, t: Tool, compiler: GrammarCompiler | None) -> ToolCheck:
    """A custom tool's grammar, compiled alone: its errors point at the definition, and its
    matcher post-checks each call's input."""
    if compiler is None or t.grammar is None:
        return ToolCheck(i, t, None)
    at = t.schema_pointer(i)
    try:
        compiled = compiler.compile(t.grammar)
    except ConstraintError as e:
        raise e.at(at, what=f"tool {t.name!r}") from e
    return ToolCheck(i, t, compiled, tokenizer=compiler.tokenizer)


def call_verdicts(checks: dict[str, ToolCheck], calls: Sequence[dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Per call of an OpenAI message's `tool_calls`: `{"id", "name", "valid"}` (valid: the
    jsonschema post-check of its arguments; None where the strict level checks nothing)."""
    out = []
    for call in calls:
        fn = call.get("function") or {}
        if call.get("type") == "custom":  # checked on the arguments that carried the input
            custom = call.get("custom") or {}
            fn = {"name": custom.get("name"), "arguments": json.dumps(
                {CUSTOM_INPUT: custom.get("input", "")}, ensure_ascii=False)}
        check = checks.get(fn.get("name", ""))
        valid = check.verdict(fn.get("arguments", "")) if check is not None else None
        out.append({"id": call.get("id"), "name": fn.get("name"), "valid": valid})
    return out


def not_enforced(checks: dict[str, ToolCheck]) -> list[dict[str, str]]:
    return [{"keyword": n.keyword, "pointer": n.pointer}
            for c in checks.values() for n in c.not_enforced]


__all__ = ["ToolCheck", "call_verdicts", "check_tools", "not_enforced"]
