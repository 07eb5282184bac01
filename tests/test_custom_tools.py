"""Custom tools (OpenAI's `type: "custom"`): free-form input bound to a Lark or regex grammar
inside each format's call syntax, parsed back into custom tool calls.

The strongest evidence is the random model: in every format, every call it finishes must carry
an input the tool's grammar accepts, checked by a matcher built from the user's grammar as
given (independent of the escaping that put it inside a JSON string).
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streaming import merge_chat_chunks

from kaname.decoding import SamplingParams, decode
from kaname.errors import ConstraintError
from kaname.formats import (
    FORMATS,
    StreamParser,
    TurnRequest,
    build_grammar,
    get_format,
    merge_deltas,
    parse,
    render_prompt,
    tools_from_openai,
)
from kaname.formats.parser import custom_input_prefix
from kaname.grammar import GrammarCompiler, Lark, Regex
from kaname.grammar.compiler import accepts
from kaname.grammar.embed import embed_lark, json_escape
from kaname.grammar.lark import regex_literal
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.synthetic import synthetic_tokenizer

ARITH = r"""
start: expr
expr: term (SP ADD SP term)* -> add
term: factor (SP MUL SP factor)*
factor: INT | "(" expr ")"
SP: " "
ADD: "+" | "-"
MUL: "*" | "/"
%import common.INT
"""
# A patch language in the spirit of Codex's apply_patch: lines, quotes and backslashes in
# file content, so the JSON escaping of newlines and specials is exercised.
PATCH = r"""
start: "*** Begin Patch" LF hunk+ "*** End Patch" LF?
hunk: "*** Add File: " PATH LF ("+" LINE LF)+
    | "*** Delete File: " PATH LF
