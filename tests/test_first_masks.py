"""Every request's first masks come from caches: the compiled grammar's mask before any token
(`Matcher`'s first mask) and the mask after an ordinary first word, left in the pristine
matcher when it was compiled (`grammar.matcher.warm`). Both must be exactly the masks
llguidance computes from scratch, in every state a generation can reach, rollbacks and copies
included."""

from __future__ import annotations

import llguidance as llg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaname.chat import prepare_turn
from kaname.formats import get_format
from kaname.grammar import GrammarCompiler, JsonSchema, Lark, Regex
from kaname.grammar.matcher import WARM_MAX_CHARS, Matcher, spellings

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.fixture(scope="module")
def compiler(gemma) -> GrammarCompiler:
    return GrammarCompiler(gemma.tokenizer)


@pytest.fixture(scope="module")
def grammars(gemma, compiler) -> dict[str, str]:
    """Lark texts: chat turns of the embedded model's format (text only; text or a tool call),
    a JSON schema's grammar, and a short regex (whose state after a first word is not its
    start, unlike free text's)."""
    fmt = get_format("gemma3")
    msgs = [{"role": "user", "content": "hi"}]
    out = {"text": prepare_turn(fmt, msgs, gemma.tokenizer, compiler).grammar,
           "tools": prepare_turn(fmt, msgs, gemma.tokenizer, compiler, tools=[WEATHER]).grammar,
           "schema": compiler.compile(JsonSchema(SCHEMA)).grammar,
           "short": compiler.compile(Regex("[a-z]{2,5}( [a-z]{2,5})?")).grammar}
    assert all(len(g) <= WARM_MAX_CHARS for g in out.values())  # every one is warmed
    return out


def _mask(m: llg.LLMatcher | Matcher, n_words: int) -> np.ndarray:
    words = np.zeros(n_words, dtype=np.int32)
    if isinstance(m, Matcher):
        m.fill_mask(words)
    else:
        m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
    return words


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_masks_equal_a_fresh_matchers_along_random_walks(gemma, compiler, grammars, data):
    name = data.draw(st.sampled_from(sorted(grammars)), label="grammar")
    compiled = compiler.compile(Lark(grammars[name]))
    n_words = len(compiled.first_mask)
    m = compiled.new_matcher()
    # the reference: a matcher of its own, built from the grammar text, no cache shared
    # (widened as every kaname mask is: Matcher.widen, tested in test_masks.py)
    ref_m = Matcher(llg.LLMatcher(gemma.tokenizer,
                                  llg.LLMatcher.grammar_from_lark(grammars[name])),
                    spellings=spellings(gemma.tokenizer))
    ref = ref_m._m
    words = np.zeros(n_words, dtype=np.int32)
    depth = 0
    for _ in range(data.draw(st.integers(1, 10), label="steps")):
        expected = _mask(ref_m, n_words)
        m.fill_mask(words)
        assert np.array_equal(words, expected), (name, depth)
        allowed = np.flatnonzero(np.unpackbits(expected.view(np.uint8), bitorder="little"))
        allowed = allowed[allowed < gemma.tokenizer.vocab_size]
        action = data.draw(st.sampled_from(["accept", "accept", "rollback", "copy"]))
        if action == "rollback" and depth:
            n = data.draw(st.integers(1, depth), label="rollback")
            m.rollback(n)
            ref.rollback(n)
            depth -= n
        elif action == "copy":
            m = m.copy()
        elif len(allowed):
            token = int(allowed[data.draw(st.integers(0, len(allowed) - 1), label="token")])
            assert m.accept_tokens([token]) and ref.consume_token(token)
            depth += 1
        if ref.is_stopped():
            break


def test_a_fresh_matcher_takes_its_first_mask_from_the_compiled_grammar(gemma, compiler,
                                                                       grammars):
    compiled = compiler.compile(Lark(grammars["text"]))
    first = compiled.first_mask
    assert not first.flags.writeable  # shared by every request: nobody may change it
    m = compiled.new_matcher()
    computed = _Counting(m._m)
    m._m = computed
    words = np.full(len(first), -1, dtype=np.int32)
    m.fill_mask(words)
    assert np.array_equal(words, first) and computed.masks == 0
    # back at the start after tokens, the same, and llguidance is not asked; a matcher in
    # error never uses it again
    word = gemma.tokenizer.tokenize_str("Hello")
    assert m.accept_tokens(word)
    m.fill_mask(words)
    assert computed.masks == 1
    m.rollback(len(word))
    m.fill_mask(words)
    assert np.array_equal(words, first) and computed.masks == 1
    broken = compiled.new_matcher()
    eos = gemma.eos_token_ids[0]
    assert not broken.accept_tokens([*word, eos, *word])  # nothing after the end
    assert broken._first is None
    # a Matcher given no first mask computes it
    bare = Matcher(compiled.matcher.deep_copy())
    bare.fill_mask(words)
    assert np.array_equal(words, first)


@pytest.mark.parametrize("lexeme", ["t[max_tokens=3]: /[a-z ]+/", 't[stop=""]: /[a-z ]+/'])
def test_grammars_llguidance_cannot_roll_back_are_left_unwarmed(gemma, compiler, lexeme):
    """Warming rolls a token back, which llguidance refuses for `max_tokens` and `stop`
    lexemes (the matcher is then in error): such a grammar must compile to a sound matcher."""
    compiled = compiler.compile(Lark(f"start: t\n{lexeme}\n"))
    m = compiled.new_matcher()
    word = gemma.tokenizer.tokenize_str("hello")
    assert m.accept_tokens(word), m.error()
    ref = llg.LLMatcher(gemma.tokenizer, llg.LLMatcher.grammar_from_lark(compiled.grammar))
    assert ref.consume_tokens(word)
    words = np.zeros(len(compiled.first_mask), dtype=np.int32)
    m.fill_mask(words)
    assert np.array_equal(words, _mask(ref, len(words)))


class _Counting:
    """llguidance's matcher, counting the masks it computes."""

    def __init__(self, m: llg.LLMatcher):
        self._m, self.masks = m, 0

    def unsafe_compute_mask_ptr(self, ptr: int, size: int) -> None:
        self.masks += 1
        self._m.unsafe_compute_mask_ptr(ptr, size)

    def __getattr__(self, name: str):
        return getattr(self._m, name)
