"""A kaname mask is the set of tokens the grammar accepts, everywhere.

llguidance masks every token but the first of its own tokenization where the grammar forces
bytes ("forcing by mask"), though `consume_tokens` takes any token spelling a prefix of them;
`Matcher.widen` adds those back. The judge here is llguidance's own `validate_tokens`, asked
about every token of the vocabulary, along generations of the adversarial runtime (which
picks split and unlikely tokens) over the schema sample."""

from __future__ import annotations

import numpy as np
import pytest

from kaname.decoding import SamplingParams, decode
from kaname.grammar import GrammarCompiler, JsonSchema
from kaname.grammar.matcher import Matcher, spellings

PROMPT = "Extract: the bookstore opened in 2011 in Yokohama."


def _allowed(words: np.ndarray, vocab: int) -> set[int]:
    ids = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
    return set(ids[ids < vocab].tolist())


def _accepted(m: Matcher, vocab: int) -> set[int]:
    return {t for t in range(vocab) if m.validate_tokens([t]) == 1}


@pytest.mark.model
def test_masks_are_the_tokens_the_grammar_accepts(gemma, adversarial_runtime, compiled_sample):
    tok = gemma.tokenizer
    compiled, _ = compiled_sample
    prompt = adversarial_runtime.tokenize(PROMPT)
    words = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)
    forcing = 0
    for i, (row, c) in enumerate(compiled[:4]):
        adversarial_runtime.seed = i
        out = decode(adversarial_runtime, prompt, c.new_matcher(), SamplingParams(),
                     max_tokens=12, drafting="off").tokens
        m = c.new_matcher()
        for k, token in enumerate(out):
            m.fill_mask(words)
            accepted = _accepted(m, tok.vocab_size)
            assert _allowed(words, tok.vocab_size) == accepted, (row["id"], k)
            forcing += len(accepted) > 1 and bool(m.forced_bytes())
            assert m.accept_tokens([token])
    assert forcing > 5  # not vacuous: states where llguidance forces by mask were met


def test_widening_adds_only_prefixes_of_the_forced_bytes(gemma):
    """Where llguidance's mask is one token, `widen` adds the other tokens that spell a prefix
    of the forced bytes and nothing else; a matcher without the vocabulary's spellings keeps
    llguidance's mask (as the plain-llguidance paths of the benchmarks do)."""
    tok = gemma.tokenizer
    c = GrammarCompiler(tok).compile(JsonSchema({
        "type": "object", "properties": {"parameters": {"type": "integer"}},
        "required": ["parameters"], "additionalProperties": False}))
    m = c.new_matcher()
    words = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)
    m.fill_mask(words)
    forced = m.forced_bytes()
    assert forced.startswith(b'{"parameters"')
    allowed = _allowed(words, tok.vocab_size)
    assert len(allowed) > 1
    assert all(forced.startswith(tok.decode_bytes([t])) for t in allowed)
    assert set(spellings(tok).prefixes_of(forced)) >= allowed
    plain = Matcher(c.matcher.deep_copy())
    plain.fill_mask(words)
    assert _allowed(words, tok.vocab_size) == {m.forced_tokens()[0]}