PATH: /[A-Za-z0-9_.\/-]{1,24}/
LINE: /[^\n]{0,30}/
%import common.LF
"""
TAG = r'[a-z"\\]{1,6}\n(x|y)\t?'


def _tools() -> list[dict]:
    def custom(name: str, syntax: str | None = None, definition: str = "") -> dict:
        fmt = {"type": "text"} if syntax is None else {
            "type": "grammar", "grammar": {"syntax": syntax, "definition": definition}}
        return {"type": "custom", "custom": {"name": name, "format": fmt}}

    return [custom("calc", "lark", ARITH), custom("apply_patch", "lark", PATCH),
            custom("tag", "regex", TAG), custom("note"),
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": False}}}]


TOOLS = tools_from_openai(_tools())
CALLABLE = [n for n, f in sorted(FORMATS.items()) if f.tool_calls is not None]


def _spelled_value_end(name: str) -> bool:
    """A per-key format whose value end is plain text in its vocabulary (Qwen3-Coder's
    "\n</parameter>\n"): a random model ends a free-text value only by spelling that out,
    which it almost never does within the budget (0 of 8 runs), so the `note` tool's runs say
    nothing there; test_formats_qwen3_coder.py holds its grammar to written calls instead."""
    s = get_format(name).tool_calls
    return s is not None and s.layout == "per_key" \
        and s.value_end.strip() not in get_format(name).special_tokens


def _run(fmt_name: str, req: TurnRequest, seeds: range, max_tokens: int = 400):
    fmt = get_format(fmt_name)
    tok, eos = synthetic_tokenizer(fmt.special_tokens)
    compiler = GrammarCompiler(tok)
    compiled = compiler.compile(Lark(build_grammar(fmt, req, tok, compiler=compiler)))
    runtime = RandomLogitsRuntime(tok, eos_token_ids=eos)
    for seed in seeds:
        runtime.seed = seed
        d = decode(runtime, [0], compiled.new_matcher(), SamplingParams(temperature=0.9,
                                                                        seed=seed),
                   max_tokens=max_tokens)
        yield fmt, tok, compiler, d


@pytest.mark.parametrize(("name", "tool"), [
    (n, t) for n in CALLABLE for t in ("calc", "apply_patch", "tag", "note")
    if not (t == "note" and _spelled_value_end(n))])
def test_named_custom_tool_input_is_in_its_grammar(name, tool):
    req = TurnRequest(tools=TOOLS, tool_choice=tool, opening="")  # calls only: no reasoning
    spec = next(t for t in TOOLS if t.name == tool)
    stops = 0
    # the random model spells a patch's fixed framing a few bytes a token (any token that
    # spells a prefix of forced text is allowed), so a patch takes more tokens than the rest
    budget = 800 if tool == "apply_patch" else 400
    for fmt, tok, compiler, d in _run(name, req, range(8), max_tokens=budget):
        if d.finish_reason != "stop":
            continue
        stops += 1
        turn = parse(fmt, d.text, tools=TOOLS)
        assert len(turn.tool_calls) == 1, d.text
        call = turn.tool_calls[0]
        assert call.custom and call.name == tool
        assert call.to_openai() == {"id": call.id, "type": "custom",
                                    "custom": {"name": tool, "input": call.input}}
        assert spec.grammar is not None
        assert accepts(compiler.compile(spec.grammar), tok, call.input), (d.text, call.input)
        if tool == "tag":
            assert re.fullmatch(TAG, call.input), call.input
        _stream_equals(fmt, d.text, turn)
    assert stops >= 4, f"only {stops}/8 turns ended"


@pytest.mark.parametrize("name", CALLABLE)
def test_custom_and_function_tools_together(name):
    """tool_choice required over all tools: each call is of a known tool and valid."""
    req = TurnRequest(tools=TOOLS, tool_choice="required", opening="")
    by_name = {t.name: t for t in TOOLS}
    calls = 0
    # the `note` tool's free text ends rarely where its end is spelled out: more runs
    for fmt, tok, compiler, d in _run(name, req, range(20 if _spelled_value_end(name) else 10)):
        if d.finish_reason != "stop":
            continue
        turn = parse(fmt, d.text, tools=TOOLS)
        for call in turn.tool_calls:
            calls += 1
            tool = by_name[call.name]
            assert call.custom == tool.custom
            if tool.grammar is not None:
                assert accepts(compiler.compile(tool.grammar), tok, call.input)
            else:
                assert set(json.loads(call.arguments)) == {"city"}
        _stream_equals(fmt, d.text, turn)
    assert calls >= 4


def _stream_equals(fmt, text: str, turn) -> None:
    for seed in range(10):
        r = random.Random(seed)
        sp = StreamParser(fmt, tools=TOOLS)
        deltas, i = [], 0
        while i < len(text):
            step = r.randint(1, 9)
            deltas += sp.feed(text[i:i + step])
            i += step
        _, rest = sp.finish()
        merged = merge_deltas(deltas + rest)
        assert merged["tool_calls"] == [c.to_openai() for c in turn.tool_calls]
        assert merged["content"] == turn.content


# ---- the escaping, checked against the grammar as given, on strings full of escapes --------

_ALPHABET = 'ab"\\\n\t\x00\x1c\x1f /é<>-'
_PATTERNS = [r'[a"]*', r"[^a]{0,4}", r".{0,3}", r"(?s:.{0,3})", r"(?s).{1,3}", r"\s\S?",
             r'[\s"]+', r"[^\s\\]*", r'(a|"|\\)+', r"\\\n", r"[\x00-\x1f]*", r"\W?b?",
             r'[^"]+\t', r"<[a-z]+>", r"[<>\-]{1,3}", r"^a.$", r"[]a]+", r"[^]a]?"]


@pytest.fixture(scope="module")
def escaped():
    tok, _ = synthetic_tokenizer(())
    compiler = GrammarCompiler(tok)
    out = []
    for p in _PATTERNS:
        e = embed_lark(f"start: {regex_literal(p)}", "t", json_escaped=True)
        # the oracle: llguidance's own reading of the pattern, what the post-check uses
        out.append((p, compiler.compile(Lark(f"start: {e.start}\n{e.rules}")),
                    compiler.compile(Regex(p))))
    return tok, out


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=6))
def test_escaped_regex_matches_exactly_the_escaped_strings(escaped, s):
    tok, compiled = escaped
    for pattern, inside, given_ in compiled:
        assert accepts(inside, tok, json_escape(s)) == accepts(given_, tok, s), (pattern, s)


@pytest.mark.parametrize("name", CALLABLE)
def test_a_cut_custom_call_answers_what_was_written_of_its_input(name):
    """A turn cut inside a custom call (max_tokens) gives the input as far as it was written,
    never the JSON that carried it."""
    from kaname.formats import parse_partial, render_assistant

    fmt = get_format(name)
    full = 'a "b" \\ c\nd'
    text = render_assistant(fmt, {"role": "assistant", "tool_calls": [
        {"id": "functions.note:0", "type": "function", "function": {
            "name": "note", "arguments": json.dumps({"input": full})}}]}, "")
    for k in range(len(text)):
        for call in parse_partial(fmt, text[:k], tools=TOOLS).tool_calls:
            assert call.custom and full.startswith(call.input), (text[:k], call.input)


def test_input_prefix_decodes_only_complete_characters():
    full = json.dumps({"input": 'a"\\\n\U0001f600é'}, ensure_ascii=True)
    seen = ""
    for k in range(len(full) + 1):
        prefix = custom_input_prefix(full[:k])
        assert 'a"\\\n\U0001f600é'.startswith(prefix)
        assert prefix.startswith(seen)
        seen = prefix
    assert seen == 'a"\\\n\U0001f600é'


# ---- what cannot be carried is a 400 naming the tool's grammar -------------------------------

@pytest.mark.parametrize(("grammar", "says"), [
    ('start: A\nA: "x"\n%ignore " "', "%ignore"),
    ('start: %json {"type": "object"}', "%json"),
    ("start: <|im_end|>", "special token"),
    ('start: "x"i', "case-insensitive"),
    ('expr: "x"', "start"),
    ("start: /(a)\\1/", "backreferences"),
    ("start: A\n%import common.NOPE", "common.NOPE"),
    # what Python's regex parser would read differently from Rust's: refused, not misread
    ("start: /[[:digit:]]+/", "class syntax"),
    ("start: /[a-z&&[^x]]/", "class syntax"),
    ("start: /\\p{L}+/", "Unicode classes"),
    ("start: /(?i)ab/", "case-insensitive"),
    ("start: /a^b/", "lookarounds"),
])
def test_grammars_that_cannot_be_carried_are_refused(grammar, says):
    tools = tools_from_openai([{"type": "custom", "custom": {"name": "t", "format": {
        "type": "grammar", "grammar": {"syntax": "lark", "definition": grammar}}}}])
    fmt = get_format("qwen3")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    with pytest.raises(ConstraintError) as info:
        build_grammar(fmt, TurnRequest(tools=tools, tool_choice="t"), tok,
                      compiler=GrammarCompiler(tok))
    assert says in info.value.message
    assert (info.value.pointer or "").startswith("/tools/0/custom/format")


def test_prompt_shows_the_grammar_and_the_input_argument():
    prompt = render_prompt(get_format("qwen3"), [{"role": "user", "content": "2+2?"}], TOOLS)
    assert '"name": "calc"' in prompt and "lark grammar" in prompt
    assert '"input": {"type": "string"}' in prompt


def test_regex_and_lark_custom_grammars_compile_as_constraints():
    """The post-check's matcher is the user's grammar as given."""
    tok, _ = synthetic_tokenizer(())
    compiler = GrammarCompiler(tok)
    assert accepts(compiler.compile(Lark(ARITH)), tok, "1 + 2 * (3)")
    assert not accepts(compiler.compile(Lark(ARITH)), tok, "1 +")
    assert accepts(compiler.compile(Regex(TAG)), tok, 'a"\\\nx')


# ---- through `kaname serve` with the official openai SDK (chat completions) ----------------

@pytest.fixture(scope="module")
def client():
    import openai
    from serverproc import ServerProcess

    with ServerProcess("--model", "random", "--format", "qwen3") as s:
        yield openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", max_retries=0)


def _chat(client, seed: int, **kw):
    return client.chat.completions.create(
        model="random", messages=[{"role": "user", "content": "Compute 2+2."}],
        tools=_tools()[:3], tool_choice={"type": "custom", "custom": {"name": "calc"}},
        seed=seed, temperature=1.0, max_tokens=300, **kw)


def test_chat_custom_tool_call_through_the_sdk(client):
    tok, _ = synthetic_tokenizer(())
    calc = GrammarCompiler(tok).compile(Lark(ARITH))
    for seed in range(4):
        r = _chat(client, seed)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.type == "custom" and call.custom.name == "calc"
        assert accepts(calc, tok, call.custom.input), call.custom.input
        assert r.model_extra["kaname"]["tool_calls_valid"] == [
            {"id": call.id, "name": "calc", "valid": True}]
        streamed = _chat(client, seed, stream=True)
        deltas = [c.to_dict()["choices"][0]["delta"] for c in streamed if c.choices]
        merged = merge_chat_chunks([d for d in deltas if d])
        (got,) = merged["tool_calls"]  # ids are per request
        assert (got["type"], got["custom"]) == ("custom", call.to_dict()["custom"])


def test_chat_custom_tool_history_round_trip(client):
    """A custom call and its output in the history render as the call of a function of
    `input` and its result."""
    from kaname.edges.chat import turn_from_chat
    from kaname.formats.items import template_messages

    history = turn_from_chat({"model": "m", "messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "custom", "custom": {
            "name": "calc", "input": "2 + 2"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"}]})
    prompt = render_prompt(get_format("qwen3"), template_messages(history.messages), TOOLS[:1])
    assert '<tool_call>\n{"name": "calc", "arguments": {"input": "2 + 2"}}\n</tool_call>' \
        in prompt
    assert "<tool_response>\n4\n</tool_response>" in prompt
    r = client.chat.completions.create(
        model="random", max_tokens=40, seed=1, tools=_tools()[:1],
        messages=[{"role": "user", "content": "2+2?"},
                  {"role": "assistant", "tool_calls": [{"id": "c1", "type": "custom", "custom": {
                      "name": "calc", "input": "2 + 2"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "4"}])
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 20


def test_chat_custom_tool_bad_grammar_is_a_400(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "custom", "custom": {"name": "t", "format": {
                "type": "grammar", "grammar": {"syntax": "lark",
                                               "definition": 'start: "a"\n%ignore " "'}}}}])
    err = info.value.body
    assert err["param"] == "/tools/0/custom/format/grammar/definition"
    assert "%ignore" in err["message"]


def test_tool_choice_kind_must_match_the_tool(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "x"}], tools=_tools(),
            tool_choice={"type": "custom", "custom": {"name": "get_weather"}})
    assert info.value.body["param"] == "/tool_choice"
    assert "function tool" in info.value.body["message"]
