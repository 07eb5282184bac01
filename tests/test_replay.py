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
    assert m.consume_tokens(ids) and m.is_accepting()  # what the upstream generated is legal
    replay = Replay(compiled, tok)
    out = replay.feed_tokens(ids[:2]) + replay.feed_tokens(ids[2:]) + replay.finish("stop", "")
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
    replay.feed_tokens(ids[:3])
    with pytest.raises(NotEnforcedError, match="leave the grammar"):
        replay.feed_tokens(tok.tokenize_str("c"))  # the budget is spent: only </think> is left


def test_stopping_short_of_the_grammar_is_refused(budget):
    tok, compiled, ids = budget
    replay = Replay(compiled, tok)
    replay.feed_tokens(ids[:2])
    with pytest.raises(NotEnforcedError, match="before the grammar was complete"):
        replay.finish("stop", "")
    # unless the missing part is the end marker an engine does not echo
    replay = Replay(compiled, tok)
    replay.feed_tokens(ids[:3])
    assert replay.finish("stop", "</think>").endswith("</think>")
