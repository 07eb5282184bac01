"""One Lark grammar (llguidance dialect) for a whole assistant turn of a chat format.

    start: [reasoning | off marker] body
    body:  content END | content? OPENER calls CALLS_END | preamble? OPENER calls CALLS_END
           (by tool_choice; `content?` only where the format writes content before calls,
           `preamble?` where it writes a message before calls instead: harmony)

Reasoning is off / optional / required, with an optional token budget after which the end
marker is forced; a format's "no reasoning" marker (DeepSeek's "</think>") is allowed wherever
no reasoning block is. Tool names are fixed strings; arguments are `%json` of each tool's
parameters (strict level "full"), any JSON object ("names"), or any name and object ("off");
per-key arguments bind each key to its property schema (see `keyed.py`). A format with other
header spellings (harmony) gets every one of them, each call carrying its own begin marker.
Free text stops at the next marker: a special token ends a regex by itself; a marker spelled as
plain text is reached through a lazy rule, so text can never swallow it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import llguidance as llg

from ..errors import ConstraintError
from ..grammar import GrammarCompiler, Guards, JsonObject, JsonSchema, Lark, Text
from ..grammar.embed import embed_lark
from ..grammar.lark import (
    ANY_TEXT,
    json_expr,
    json_object_expr,
    regex_literal,
    start_rule,
    string_literal,
)
from ..grammar.schema_walk import map_subschemas
from . import keyed, raw_text
from .request import CUSTOM_INPUT, Origins, Tool, TurnRequest
from .spec import ChatFormat, ToolCallSyntax
from .tool_checks import ToolCheck, check_tools

# Free text of a turn whose calls are bare JSON (Llama): it cannot start like a call.
_NO_BRACE_TEXT = "(?s:([^{].*)?)"


class _Builder:
    def __init__(self, fmt: ChatFormat, tokenizer: llg.LLTokenizer, guards: Guards,
                 origins: Origins):
        self.fmt = fmt
        self.origins = origins  # where the request's fields sat, for errors
        self.tokenizer = tokenizer
        self.guards = guards
        self.rules: list[str] = []
        self._n = 0
        # marker text -> token id, for markers that are one special token of this vocabulary
        self.special = {t: i for t in fmt.special_tokens
                        if (i := _special_id(tokenizer, t)) is not None}
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted(
            self.special, key=len, reverse=True)) + ")") if self.special else None

    def name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def lit(self, text: str) -> str:
        """Lark for a fixed string: special tokens as tokens, the rest as literals."""
        if not text:
            return ""
        parts = self._split.split(text) if self._split else [text]
        items = [f"<[{self.special[p]}]>" if p in self.special else string_literal(p)
                 for p in parts if p]
        return items[0] if len(items) == 1 else "(" + " ".join(items) + ")"

    def starts_special(self, text: str) -> bool:
        return any(text.startswith(t) for t in self.special)

    def until(self, markers: str | Sequence[str], *, max_tokens: int | None = None,
              text: str = ANY_TEXT, exclude: Sequence[str] = ()) -> str:
        """A rule: free text (matching the regex `text`, containing none of `exclude`), then
        one of `markers`.

        Markers that start with a special token end the text by themselves; plain-text
        markers need a lazy rule. A mix keeps the first marker's kind only."""
        ms = [markers] if isinstance(markers, str) else list(dict.fromkeys(markers))
        special = self.starts_special(ms[0])
        ms = [m for m in ms if self.starts_special(m) == special]
        rule = self.name("text")
        opts = f"max_tokens={max_tokens}" if max_tokens else ""
        if max_tokens and not special:
            # llguidance lexemes are greedy: free text can only stop before a plain-text marker
            # through a lazy rule that contains the marker, and a token budget cutting that
            # rule short would drop the marker. A special-token marker has no such problem.
            raise ConstraintError(
                f"a reasoning budget needs {ms[0]!r} to be a special token of the vocabulary",
                pointer=self.origins.max_reasoning_tokens)
        ends = " | ".join(self.lit(m) for m in ms)
        ends = ends if len(ms) == 1 else f"({ends})"
        free = f"/{text}/"
        # a marker that is a special token can still be spelled out in ordinary tokens
        # ("</" "tool" "_call" ">"), which the parser reads as the marker: keep every one out,
        # the end markers too (plain-text ones end the lazy rule where they first appear)
        spelled = list(dict.fromkeys([*exclude, *(ms if special else ())]))
        if spelled:
            free = self.name("FREE").upper()
            avoid = "|".join(raw_text.literal(c) for c in spelled)
            self.rules.append(f"{free}: /{text}/ & ~/(?s:.*)(?:{avoid})(?s:.*)/")
        if special:
            # Text cannot contain a special token, so the regex ends where the marker starts.
            text_rule = self.name("free")
            self.rules.append(f"{text_rule}{f'[{opts}]' if opts else ''}: {free}")
            self.rules.append(f"{rule}: {text_rule} {ends}")
        else:
            flags = ", ".join(x for x in ("lazy", opts) if x)
            self.rules.append(f"{rule}[{flags}]: {free} {ends}")
        return rule

    def json(self, schema: Any, *, strict: bool = True) -> str:
        return json_expr(schema, self.guards, strict=strict)


