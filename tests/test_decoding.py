"""Exactness of the cheap paths: mask application, lazy greedy, lazy sampling."""

from __future__ import annotations

import numpy as np
import pytest
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask
from scipy.stats import chisquare

from kaname.decoding import SamplingParams, TokenPicker, decode
from kaname.decoding.masks import MaskBuffer
from kaname.grammar import Choice, GrammarCompiler, JsonSchema, Regex, Text

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "n": {"type": "integer"},
    "kind": {"enum": ["alpha", "beta", "gamma"]}}, "required": ["name", "n", "kind"]}


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def reference_allowed(matcher, vocab: int) -> np.ndarray:
    """llguidance's own numpy bitmask, widened as every kaname mask is (`Matcher.widen`,
    tested in test_masks.py), expanded: the reference for MaskBuffer."""
    bitmask = allocate_token_bitmask(1, vocab)
    fill_next_token_bitmask(matcher.llg, bitmask)
    matcher.widen(bitmask[0])
    bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:vocab]
    return np.flatnonzero(bits)


def walk_states(compiler, runtime, constraint, steps=40):
    """Matcher states along a random-logits generation."""
    c = compiler.compile(constraint)
    m = c.new_matcher()
    picker = TokenPicker(SamplingParams(), MaskBuffer(runtime.n_vocab,
                                                      runtime.tokenizer.vocab_size),
                         frozenset(runtime.eos_token_ids))
    runtime.seed = 7
    logits = runtime.start([2])
    for _ in range(steps):
        if m.is_stopped():
            return
        yield m
        t = picker.pick(logits, m)
        if t in runtime.eos_token_ids:
            return
        assert m.accept_tokens([t])
        logits = runtime.advance([t])


@pytest.mark.parametrize("constraint", [JsonSchema(SCHEMA), Regex(r"[0-9]{3}-[a-z]+"),
                                        Choice(("yes", "no", "maybe")), Text()])
def test_mask_buffer_matches_llguidance(compiler, random_runtime, constraint):
    masks = MaskBuffer(random_runtime.n_vocab, random_runtime.tokenizer.vocab_size)
    rng = np.random.default_rng(0)
    seen_sparse = seen_dense = False
    for m in walk_states(compiler, random_runtime, constraint):
        expected = reference_allowed(m, random_runtime.n_vocab)
        masks.fill(m)
        ids = masks.allowed_ids()
        logits = rng.standard_normal(random_runtime.n_vocab).astype(np.float32)
        dense = masks.apply_dense(logits)
        np.testing.assert_array_equal(np.flatnonzero(dense > -np.inf), expected)
        np.testing.assert_array_equal(dense[expected], logits[expected])
        if ids is not None:
            seen_sparse = True
            np.testing.assert_array_equal(np.sort(ids), expected)
        else:
            seen_dense = True
    assert seen_sparse or seen_dense


def test_special_tokens_never_allowed_in_text(compiler, gemma):
    m = compiler.compile(Text()).new_matcher()
    allowed = set(reference_allowed(m, gemma.tokenizer.vocab_size).tolist())
    for name in ("[multimodal]", "<start_of_turn>", "<unused0>", "<start_of_image>"):
        ids = gemma.tokenize(name, add_bos=False)
        assert len(ids) == 1 and gemma.tokenizer.is_special_token(ids[0]), name
        assert ids[0] not in allowed, name
    assert gemma.tokenize("hello", add_bos=False)[0] in allowed


@pytest.mark.parametrize("constraint, skips_masks", [
    (JsonSchema(SCHEMA), True), (Regex(r"\(?[0-9]{3}\)? [a-z ]{3,12}"), False), (Text(), True)])
def test_lazy_greedy_equals_full_mask(compiler, random_runtime, constraint, skips_masks):
    c = compiler.compile(constraint)
    lazy_masks = full_masks = 0
    for seed in range(5):
        random_runtime.seed = seed
        lazy = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=60)
        full = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=60,
                      lazy=False)
        assert lazy.tokens == full.tokens
        assert full.stats.lazy_hits == 0
        lazy_masks += lazy.stats.full_masks
        full_masks += full.stats.full_masks
    assert lazy_masks <= full_masks
    if skips_masks:  # where random picks are often allowed, the lazy path skipped masks
        assert lazy_masks < full_masks


def test_lazy_greedy_equals_full_mask_where_the_grammar_forces(adversarial_runtime,
                                                                compiled_sample):
    """The adversarial runtime picks tokens spelling a prefix of forced bytes (`t` of
    `type`), which llguidance's mask leaves out and its `consume_tokens` takes: the lazy check
    and the mask must agree on them (`Matcher.widen`)."""
    compiled, _ = compiled_sample
    prompt = adversarial_runtime.tokenize("Extract: the bookstore opened in 2011 in Yokohama.")
    for i, (row, c) in enumerate(compiled[:40]):
        adversarial_runtime.seed = i
        lazy = decode(adversarial_runtime, prompt, c.new_matcher(), SamplingParams(),
                      max_tokens=64, drafting="off")
        full = decode(adversarial_runtime, prompt, c.new_matcher(), SamplingParams(),
                      max_tokens=64, drafting="off", lazy=False)
        assert lazy.tokens == full.tokens, row["id"]


