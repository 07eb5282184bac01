"""The one translation of a constraint into llguidance's Lark dialect.

Everything kaname enforces is written here as Lark text: a whole constraint (`constraint_lark`)
for the engine and for an upstream server, and the pieces a chat turn's grammar is assembled
from (`json_expr`, `string_literal`, `regex_literal`). The local matcher and an upstream server
are given the same text, so what the proxy sends is, byte for byte, what its replay checks.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConstraintError
from .constraints import Choice, Constraint, JsonObject, JsonSchema, Lark, Regex, Text
from .costs import cost_error, without_costly
from .guards import Guards, apply_guards, escape_options, whitespace_options
from .numbers import exact_numbers
from .rewrite import rewrite_schema

ANY_TEXT = "(?s:.*)"
# the caps key under which guarded_json hands the compiler what a lenient compile left out
NOT_ENFORCED = "kaname_not_enforced"

# OpenAI's json_object: any JSON object. Its values are untyped, which the guards make
# bounded any-values (guards.py), so json_object gets the number caps too.
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


def json_expr(schema: Any, guards: Guards, *, strict: bool = True) -> str:
    """`%json` of `schema` narrowed by the guards, with kaname's layout and escape options.
    strict=False: keywords llguidance cannot enforce are skipped (the caller reports them and
    post-checks) instead of failing the grammar."""
    return guarded_json(schema, guards, strict=strict)[0]


def guarded_json(schema: Any, guards: Guards, *, strict: bool = True, rewrite: bool = True
                 ) -> tuple[str, dict[str, Any]]:
    """(`json_expr`, the caps it applied: each guard that took effect, with pointers).
    rewrite: then replace keywords llguidance refuses by equivalent ones it enforces
    (rewrite.py; after the guards, so that these see and report the user's own schema), here,
    so that every `%json` kaname writes says the same. A rewrite llguidance cannot build
    where the schema as it was builds (lenient, or a limit such as llguidance's intersection
    depth) is not made."""
    # number keywords llguidance would not enforce as written: refused (strict) or left out
    # and reported by the compiler (numbers.py)
    schema = exact_numbers(schema, strict=strict)
    guarded = apply_guards(schema, guards)
    escapes, escape_at = escape_options(schema)
    options: dict[str, Any] = {**whitespace_options(guards), **escapes}
    if not strict:
        options.update(lenient=True, coerce_one_of=True)
    expr = _json_body(guarded.schema, options)
    caps = dict(guarded.applied)
    if escape_at:
        caps["no_quote_or_backslash_escapes"] = {"at": escape_at}
    # costs.py refuses what llguidance would build at a cost past its limits, before it is
    # asked to build it (_builds too)
    too_costly = cost_error(guarded.schema)
    rewritten = rewrite_schema(guarded.schema) if rewrite else None
    if rewritten is not None and rewritten.changed:
        better = _json_body(rewritten.schema, options)
        better_costly = cost_error(rewritten.schema, named_in=guarded.schema)
        if better_costly is None and (too_costly is not None or _builds(better)
                                      or not _builds(expr)):
            expr, too_costly = better, None
            if rewritten.unchecked_formats:
                # enforced as their RFC / OpenAPI grammar, which the jsonschema post-check
                # does not check: narrower than the post-check there
                caps["formats_as_patterns"] = {"at": rewritten.unchecked_formats}
        elif better_costly is not None and too_costly is None and not _builds(expr):
            too_costly = better_costly  # what the schema needs, and cannot have
    if too_costly is not None:
        if strict:
            raise too_costly
        # lenient: what costs too much is left out, and reported (the compiler moves it from
        # the caps to `not_enforced`); the post-check still holds the answer to it
        lighter, dropped = without_costly(guarded.schema)
        if not dropped:
            raise too_costly  # (only the rewrite was too costly, and the schema does not build)
        expr = _json_body(lighter, options)
        caps[NOT_ENFORCED] = dropped
    if guards.separators is not None:
        caps["separators"] = {"value": list(guards.separators)}
        if guards.separator_space:
            caps["separators"]["then_spaces"] = guards.separator_space
    elif guards.max_whitespace is not None:
        caps["max_whitespace"] = {"value": guards.max_whitespace}
    return expr, caps


def _json_body(body: Any, options: dict[str, Any]) -> str:
    if body is True:
        body = {}
    elif body is False:
        body = {"not": {}}
    if not isinstance(body, dict):
        raise ConstraintError(f"a JSON Schema is an object or a boolean, not "
                              f"{type(body).__name__}", pointer="")
    return "%json " + json.dumps({**body, "x-guidance": options}, ensure_ascii=False)


def _builds(expr: str) -> bool:
    """Whether llguidance builds the `%json` grammar (no tokenizer needed for that)."""
    import llguidance as llg

    from .compiler import _on_big_stack, default_limits  # compiler imports this module

    grammar = llg.LLMatcher.grammar_from_lark(start_rule(expr))
    is_error, _ = _on_big_stack(lambda: llg.LLMatcher.validate_grammar_with_warnings(
        grammar, None, limits=default_limits()))
    return not is_error


def json_object_expr(guards: Guards) -> str:
    return json_expr(JSON_OBJECT_SCHEMA, guards)


def string_literal(text: str) -> str:
    """A Lark string literal (JSON string literals are valid llguidance literals)."""
    return json.dumps(text, ensure_ascii=False)


def regex_literal(pattern: str) -> str:
    """A Lark regex token `/pattern/` matching exactly what `pattern` matches."""
    return "/" + slashed(pattern) + "/"


def slashed(pattern: str) -> str:
    """`pattern` for inside a Lark `/.../`, where an unescaped `/` would end the token: it is
    written `\\/` (which the regex engine reads as `/`); escape sequences already in the
    pattern are copied as they are, so an escaped `\\/` or `\\\\` is not escaped twice. A line
    break in the pattern becomes `\\n`."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        out.append({"/": "\\/", "\n": "\\n", "\r": "\\r"}.get(ch, ch))
        i += 1
    return "".join(out)


def constraint_lark(c: Constraint, guards: Guards) -> str:
    """The whole grammar of a constraint, as one Lark text (a user's Lark grammar as given)."""
    if isinstance(c, Lark):
        return c.grammar
    if isinstance(c, JsonSchema):
        body = json_expr(c.schema, guards, strict=c.strict)
    elif isinstance(c, JsonObject):
        body = json_object_expr(guards)
    elif isinstance(c, Regex):
        body = regex_literal(c.pattern)
    elif isinstance(c, Choice):
        # One lexeme, not one rule per option: as rule alternatives, each option is an item
        # of the parser's row, and past llguidance's 2,000 items a row the parse fails while
        # decoding; a lexeme's alternatives are the lexer's (30,000 options compile in 0.3 s).
        options = " | ".join(string_literal(o) for o in c.options)
        return start_rule(f"CHOICE\nCHOICE: {options}")
    elif isinstance(c, Text):
        body = f"/{ANY_TEXT}/"
    else:  # pragma: no cover - Constraint is a closed union
        raise ConstraintError(f"unknown constraint {c!r}")
    return start_rule(body)


def start_rule(body: str) -> str:
    return f"start: {body}\n"