def _special_id(tokenizer: llg.LLTokenizer, text: str) -> int | None:
    ids = tokenizer.tokenize_str(text, parse_special=True)
    return ids[0] if len(ids) == 1 and tokenizer.is_special_token(ids[0]) else None


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def build_grammar(fmt: ChatFormat, req: TurnRequest, tokenizer: llg.LLTokenizer, *,
                  guards: Guards | None = None, compiler: GrammarCompiler | None = None,
                  checks: dict[str, ToolCheck] | None = None) -> str:
    """The Lark grammar for the assistant turn `req` asks for, in format `fmt`. A strict tool
    that cannot be enforced is a ConstraintError (`checks`: `check_tools`'s, if already made)."""
    g = guards or Guards()
    b = _Builder(fmt, tokenizer, g, req.origins)
    tools = req.callable_tools
    syntax = fmt.tool_calls
    if tools and syntax is None:
        raise ConstraintError(f"format {fmt.name!r} has no tool-call syntax",
                              pointer=req.origins.tools)
    if checks is None:
        check_tools(fmt, req, compiler)
    content_ends = (fmt.end_of_turn, *fmt.end_of_turn_alt)
    content_end = _one_of(b, content_ends)
    cb = b.lit(fmt.content_begin)

    content = _content(b, req)
    alternatives: list[str] = []
    bare_calls = False  # calls without an opener: free text may not look like one
    if tools and syntax is not None:
        calls = _calls(b, fmt, req, tools)
        calls_end = _one_of(b, (fmt.calls_end, *fmt.end_of_turn_alt))
        # with other headers the opener is part of each header spelling (see `_header`)
        opener = "" if syntax.headers else b.lit(syntax.opener)
        bare_calls = not syntax.opener and req.tool_choice == "auto"
        if req.tool_choice == "auto" and syntax.content_before_calls and syntax.opener:
            if content is None:
                text = b.until(syntax.opener, exclude=fmt.marker_cores)
                lead = f"({cb} {text} | {opener})" if cb else text
                alternatives.append(f"{lead} {calls} {calls_end}")
            else:
                before = _seq(cb, content, b.lit(syntax.after_content))
                alternatives.append(_seq(f"({before})?", opener, calls, calls_end))
        else:
            preamble = ""
            # at most one, free text ending at its marker; it is the turn's content, so only
            # where content is free text (JSON content follows response_format)
            if syntax.preamble_begin and content is None:
                text = b.until(syntax.preamble_end)
                preamble = f"({_seq(b.lit(syntax.preamble_begin), text)})?"
            alternatives.append(_seq(preamble, opener, calls, calls_end))
    if req.tool_choice in ("auto", "none") or not tools:
        if content is None:
            # nor hold a call's head: the parser reads a call inside text as a layout it
            # does not take, and raises
            heads = ("{" + json.dumps(syntax.name_key) + ":",) if bare_calls and syntax else ()
            text = b.until(content_ends, text=_NO_BRACE_TEXT if bare_calls else ANY_TEXT,
                           exclude=(*fmt.marker_cores, *heads))
            alternatives.append(_seq(cb, text))
        else:
            alternatives.append(_seq(cb, b.lit(fmt.json_prefix), content,
                                     b.lit(fmt.json_suffix), content_end))
    b.rules.insert(0, "body: " + " | ".join(alternatives))

    lead = ""
    r = fmt.reasoning
    if r is None and req.reasoning == "required":
        raise ConstraintError(f"reasoning required, but format {fmt.name} has no reasoning "
                              "block", pointer=req.origins.reasoning)
    opening = req.opening_in(fmt)
    if r is not None and opening and opening == r.begin:
        # the prompt opened the block: the turn starts inside it and must close it
        think = b.until(r.end, max_tokens=req.max_reasoning_tokens)
        lead = f"{think} "
    elif r is not None and opening:
        lead = ""  # the prompt wrote the no-reasoning marker
    elif r is not None:
        off = b.lit(r.off)
        if req.reasoning == "off":
            lead = f"{off}? " if off else ""
        else:
            think = b.until(r.end, max_tokens=req.max_reasoning_tokens)
            b.rules.append(f"reasoning: {b.lit(r.begin)} {think}")
            if req.reasoning == "required":
                lead = "reasoning "
            else:
                lead = f"(reasoning | {off})? " if off else "reasoning? "
    return "\n".join([f"start: {lead}body", *b.rules]) + "\n"