def _first_token_counts(picker_lazy: bool, logits, matcher, draws: int, seed: int):
    masks = MaskBuffer(len(logits), len(logits))
    picker = TokenPicker(SamplingParams(temperature=1.0, seed=seed), masks, frozenset(),
                         lazy=picker_lazy)
    counts: dict[int, int] = {}
    for _ in range(draws):
        t = picker.pick(logits, matcher)
        counts[t] = counts.get(t, 0) + 1
    return counts, picker.stats


def test_lazy_sampling_has_the_masked_distribution(compiler, gemma):
    """Chi-square: lazy rejection sampling vs the exact masked softmax, on a state where the
    grammar rejects a real share of the probability mass."""
    c = compiler.compile(Choice(("alpha", "beta", "gamma", "delta", "epsilon")))
    m = c.new_matcher()
    allowed = reference_allowed(m, gemma.tokenizer.vocab_size)
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(gemma.tokenizer.vocab_size).astype(np.float32)
    logits[allowed] += 9.0  # allowed tokens carry most, not all, of the mass
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    share = p[allowed].sum() / p.sum()
    assert 0.3 < share < 0.95
    expected = p[allowed] / p[allowed].sum()
    draws = 4000
    counts, stats = _first_token_counts(True, logits, m, draws, seed=11)
    assert stats.lazy_hits > 0 and stats.full_masks > 0  # both paths exercised
    assert set(counts) <= set(allowed.tolist())
    observed = np.array([counts.get(int(t), 0) for t in allowed])
    keep = expected * draws >= 5  # chi-square needs expected counts >= 5
    exp_counts = expected[keep] * draws
    obs = observed[keep]
    exp_counts = exp_counts * obs.sum() / exp_counts.sum()
    assert chisquare(obs, exp_counts).pvalue > 0.001


def test_top_k_applies_after_the_mask(compiler, gemma):
    c = compiler.compile(Choice(("alpha", "beta")))
    m = c.new_matcher()
    allowed = reference_allowed(m, gemma.tokenizer.vocab_size)
    logits = np.zeros(gemma.tokenizer.vocab_size, dtype=np.float32)
    logits[:1000] = 50.0  # the unmasked top-k are all disallowed
    logits[allowed] = 1.0
    masks = MaskBuffer(len(logits), len(logits))
    picker = TokenPicker(SamplingParams(temperature=1.0, top_k=5, seed=0), masks, frozenset())
    assert not picker.lazy
    for _ in range(20):
        assert picker.pick(logits, m) in set(allowed.tolist())


def test_stop_string_and_length(compiler, random_runtime):
    random_runtime.seed = 0
    c = compiler.compile(Regex("[a-z]{200}"))
    d = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=3)
    assert d.finish_reason == "length" and len(d.tokens) == 3
    c = compiler.compile(Choice(("hello world, and more",)))
    d = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=100,
               drafting="force")
    assert d.finish_reason == "stop" and d.text == "hello world, and more"
    assert d.usage.forced_tokens == len(d.tokens) - 1  # one pick, the rest forced unchecked
    d = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=100)
    assert d.finish_reason == "stop" and d.text == "hello world, and more"
    # drafted: the forced rest is proposed whole and the model takes each token it would
    assert 0 < d.usage.forced_tokens == d.usage.draft_accepted <= d.usage.draft_tokens
    d = decode(random_runtime, [2], c.new_matcher(), SamplingParams(), max_tokens=100,
               stop=["wor"])
    assert d.finish_reason == "stop" and d.text == "hello "


def test_top_p_and_min_p_truncate_the_masked_distribution():
    """Among allowed tokens with probabilities .5/.3/.15/.05: top_p=0.7 keeps the first two,
    min_p=0.25 keeps those >= 0.125 (the first three)."""
    def picker_for(**kw):
        return TokenPicker(SamplingParams(temperature=1.0, seed=0, **kw), MaskBuffer(4, 4),
                           frozenset())

    z = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    for kw, kept in [({"top_p": 0.7}, {0, 1}), ({"min_p": 0.25}, {0, 1, 2}),
                     ({"top_k": 1}, {0}), ({}, {0, 1, 2, 3})]:
        picker = picker_for(**kw)
        drawn = {picker.pick_unconstrained(z) for _ in range(400)}
        assert drawn == kept, kw
