"""Qwen3-Coder and Qwen3.5 (`qwen3_coder`, `qwen35`): XML calls, one `<parameter=K>` per
argument, values raw (strings) or JSON, Python's "True" / "False" taken for booleans; Qwen3.5's
prompt opens the reasoning block. The official templates' renderings are in
tests/test_alignment.py; here, what the grammar binds and what the parser reads beyond them."""

from __future__ import annotations

import json

import pytest
from streaming import streamed

from kaname.errors import FormatParseError
from kaname.formats import (
    TurnRequest,
    build_grammar,
    get_format,
    parse,
    render_assistant,
    tools_from_openai,
)
from kaname.grammar import GrammarCompiler, Guards, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

TOOLS = tools_from_openai([{"type": "function", "function": {
    "name": "run", "parameters": {"type": "object", "properties": {
        "cmd": {"type": "string"}, "force": {"type": "boolean"},
        "n": {"type": "integer"}, "env": {"type": "object"}},
        "required": ["cmd"], "additionalProperties": False}}}])
NAMES = ["qwen3_coder", "qwen35"]


def _call(*pairs: tuple[str, str]) -> str:
    args = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in pairs)
    return f"<tool_call>\n<function=run>\n{args}</function>\n</tool_call><|im_end|>"


def _accepts(name: str, text: str, *, spelled: bool = False) -> bool:
    fmt = get_format(name)
    req = TurnRequest(tools=TOOLS, tool_choice="required", reasoning="off")
    tok, _ = synthetic_tokenizer(() if spelled else fmt.special_tokens)
    m = GrammarCompiler(tok).compile(Lark(build_grammar(fmt, req, tok))).new_matcher()
    return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) and m.is_accepting()


def _args(name: str, text: str) -> dict:
    fmt = get_format(name)
    turn = parse(fmt, fmt.opening("off") + text, tools=TOOLS)
    return json.loads(turn.tool_calls[0].arguments)


@pytest.mark.parametrize("name", NAMES)
def test_values_are_bound_to_their_property_schemas(name):
    assert _accepts(name, _call(("cmd", "ls -la\nwc"), ("n", "3"), ("env", '{"A": "1"}')))
    assert _args(name, _call(("cmd", "ls -la\nwc"), ("n", "3"))) == {"cmd": "ls -la\nwc", "n": 3}
    assert not _accepts(name, _call(("cmd", "ls"), ("n", "three")))
    assert not _accepts(name, _call(("n", "3")))  # cmd is required
    assert not _accepts(name, _call(("cmd", "ls"), ("other", "x")))  # not declared


@pytest.mark.parametrize("name", NAMES)
def test_python_booleans_are_read_as_json(name):
    for written, value in (("True", True), ("False", False), ("true", True)):
        text = _call(("cmd", "ls"), ("force", written))
        assert _accepts(name, text)
        assert _args(name, text) == {"cmd": "ls", "force": value}
    assert not _accepts(name, _call(("cmd", "ls"), ("n", "True")))  # booleans only
    assert _args(name, _call(("cmd", "True"))) == {"cmd": "True"}  # a string stays one
    # streamed, "True" is not sent as arguments text before it is read
    fmt = get_format(name)
    text = fmt.opening("off") + _call(("cmd", "ls"), ("force", "True"))
    msg = streamed(fmt, text, 1, TOOLS)
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls",
                                                                         "force": True}


@pytest.mark.parametrize("name", NAMES)
def test_a_raw_value_never_holds_the_closing_tag(name):
    """The parser ends a value at `</parameter>`, with or without the newline before it (as
    vLLM's parser does), so the grammar keeps it out of values, however it is spelled."""
    assert not _accepts(name, _call(("cmd", "a</parameter>b")), spelled=True)
    assert _accepts(name, _call(("cmd", "a</paramete b")), spelled=True)


@pytest.mark.parametrize("name", NAMES)
def test_values_without_their_newlines_are_read(name):
    text = ("<tool_call>\n<function=run>\n<parameter=cmd>ls</parameter>\n"
            "<parameter=n>2</parameter></function>\n</tool_call><|im_end|>")
    assert _args(name, text) == {"cmd": "ls", "n": 2}
    # a missing </parameter> (vLLM reads up to the next tag) is not a layout kaname reads
    with pytest.raises(FormatParseError):
        parse(get_format(name), get_format(name).opening("off")
              + "<tool_call>\n<function=run>\n<parameter=cmd>\nls\n</function>\n</tool_call>",
              tools=TOOLS)


def test_qwen35_reasoning_is_opened_by_the_prompt():
    fmt = get_format("qwen35")
    assert fmt.opening("on") == "<think>\n"
    assert fmt.opening("off") == "<think>\n\n</think>\n\n"
    turn = parse(fmt, "<think>\nplan\n</think>\n\nok<|im_end|>")
    assert (turn.reasoning_content, turn.content) == ("plan", "ok")
    # history: an empty block after the last user message, none before it
    msg = {"role": "assistant", "content": "ok"}
    assert render_assistant(fmt, msg, "") == "<think>\n\n</think>\n\nok<|im_end|>"
    assert render_assistant(fmt, msg, "", with_reasoning=False) == "ok<|im_end|>"


@pytest.mark.parametrize("name", NAMES)
def test_a_free_text_custom_tool_takes_any_text_but_its_tags(name):
    """A custom tool of format text: its `input` is raw text up to "\n</parameter>\n"."""
    fmt = get_format(name)
    tools = tools_from_openai([{"type": "custom", "custom": {"name": "note"}}])
    req = TurnRequest(tools=tools, tool_choice="note", reasoning="off")

    def call(text: str) -> str:
        return (f"<tool_call>\n<function=note>\n<parameter=input>\n{text}\n</parameter>\n"
                "</function>\n</tool_call><|im_end|>")

    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    compiled = GrammarCompiler(tok).compile(Lark(build_grammar(fmt, req, tok)))

    def accepts(text: str) -> bool:
        m = compiled.new_matcher()
        return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) and m.is_accepting()

    body = 'line 1\n  "quoted" \\ <b>tags</b>\n'
    assert accepts(call(body))
    turn = parse(fmt, fmt.opening("off") + call(body), tools=tools)
    assert [(c.name, c.custom, c.input) for c in turn.tool_calls] == [("note", True, body)]
    for inside in ("a</parameter>b", "a<parameter=x>b", "a</function>\n</tool_call>b"):
        assert not accepts(call(inside))


@pytest.mark.parametrize("name", NAMES)
def test_the_string_guard_bounds_undeclared_keys_and_values(name):
    """An undeclared argument's name and any-text value are strings without maxLength: the
    string guard bounds them as it bounds declared ones. Unbounded, a random model wrote one
    key name until max_tokens in 21 of 40 qwen35 turns (test_formats' contract run)."""
    fmt = get_format(name)
    tools = tools_from_openai([{"type": "function", "function": {
        "name": "run", "parameters": {"type": "object", "properties": {}}}}])
    req = TurnRequest(tools=tools, tool_choice="required", reasoning="off")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)

    def accepts(key: str, value: str, guards: Guards) -> bool:
        grammar = build_grammar(fmt, req, tok, guards=guards)
        m = GrammarCompiler(tok, guards=guards).compile(Lark(grammar)).new_matcher()
        text = _call((key, value))
        return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) \
            and m.is_accepting()

    capped = Guards(max_string_length=8)
    assert accepts("k" * 8, "v" * 8, capped)
    assert not accepts("k" * 9, "v", capped)
    assert not accepts("k", "v" * 9, capped)
    assert accepts("k" * 50, "v" * 50, Guards())  # the guard is off by default