def _one_of(b: _Builder, markers: Sequence[str]) -> str:
    items = [b.lit(m) for m in dict.fromkeys(markers) if m]
    return items[0] if len(items) == 1 else "(" + " | ".join(items) + ")"


def _calls(b: _Builder, fmt: ChatFormat, req: TurnRequest, tools: tuple[Tool, ...]) -> str:
    """Rule for the calls once the opener was written, through section_end."""
    s = fmt.tool_calls
    assert s is not None  # checked by the caller
    inner = b.name("call_inner")
    if req.strict_level == "off":
        b.rules.append(f"{inner}: {_call_inner(b, s, req, None)}")
    else:
        b.rules.append(f"{inner}: " + " | ".join(_call_inner(b, s, req, t) for t in tools))
    call = b.name("call")
    begin = "" if s.headers else b.lit(s.call_begin)  # else in each header spelling
    b.rules.append(f"{call}: {_seq(begin, inner, b.lit(s.call_end))}")
    # the first call's begin marker is the opener when there is no section marker (with other
    # header spellings it is in `inner`)
    first = _seq(inner, b.lit(s.call_end)) if not s.section_begin else call
    # A named tool_choice forces exactly one call of that function (as OpenAI does): seen on
    # Gemma, a model allowed more repeats the forced call until max_tokens.
    named = req.tool_choice not in ("auto", "required", "none")
    cap = b.guards.max_parallel_calls
    more = f"({_seq(b.lit(s.separator), call)})" + ("*" if cap is None else f"{{0,{cap - 1}}}") \
        if req.parallel_tool_calls and s.parallel and not named and cap != 1 else ""
    rule = b.name("calls")
    b.rules.append(f"{rule}: {_seq(first, more, b.lit(s.section_end))}")
    return rule


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


# What belongs to a schema's root resource: its dialect, base URI and definitions.
_ROOT_KEYWORDS = ("$schema", "$id", "$defs", "definitions")
_DEFINITIONS = ("#/$defs/", "#/definitions/")


def _embedded(params: Any, prefix: str) -> tuple[dict[str, Any], Any]:
    """(root keywords, body) of `params` for embedding at `prefix` inside a wrapper schema.

    The root keywords go to the wrapper's root, where the bare schema has them: the guards
    (`max_depth` unrolls recursion through root definitions only), the rewrites and llguidance
    (which reads the dialect at the root) then see the parameters as they see
    `JsonSchema(params)`, so a call's arguments and the bare schema accept the same values.
    The body's other local `$ref`s ("#", "#/properties/...") move `prefix` deeper."""
    rebased = _rebase_refs(params, prefix)
    if not isinstance(rebased, dict):
        return {}, rebased
    root = {k: v for k, v in rebased.items() if k in _ROOT_KEYWORDS}
    return root, {k: v for k, v in rebased.items() if k not in _ROOT_KEYWORDS}


def _rebase_refs(schema: Any, prefix: str) -> Any:
    """A copy of `schema` whose local `$ref`s ("#...") point `prefix` deeper, but for those
    into the root's definitions (which `_embedded` keeps at the root). Only references in
    schema positions: a `$ref` key inside a `const` or `enum` value is data."""
    if not isinstance(schema, dict):
        return schema
    out = map_subschemas(schema, lambda s: _rebase_refs(s, prefix))
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and not ref.startswith(_DEFINITIONS):
        out["$ref"] = f"#{prefix}{ref[1:]}"
    return out


# OpenAI: "omitting parameters defines a function with an empty parameter list". Seen through
# vLLM: a model given such a tool invented {"currentTime": ...} when any object was allowed.
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {},
                                "additionalProperties": False}


