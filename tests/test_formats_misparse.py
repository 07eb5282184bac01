"""A turn the parser cannot read raises FormatParseError: a call or a reasoning block in a
layout other than the format's is never returned as content (this matters wherever kaname
parses text it did not constrain: strict level off, `allow_unenforced`, scoring other
endpoints). Variants real models write that the format documents are read."""

from __future__ import annotations

import json

import pytest
from streaming import streamed

from kaname.errors import FormatParseError
from kaname.formats import (
    FORMATS,
    TurnRequest,
    build_grammar,
    get_format,
    parse,
    tools_from_openai,
)
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

# (format, text a model wrote): the call or block is there, in a layout the format does not
# use; it must raise, not come back as content
MISPLACED = [
    ("qwen3", "hello <think>x</think><|im_end|>"),
    ("qwen3", "<think>x</think>hello<think>y</think><|im_end|>"),
    ("deepseek_v31", "answer<think>x</think><｜end▁of▁sentence｜>"),
    ("glm45", "fine <think></think> then<|user|>"),
]


@pytest.mark.parametrize(("name", "text"), MISPLACED)
def test_a_misplaced_call_or_block_raises(name, text):
    with pytest.raises(FormatParseError, match="inside content"):
        parse(get_format(name), text)


# Written with a marker's edge whitespace left out: read as the layout it stands for
# (reasoning, content, calls); the marker cores themselves are never optional.
LEFT_OUT = [
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><|im_end|>',
     (None, None, [("f", {"a": 1})])),
    ("hermes", 'Sure.<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
     '<tool_call>{"name": "g", "arguments": {}}</tool_call><|im_end|>',
     (None, "Sure.", [("f", {"a": 1}), ("g", {})])),
    ("qwen3", "<think>x</think>hello<|im_end|>", ("x", "hello", [])),
    ("qwen3", "<think>x\n</think>\nhello<|im_end|>", ("x", "hello", [])),
    ("gemma3", 'text\n```tool_call{"name": "f", "arguments": {}}```<end_of_turn>',
     (None, "text\n", [("f", {})])),  # gemma3 writes no glue: the newline is content
    ("glm45", "<think>r</think><tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>"
     "</tool_call><|observation|>", ("r", None, [("f", {"a": 1})])),
]


@pytest.mark.parametrize(("name", "text", "expected"), LEFT_OUT)
def test_markers_without_their_whitespace_are_read(name, text, expected):
    fmt = get_format(name)
    turn = parse(fmt, text)
    assert (turn.reasoning_content, turn.content,
            [(c.name, json.loads(c.arguments)) for c in turn.tool_calls]) == expected
    for size in (1, 2, 5):  # streamed in chunks, the deltas add up to the same turn
        msg = streamed(fmt, text, size)
        assert (msg["reasoning_content"], msg["content"]) == expected[:2]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in msg["tool_calls"]] == expected[2]


@pytest.mark.parametrize("key", ["parameters", "arguments"])
def test_llama_calls_with_either_arguments_key(key):
    turn = parse(get_format("llama31"), json.dumps({"name": "f", key: {"a": 1}}) + "<|eot_id|>")
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [("f", {"a": 1})]
    assert turn.content is None


def test_compact_call_heads_stream_as_written():
    """Arguments written in compact JSON are read as written (any JSON whitespace)."""
    turn = parse(get_format("qwen3"),
                 '<tool_call>\n{"name":"f","arguments":{"a":1}}\n</tool_call><|im_end|>')
    assert turn.tool_calls[0].arguments == '{"a":1}'


@pytest.mark.parametrize("name", sorted(n for n, f in FORMATS.items() if f.marker_cores))
def test_the_grammar_keeps_markers_out_of_content(name):
    """With a vocabulary where the markers are spelled out (no special tokens), content text
    cannot hold a marker: what the grammar allows, the parser reads."""
    fmt = get_format(name)
    tok, _ = synthetic_tokenizer(())  # no special tokens: every marker spelled out
    tools = tools_from_openai([{"type": "function", "function": {"name": "f"}}])
    compiler = GrammarCompiler(tok)
    # opening "": a turn whose prompt wrote nothing of it (formats that open their reasoning
    # block in the prompt are tested in test_reasoning_opened.py)
    req = TurnRequest(tools=tools, opening="")
    grammar = compiler.compile(Lark(build_grammar(fmt, req, tok)))
    for core in fmt.marker_cores:
        m = grammar.new_matcher()
        prefix = fmt.content_begin + "hello " + core
        ids = tok.tokenize_str(prefix)
        assert not m.accept_tokens(ids) or not _can_end_as_content(m, tok, fmt), (name, core)


def _can_end_as_content(m, tok, fmt) -> bool:
    """Whether the text so far can still end as plain content (" bye" + end of turn)."""
    probe = m.copy()
    return probe.accept_tokens(tok.tokenize_str(" bye" + fmt.end_of_turn)) \
        and probe.is_accepting()
