"""The proxy's replay (decoding/replay.py): the upstream's own token ids are checked exactly;
its text alone is checked by tokenizing it again, which a token budget cut inside a UTF-8
character defeats (the reason kaname asks upstreams for `return_token_ids`)."""

from __future__ import annotations

import pytest

from kaname.decoding import Replay
from kaname.errors import NotEnforcedError
from kaname.formats import get_format
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer


@pytest.fixture(scope="module")
def budget():
    """A 3-token reasoning budget ended by the special token </think>, on a byte-level BPE
    vocabulary whose single-byte tokens can end a budget inside a character."""
    tok, _ = synthetic_tokenizer(get_format("qwen3").special_tokens)
    [end] = tok.tokenize_str("</think>", parse_special=True)
    compiled = GrammarCompiler(tok).compile(
        Lark(f"start: t <[{end}]>\nt[max_tokens=3]: /(?s:.*)/\n"))
    # "横" is three bytes; a model may write its first byte and then be cut by the budget
    [first_byte] = [i for i in range(tok.vocab_size)
                    if tok.decode_bytes([i]) == "横".encode()[:1]]
    ids = [*tok.tokenize_str("a"), *tok.tokenize_str("b"), first_byte, end]
    return tok, compiled, ids


def test_token_ids_are_replayed_exactly(budget):
    tok, compiled, ids = budget
    m = compiled.new_matcher()
    assert m.accept_tokens(ids) and m.is_accepting()  # what the upstream generated is legal
    replay = Replay(compiled, tok)
    out = replay.feed_tokens(ids[:2], "ab") + replay.feed_tokens(ids[2:], "\ufffd</think>") \
        + replay.finish("stop", "")
    assert out == replay.text == "ab\ufffd</think>"
    assert replay.tokens == ids


def test_text_alone_cannot_prove_a_budget_cut_inside_a_character(budget):
    tok, compiled, ids = budget
    text = tok.decode_bytes(ids).decode("utf-8", errors="replace")
    # U+FFFD is three bytes: tokenized again, the budgeted text is longer than the upstream's
    assert len(tok.tokenize_str(text, parse_special=True)) > len(ids)
    replay = Replay(compiled, tok)
    with pytest.raises(NotEnforcedError):
        replay.feed(text)
        replay.finish("stop", "")


def test_token_ids_outside_the_grammar_are_refused(budget):
    tok, compiled, ids = budget
    replay = Replay(compiled, tok)
    replay.feed_tokens(ids[:3], "ab")
    with pytest.raises(NotEnforcedError, match="leave the grammar"):
        replay.feed_tokens(tok.tokenize_str("c"), "c")  # the budget is spent: only </think> is left


def test_stopping_short_of_the_grammar_is_refused(budget):
    tok, compiled, ids = budget
    replay = Replay(compiled, tok)
    replay.feed_tokens(ids[:2], "ab")
    with pytest.raises(NotEnforcedError, match="before the grammar was complete"):
        replay.finish("stop", "")
    # unless the missing part is the end marker an engine does not echo
    replay = Replay(compiled, tok)
    replay.feed_tokens(ids[:3], "ab")
    assert replay.finish("stop", "</think>").endswith("</think>")


def test_text_stops_where_the_upstream_stopped_at_a_stop_string():
    """vLLM generates the tokens that spell a stop string but sends the text before it (and
    holds back what may begin one). Replayed exactly, the tokens are checked, and the text
    passed on is the upstream's: never the stop string (found in front of a real vLLM)."""
    tok, _ = synthetic_tokenizer(get_format("qwen3").special_tokens)
    compiled = GrammarCompiler(tok).compile(Lark('start: "{" /[a-z]+/ ", " /[a-z]+/ "}"'))
    spelled = "{abc, de}"
    ids = tok.tokenize_str(spelled)
    pieces = [tok.decode_str([i]) for i in ids]
    stop_at = spelled.index(",")  # the request's stop string: ","
    replay = Replay(compiled, tok)
    out, sent = "", ""
    for i, piece in zip(ids, pieces, strict=True):
        before = len(sent)
        sent = spelled[:min(stop_at, before + len(piece))]  # what an upstream sends so far
        out += replay.feed_tokens([i], sent[before:])
        assert "," not in out
        if before + len(piece) > stop_at:  # the upstream stopped here
            break
    out += replay.finish("stop", "", stopped_by_string=True)
    assert out == replay.text == "{abc"
    assert replay.tokens == ids[:len(replay.tokens)] and len(replay.tokens) > 1


def test_a_decoding_that_differs_from_the_upstreams_text_does_not_stall_the_stream(budget):
    """Two decoders may disagree on a character (a split UTF-8 character, a token without
    bytes): what is passed on follows the length of the upstream's text, not its equality."""
    tok, compiled, ids = budget
    replay = Replay(compiled, tok)
    assert replay.feed_tokens(ids[:2], "aX") == "ab"  # the checked tokens' text, as it comes
    assert replay.feed_tokens(ids[2:3], "") == ""  # the upstream holds this character back
    assert replay.feed_tokens(ids[3:], "?</think>") == "\ufffd</think>"
    assert replay.finish("stop", "") == "" and replay.text == "ab\ufffd</think>"