def _call_inner(b: _Builder, s: ToolCallSyntax, req: TurnRequest, tool: Tool | None) -> str:
    if tool is not None and tool.custom and req.strict_level == "full":
        return _custom_call(b, s, tool, tool.schema_pointer(req.tools.index(tool)))
    params: Any = {"type": "object"}  # strict levels names / off: any object
    if tool is not None and req.strict_level == "full":
        params = tool.parameters if tool.parameters is not None else NO_ARGUMENTS
    if s.layout == "json":
        # `enum`, not `const`: the parameters' dialect becomes the wrapper's, and llguidance
        # reads no `const` in draft 4
        name_schema: Any = {"type": "string"} if tool is None else {"enum": [tool.name]}
        # the parameters move under properties/<args_key>, their definitions stay at the root
        root, params = _embedded(params, "/properties/" + _pointer_token(s.args_key))
        schema = {**root, "type": "object",
                  "properties": {s.name_key: name_schema, s.args_key: params},
                  "required": [s.name_key, s.args_key], "additionalProperties": False}
        return b.json(schema, strict=tool is not None and tool.strict)
    name = "/[A-Za-z0-9_.-]+/" if tool is None else string_literal(tool.name)
    parts = [_header(b, s, name)]
    strict = tool is not None and tool.strict
    parts.append(_keyed_args(b, s, params, strict) if s.layout == "per_key"
                 else b.json(params, strict=strict))
    return _seq(*parts)


def _custom_call(b: _Builder, s: ToolCallSyntax, tool: Tool, at: str) -> str:
    """A custom tool's call: its input is the one string argument `input`, written as the
    format writes a string argument (JSON where arguments are JSON, raw in per-key syntax),
    in the tool's grammar."""
    colon = b.guards.separators[1] if b.guards.separators else ": "
    comma = b.guards.separators[0] if b.guards.separators else ", "
    per_key = s.layout == "per_key"
    if isinstance(tool.grammar, Text):
        # in per-key syntax: raw text, as a string argument's (`_keyed_value` with any text)
        value = _raw_text(b, s.value_end, [], avoid=_value_avoids(s)) if per_key else None
    else:
        assert tool.grammar is not None  # a custom tool
        lark = tool.grammar.grammar if isinstance(tool.grammar, Lark) \
            else start_rule(regex_literal(tool.grammar.pattern))
        embedded = embed_lark(lark, b.name("ct"), json_escaped=not per_key, pointer=at)
        b.rules.append(embedded.rules)
        value = f"{embedded.start} {b.lit(s.value_end)}" if per_key else embedded.start
    if per_key:
        assert value is not None
        return _seq(b.lit(s.name_prefix), string_literal(tool.name), b.lit(s.args_begin),
                    b.lit(s.key_begin), string_literal(CUSTOM_INPUT), b.lit(s.key_end),
                    b.lit(s.value_begin), value)
    if value is None:  # format text: any string, the guards' caps included
        args = b.json(tool.parameters, strict=True)
    else:
        args = _seq(string_literal("{" + json.dumps(CUSTOM_INPUT) + colon + '"'), value,
                    string_literal('"}'))
    if s.layout == "json":
        head = "{" + json.dumps(s.name_key) + colon + json.dumps(tool.name, ensure_ascii=False) \
            + comma + json.dumps(s.args_key) + colon
        return _seq(string_literal(head), args, string_literal("}"))
    return _seq(_header(b, s, string_literal(tool.name)), args)


def _header(b: _Builder, s: ToolCallSyntax, name: str) -> str:
    """name_prefix + NAME (the Lark `name`) [+ index] + args_begin; where the format has other
    header spellings, every one of them, each with its begin marker (call_begin included)."""
    # a runaway guard, like the engine's number caps: a call index has at most 4 digits
    index = [b.lit(s.index_sep), "/[0-9]{1,4}/"] if s.index_sep else []
    if not s.headers:
        return _seq(b.lit(s.name_prefix), name, *index, b.lit(s.args_begin))
    ends: dict[str, list[str]] = {}
    for begin, end in s.all_headers:
        ends.setdefault(begin, []).append(end)
    return "(" + " | ".join(_seq(b.lit(begin + s.name_prefix), name, *index, _one_of(b, e))
                            for begin, e in ends.items()) + ")"


