"""One Lark grammar (llguidance dialect) for a whole assistant turn of a chat format.

    start: [reasoning] body
    body:  content END | content? OPENER calls END | OPENER calls END    (by tool_choice)

Reasoning is off / optional / required, with an optional token budget after which the end
marker is forced. Tool names are fixed strings; arguments are `%json` of each tool's parameters
(strict level "full"), any JSON object ("names"), or any name and object ("off"). Free text stops
at the next marker: a special token ends a regex by itself; a marker spelled as plain text is
reached through a lazy rule, so text can never swallow it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import llguidance as llg

from ..errors import ConstraintError
from ..grammar import GrammarCompiler, Guards, JsonSchema
from ..grammar.guards import apply_guards, escape_options, whitespace_options
from .request import Tool, TurnRequest
from .spec import ChatFormat

_ANY_TEXT = "/(?s:.*)/"


class _Builder:
    def __init__(self, fmt: ChatFormat, tokenizer: llg.LLTokenizer, guards: Guards):
        self.fmt = fmt
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
        return " ".join(f"<[{self.special[p]}]>" if p in self.special else json.dumps(p)
                        for p in parts if p)

    def starts_special(self, text: str) -> bool:
        return any(text.startswith(t) for t in self.special)

    def until(self, marker: str, *, max_tokens: int | None = None) -> str:
        """A rule: free text, then `marker`."""
        rule = self.name("text")
        opts = f"max_tokens={max_tokens}" if max_tokens else ""
        if max_tokens and not self.starts_special(marker):
            # llguidance lexemes are greedy: free text can only stop before a plain-text marker
            # through a lazy rule that contains the marker, and a token budget cutting that
            # rule short would drop the marker. A special-token marker has no such problem.
            raise ConstraintError(
                f"a reasoning budget needs {marker!r} to be a special token of the vocabulary",
                pointer="/max_reasoning_tokens")
        if self.starts_special(marker):
            # Text cannot contain a special token, so the regex ends where the marker starts.
            text_rule = self.name("free")
            self.rules.append(f"{text_rule}{f'[{opts}]' if opts else ''}: {_ANY_TEXT}")
            self.rules.append(f"{rule}: {text_rule} {self.lit(marker)}")
        else:
            flags = ", ".join(x for x in ("lazy", opts) if x)
            self.rules.append(f"{rule}[{flags}]: {_ANY_TEXT} {json.dumps(marker)}")
        return rule

    def json(self, schema: Any) -> str:
        guarded = apply_guards(schema, self.guards).schema
        options = {**whitespace_options(self.guards), **escape_options(schema)[0]}
        if isinstance(guarded, dict):
            guarded = {**guarded, "x-guidance": options}
        elif guarded is True:
            guarded = {"x-guidance": options}
        return "%json " + json.dumps(guarded, ensure_ascii=False)


def _special_id(tokenizer: llg.LLTokenizer, text: str) -> int | None:
    ids = tokenizer.tokenize_str(text, parse_special=True)
    return ids[0] if len(ids) == 1 and tokenizer.is_special_token(ids[0]) else None


def build_grammar(fmt: ChatFormat, req: TurnRequest, tokenizer: llg.LLTokenizer, *,
                  guards: Guards | None = None,
                  compiler: GrammarCompiler | None = None) -> str:
    """The Lark grammar for the assistant turn `req` asks for, in format `fmt`."""
    g = guards or Guards()
    b = _Builder(fmt, tokenizer, g)
    if req.strict_level == "full" and compiler is not None:
        _check_tool_schemas(req.tools, {t.name for t in req.callable_tools}, compiler)
    end = b.lit(fmt.end_of_turn)
    tools = req.callable_tools
    syntax = fmt.tool_calls
    if tools and syntax is None:
        raise ConstraintError(f"format {fmt.name!r} has no tool-call syntax", pointer="/tools")

    content_json = _content_schema(req.response_format)
    alternatives: list[str] = []
    if tools and syntax is not None:
        calls = _calls(b, fmt, req, tools)
        opener = b.lit(syntax.opener)
        if req.tool_choice == "auto":
            if content_json is None:
                alternatives.append(f"{b.until(syntax.opener)} {calls} {end}")
            else:
                alternatives.append(f"{b.json(content_json)}? {opener} {calls} {end}")
        else:
            alternatives.append(f"{opener} {calls} {end}")
    if req.tool_choice in ("auto", "none") or not tools:
        if content_json is None:
            alternatives.append(b.until(fmt.end_of_turn))
        else:
            wrapped = " ".join(x for x in (b.lit(fmt.json_prefix), b.json(content_json),
                                           b.lit(fmt.json_suffix)) if x)
            alternatives.append(f"{wrapped} {end}")
    b.rules.insert(0, "body: " + " | ".join(alternatives))

    reasoning = ""
    if req.reasoning != "off" and fmt.reasoning is not None:
        r = fmt.reasoning
        think = b.until(r.end, max_tokens=req.max_reasoning_tokens)
        b.rules.append(f"reasoning: {b.lit(r.begin)} {think}")
        reasoning = "reasoning " if req.reasoning == "required" else "reasoning? "
    return "\n".join([f"start: {reasoning}body", *b.rules]) + "\n"


def _calls(b: _Builder, fmt: ChatFormat, req: TurnRequest, tools: tuple[Tool, ...]) -> str:
    """Rule for the calls once the opener was written, through section_end."""
    s = fmt.tool_calls
    assert s is not None  # checked by the caller
    inner = b.name("call_inner")
    b.rules.append(f"{inner}: " + " | ".join(_call_inner(b, s, req, t) for t in tools))
    if req.strict_level == "off":
        b.rules[-1] = f"{inner}: {_call_inner(b, s, req, None)}"
    call = b.name("call")
    b.rules.append(f"{call}: {b.lit(s.call_begin)} {inner} {b.lit(s.call_end)}")
    # the first call's begin marker is the opener when there is no section marker
    first = f"{inner} {b.lit(s.call_end)}" if not s.section_begin else call
    more = f"({b.lit(s.separator)} {call})*" if req.parallel_tool_calls else ""
    rule = b.name("calls")
    b.rules.append(f"{rule}: {first} {more} {b.lit(s.section_end)}".rstrip())
    return rule


def _call_inner(b: _Builder, s: Any, req: TurnRequest, tool: Tool | None) -> str:
    params: Any = {"type": "object"}
    if tool is not None and req.strict_level == "full" and tool.parameters is not None:
        params = tool.parameters
    if s.layout == "json":
        name_schema: Any = {"type": "string"} if tool is None else {"const": tool.name}
        schema = {"type": "object", "properties": {s.name_key: name_schema, s.args_key: params},
                  "required": [s.name_key, s.args_key], "additionalProperties": False}
        return b.json(schema)
    name = "/[A-Za-z0-9_.-]+/" if tool is None else json.dumps(tool.name)
    parts = [b.lit(s.name_prefix), name]
    if s.index_sep:
        parts += [b.lit(s.index_sep), "/[0-9]+/"]
    parts += [b.lit(s.args_begin), b.json(params)]
    return " ".join(p for p in parts if p)


def _content_schema(rf: Any) -> Any:
    if not rf or rf.get("type") == "text":
        return None
    if rf.get("type") == "json_object":
        return {"type": "object"}
    if rf.get("type") == "json_schema":
        spec = rf.get("json_schema") or {}
        return spec.get("schema", {})
    raise ConstraintError(f"unsupported response_format type {rf.get('type')!r}",
                          pointer="/response_format/type")


def _check_tool_schemas(tools: tuple[Tool, ...], callable_names: set[str],
                        compiler: GrammarCompiler) -> None:
    """Compile each callable tool's parameters alone first, for errors that name the tool's
    pointer (`/tools/<i>/function/parameters/...`, `i` as in the request)."""
    for i, t in enumerate(tools):
        if t.parameters is None or t.name not in callable_names:
            continue
        try:
            compiler.compile(JsonSchema(t.parameters, strict=True))
        except ConstraintError as e:
            pointer = f"/tools/{i}/function/parameters{e.pointer or ''}"
            raise type(e)(f"tool {t.name!r}: {e.message}", keyword=e.keyword,
                          pointer=pointer) from e
