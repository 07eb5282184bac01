"""JSON content may spell out any marker inside its strings (the grammar's `%json` allows it):
the parser reads such a turn as that content, whole or streamed, in every format. Found by the
Claude Agent SDK's title request (`output_config.format`), whose scripted title was a tool
call's text."""

from __future__ import annotations

import json

import pytest

from kaname.chat import prepare_turn
from kaname.formats import FORMATS, merge_deltas
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

SCHEMA = {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"],
          "additionalProperties": False}


def _markers(fmt) -> list[str]:
    found = set(fmt.special_tokens)
    if fmt.tool_calls is not None:
        found |= {m.strip() for m in fmt.tool_calls.openers if m.strip()}
    if fmt.reasoning is not None:
        found |= {m for m in (fmt.reasoning.begin, fmt.reasoning.end) if m}
    return sorted(found)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_markers_inside_json_strings_are_content(name):
    fmt = FORMATS[name]
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    compiler = GrammarCompiler(tok)
    tools = None  # as the Agent SDK's title request: JSON, no tools
    # formats whose prompt always opens the reasoning block reason first
    always = fmt.reasoning is not None and fmt.reasoning.opened_by_prompt \
        and not fmt.reasoning.off
    turn = prepare_turn(fmt, [{"role": "user", "content": "x"}], tok, compiler, tools=tools,
                        reasoning="on" if always else "off",
                        response_format={"type": "json_schema", "json_schema": {
                            "name": "r", "schema": SCHEMA, "strict": True}})
    compiled = compiler.compile(Lark(turn.grammar))
    checked = 0
    for marker in _markers(fmt):
        escaped = json.dumps(marker, ensure_ascii=False)[1:-1]
        value = '{"t": "a ' + escaped + ' b"}'
        before, after = value.split(escaped)
        # the turn as the grammar has it written: a reasoning block where the format always
        # reasons, the bytes the grammar forces before the JSON and after it (wrappers,
        # markers), the marker spelled out in ordinary tokens (split, so no special token
        # matches it), as a model writes text that merely reads like a marker
        matcher = compiled.new_matcher()
        ids: list[int] = []
        reasoning = "ok" + fmt.reasoning.end if always and fmt.reasoning else ""
        for piece in (reasoning, None, before, escaped[:1], escaped[1:], after, None):
            if piece is None:  # what the grammar forces here, up to the JSON written below
                forced = matcher.forced_tokens()
                k = next((k for k in range(len(forced)) if tok.decode_str(forced[k:])
                          and before.startswith(tok.decode_str(forced[k:]))), len(forced))
                piece_ids = forced[:k]
            else:
                piece_ids = tok.tokenize_str(piece, parse_special=piece not in (
                    escaped[:1], escaped[1:]))
            if not matcher.accept_tokens(piece_ids):
                break
            ids += piece_ids
        for end in fmt.end_markers:  # the turn's end, where the grammar does not force it
            if matcher.is_accepting() or matcher.is_error():
                break
            end_ids = tok.tokenize_str(end, parse_special=True)
            if matcher.validate_tokens(end_ids) == len(end_ids):
                matcher.accept_tokens(end_ids)
                ids += end_ids
        if matcher.is_error() or not matcher.is_accepting():
            continue  # a marker the grammar keeps out of strings: nothing to read back
        checked += 1
        text = tok.decode_str(ids)
        parsed, finish, _ = turn.parse(text, "stop", "c_")
        assert (parsed.content, parsed.tool_calls, finish) == (value, [], "stop"), marker
        stream = turn.stream_parser("c_")
        deltas = stream.feed(turn.opening)  # what the prompt wrote of the turn
        deltas += [d for i in range(0, len(text), 3) for d in stream.feed(text[i:i + 3])]
        deltas += stream.finish()[1]
        assert merge_deltas(deltas)["content"] == value, marker
    assert checked >= 1, "no marker reached a JSON string: the test checks nothing"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_free_text_spelling_a_marker_is_refused_or_read_as_content(name):
    """Whatever free-text content the grammar accepts, the parser reads back as that content:
    a marker spelled out in ordinary tokens, one character each (a special token's text
    included: a real vocabulary can spell "</tool_call>" too), is kept out of the text by the
    grammar, or is content. Found in qwen3: "</tool_call>" spelled out passed the grammar of a
    turn without tools and the parser refused it."""
    fmt = FORMATS[name]
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    compiler = GrammarCompiler(tok)
    always = fmt.reasoning is not None and fmt.reasoning.opened_by_prompt \
        and not fmt.reasoning.off
    turn = prepare_turn(fmt, [{"role": "user", "content": "x"}], tok, compiler,
                        reasoning="on" if always else "off")
    compiled = compiler.compile(Lark(turn.grammar))
    for marker in _markers(fmt):
        text = f"a {marker} b"
        matcher = compiled.new_matcher()
        ids: list[int] = []
        reasoning = "ok" + fmt.reasoning.end if always and fmt.reasoning else ""
        forced = fmt.content_begin
        pieces = [tok.tokenize_str(reasoning + forced, parse_special=True),
                  *(tok.tokenize_str(ch) for ch in text)]
        accepted = True
        for piece in pieces:
            if not matcher.accept_tokens(piece):
                accepted = False
                break
            ids += piece
        end = tok.tokenize_str(fmt.end_of_turn, parse_special=True)
        if not accepted or matcher.validate_tokens(end) != len(end):
            continue  # kept out by the grammar
        matcher.accept_tokens(end)
        parsed, _, _ = turn.parse(tok.decode_str([*ids, *end]), "stop", "c_")
        assert parsed.content == text and not parsed.tool_calls, marker