def _keyed_args(b: _Builder, s: ToolCallSyntax, params: Any, strict: bool) -> str:
    """Per-key arguments: the declared keys in property order, then keys that are only
    `required`, required ones present; then undeclared keys where the schema allows them."""
    props = keyed.properties(params) or {}
    more = keyed.extra(params)
    required = [k for k in params.get("required") or () if isinstance(k, str)]
    keys: list[tuple[str, Any]] = list(props.items())
    if more is not None:  # a required key that is not declared: bound as undeclared ones are
        keys += [(k, more) for k in dict.fromkeys(required) if k not in props]
    key_open, value_open = b.lit(s.key_begin), b.lit(s.value_begin)
    pairs = []
    for k, prop in keys:
        pair = _seq(key_open, string_literal(k), b.lit(s.key_end), value_open,
                    _keyed_value(b, s, params, prop, strict))
        pairs.append(pair if k in required else f"({pair})?")
    cap = keyed.extra_cap(b.guards.max_array_items)
    if more is not None and cap > 0:
        key = _raw_text(b, s.key_end, [_any_text(b.guards, least=1)],
                        exclude=[k for k, _ in keys])
        value = _keyed_value(b, s, params, more, strict)
        pairs.append(f"({_seq(key_open, key, value_open, value)}){{0,{cap}}}")
    rule = b.name("args")
    b.rules.append(f"{rule}: {' '.join(pairs)}" if pairs else f'{rule}: ""')
    return rule


def _keyed_value(b: _Builder, s: ToolCallSyntax, params: Any, prop: Any, strict: bool) -> str:
    """A value through the end marker: bare text for a string schema (`null` too for an
    optional one), JSON otherwise; `prop` True: any text."""
    if prop is True:
        return _raw_text(b, s.value_end, [_any_text(b.guards, least=0)],
                         avoid=_value_avoids(s))
    r = keyed.raw(params, prop)
    if r is None:
        value = f"{b.json(keyed.value_schema(params, prop), strict=strict)} {b.lit(s.value_end)}"
        if s.python_booleans and keyed.is_boolean(params, prop):
            return f'({value} | ("True" | "False") {b.lit(s.value_end)})'
        return value
    text = _raw_text(b, s.value_end, keyed.raw_regexes(
        r, max_string_length=b.guards.max_string_length,
        max_fraction_digits=b.guards.max_fraction_digits), avoid=_value_avoids(s))
    return f'("null" {b.lit(s.value_end)} | {text})' if r.nullable else text


def _any_text(guards: Guards, least: int) -> str:
    """Raw text of `least` characters or more: an undeclared key or any-text value is a string
    without maxLength, so the string guard bounds it as it bounds declared ones (else a model
    can write one key name for ever, the guard set)."""
    most = guards.max_string_length
    return f"(?s:.{{{least},{'' if most is None else max(most, least)}}})"


def _value_avoids(s: ToolCallSyntax) -> list[str]:
    """What a raw value never holds besides its end marker: a key's or the call's opening tag
    (the parser reads a value holding one as a closing tag left out, and raises)."""
    return [c for m in (s.key_begin, s.call_end) if (c := m.strip())]


def _raw_text(b: _Builder, marker: str, regexes: Sequence[str],
              exclude: Sequence[str] = (), avoid: Sequence[str] = ()) -> str:
    """A rule: raw text matching each of `regexes` (over the whole text), none of `exclude`,
    never containing the core of `marker` (the parser cuts the text at its first occurrence,
    spelled with any tokens and its edge whitespace optional) nor any of `avoid`, then
    `marker`. One lexeme: llguidance's `&` and `~` on a terminal."""
    term = b.name("RAW")
    parts = [f"/{r}/" for r in regexes] or [f"/{ANY_TEXT}/"]
    if exclude:
        parts.append("~/(?:" + "|".join(raw_text.literal(k) for k in exclude) + ")/")
    inside = [marker.strip() or marker, *(a for a in avoid if a)]
    parts.append("~/(?s:.*(?:" + "|".join(raw_text.literal(a) for a in inside) + ").*)/")
    b.rules.append(f"{term}: {' & '.join(parts)}")
    rule = b.name("raw")
    # plain-text markers: a lazy rule stops the text at the marker (lexemes are greedy)
    lazy = "" if b.starts_special(marker) else "[lazy]"
    b.rules.append(f"{rule}{lazy}: {term} {b.lit(marker)}")
    return rule


def _content(b: _Builder, req: TurnRequest) -> str | None:
    """The Lark of JSON content (json_object, or json_schema as strict as it says), or None for
    free text."""
    c = req.content
    if isinstance(c, Text):
        return None
    if isinstance(c, JsonObject):
        return json_object_expr(b.guards)
    if isinstance(c, JsonSchema):
        return b.json(c.schema, strict=c.strict)
    raise ConstraintError(f"response_format type {type(c).__name__.lower()!r} is not "
                          "supported for chat content; use text, json_object or json_schema",
                          pointer=f"{req.origins.content}/type")
