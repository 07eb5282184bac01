"""Sampling without a full sort (decoding/tempered.py) against the full-sort definition.

The reference is the sampler kaname had before: softmax over the allowed logits in float64, a
stable sort, then top_k / top_p / min_p as prefixes of that order. The kept set must be the
same token for token (ties at the boundary included), and draws through TokenPicker must follow
the reference distribution, on every path a mask can take (few allowed ids, few refused ids,
dense bits, no grammar).
"""

from __future__ import annotations

import ctypes
import zlib

import numpy as np
import pytest
from scipy.stats import chisquare

from kaname.decoding import SamplingParams, TokenPicker
from kaname.decoding.kernels import mass_before
from kaname.decoding.masks import MaskBuffer
from kaname.decoding.tempered import BLOCK, Tempered


def reference(z32: np.ndarray, allowed: np.ndarray, temperature: float, top_k: int = 0,
              top_p: float = 1.0, min_p: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(kept ids in rank order, their probabilities): the old full-sort sampler, verbatim."""
    ids = np.flatnonzero(allowed)
    z = z32[ids].astype(np.float64)
    probs = np.exp((z - z.max()) / temperature)
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep = len(order)
    if top_k:
        keep = min(keep, top_k)
    if top_p < 1:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs[order]), top_p)) + 1)
    if min_p > 0:
        keep = min(keep, max(1, int(np.sum(probs >= min_p * probs[order[0]]))))
    chosen = order[:keep]
    return ids[chosen], probs[chosen] / probs[chosen].sum()


class FixedMask:
    """A matcher double whose every state allows the same tokens (the surface of
    `grammar.Matcher` that TokenPicker uses)."""

    def __init__(self, allowed: np.ndarray):
        self.allowed = allowed
        bits = np.zeros(-(-len(allowed) // 32) * 32, dtype=bool)
        bits[: len(allowed)] = allowed
        self.words = np.packbits(bits, bitorder="little").view(np.int32)

    def fill_mask(self, words: np.ndarray) -> None:
        ctypes.memmove(words.ctypes.data, self.words.ctypes.data,
                       min(words.nbytes, self.words.nbytes))

    def validate_tokens(self, tokens: list[int]) -> int:
        return int(self.allowed[tokens[0]])

    def is_accepting(self) -> bool:
        return False

    def is_error(self) -> bool:
        return False


def random_case(rng: np.random.Generator, n: int, *, ties: bool
                ) -> tuple[np.ndarray, np.ndarray, float]:
    z = (rng.standard_normal(n) * rng.uniform(0.5, 4)).astype(np.float32)
    if ties:  # few distinct values: ties at every boundary
        z = np.round(z * 2).astype(np.float32) / 2
    allowed = rng.random(n) < rng.uniform(0.05, 1.0)
    allowed[rng.integers(n)] = True
    return z, allowed, float(rng.uniform(0.3, 2.0))


def masked_row(z: np.ndarray, allowed: np.ndarray, temperature: float, how: str) -> Tempered:
    """A row masked as TokenPicker masks it: refused weights zeroed ("refuse", "keep"), or
    not at all ("ask": top_k and min_p only ask the mask about their candidates)."""
    row = Tempered(len(z))
    row.set(z, temperature)
    if how == "refuse":
        row.refuse(np.flatnonzero(~allowed))
    elif how == "keep":
        row.keep(allowed)
    return row


# ---------------------------------------------------------------------------------------------
# The kept set, exactly


@pytest.mark.parametrize("ties", [False, True])
def test_kept_set_equals_the_full_sort(ties):
    rng = np.random.default_rng(21 + ties)
    checked = {"top_k": 0, "min_p": 0, "top_p": 0, "combined": 0, "boundary_ties": 0}
    for case in range(300):
        n = int(rng.choice([3, 40, 700, 2 * BLOCK + 77]))
        z, allowed, temperature = random_case(rng, n, ties=ties)
        row = masked_row(z, allowed, temperature, ["refuse", "keep", "ask"][case % 3])
        allows = allowed.__getitem__
        top_k = int(rng.choice([0, 1, 3, 20]))
        top_p = float(rng.choice([1.0, 0.95, 0.6, 0.2]))
        min_p = float(rng.choice([0.0, 0.02, 0.3]))
        expected, _ = reference(z, allowed, temperature, top_k, top_p, min_p)
        if (top_k or min_p) and (top_p == 1 or case % 3 != 2):
            ranked = row.prefix(top_k, min_p, allows)
            if top_p < 1:
                ranked = row.cut_top_p(ranked, top_p)
                checked["combined"] += 1
            np.testing.assert_array_equal(ranked, expected, err_msg=f"case {case}")
            if not (top_k or top_p < 1):  # unranked: the same set
                kept = row.prefix(0, min_p, allows, ranked=False)
                assert set(kept.tolist()) == set(expected.tolist()), f"case {case}"
            checked["top_k" if top_k else "min_p"] += 1
        elif top_p < 1 and case % 3 != 2:  # top_p reads masses: a masked row
            kept = {int(i) for i in np.flatnonzero(allowed) if row.top_p_keeps(int(i), top_p)}
            assert kept == set(expected.tolist()), f"case {case}"
            np.testing.assert_array_equal(row.top_p_prefix(top_p, allows), expected)
            checked["top_p"] += 1
        else:
            continue
        last = expected[-1]
        ranked_all, _ = reference(z, allowed, temperature)
        tied = ranked_all[z[ranked_all] == z[last]]
        checked["boundary_ties"] += len(tied) > 1 and last != tied[-1]
    assert min(v for k, v in checked.items() if k != "boundary_ties") >= 10, checked
    if ties:  # a boundary fell inside a group of equal logits, so ids decided
        assert checked["boundary_ties"] >= 10, checked


def test_kept_set_on_a_262k_row():
    """The vocabulary the issue measured: many blocks, a subsample that must be grown."""
    rng = np.random.default_rng(5)
    n = 262_144
    z = rng.standard_normal(n).astype(np.float32)
    allowed = np.ones(n, dtype=bool)
    allowed[rng.integers(0, n, 3000)] = False
    allows = allowed.__getitem__
    z[np.argmax(z)] = z.max() + 5  # the top token,
    allowed[np.argmax(z)] = False  # refused
    for top_k, top_p, min_p in [(40, 1.0, 0.0), (0, 1.0, 0.05), (40, 0.5, 0.0),
                                (2000, 1.0, 0.0), (0, 0.002, 0.0)]:
        row = masked_row(z, allowed, 0.8, "refuse" if top_p < 1 else "ask")
        expected, _ = reference(z, allowed, 0.8, top_k, top_p, min_p)
        if top_k or min_p:
            got = row.prefix(top_k, min_p, allows)
            got = row.cut_top_p(got, top_p) if top_p < 1 else got
        else:
            got = row.top_p_prefix(top_p, allows)
        np.testing.assert_array_equal(got, expected, err_msg=str((top_k, top_p, min_p)))
    row = masked_row(z, allowed, 0.8, "refuse")
    ranked_all, _ = reference(z, allowed, 0.8)
    for top_p in (0.9, 0.3):
        expected, _ = reference(z, allowed, 0.8, top_p=top_p)
        inside = set(expected.tolist())
        # random tokens (a top_p_keeps that reads only some chunks), and those at the boundary
        edge = ranked_all[len(expected) - 3: len(expected) + 3]
        for i in [*rng.choice(np.flatnonzero(allowed), 100, replace=False), *edge]:
            assert row.top_p_keeps(int(i), top_p) == (int(i) in inside), (top_p, i)


def test_fused_mass_before_is_the_ranked_mass_or_an_upper_bound_below_the_limit():
    """kernels.mass_before against numpy: unproven, the weight of the tokens ranked before i
    (ties by id, -inf and zero weights included); proven, an upper bound of it that is below
    the limit, and it is proven whenever the whole row's weight less i's is."""
    rng = np.random.default_rng(41)
    for case in range(400):
        n = int(rng.integers(1, 5000))
        block = int(rng.choice([1, 7, 64, 1024]))
        z = (rng.standard_normal(n) * 3).astype(np.float32)
        if case % 3 == 0:
            z = np.round(z).astype(np.float32)  # ties everywhere
        size = -(-n // block) * block
        w = np.zeros(size, dtype=np.float32)  # padded, as a Tempered buffer is
        w[:n] = np.exp(z - z.max())
        w[:n][rng.random(n) < 0.2] = 0  # refused
        if case % 5 == 0:
            z[rng.integers(0, n, 3)] = -np.inf
            w[:n][~np.isfinite(z)] = 0
        if case % 7 == 0:  # a peaked row: one block holds most of the weight
            w[int(rng.integers(0, n))] = w.sum() * 3
        sums = w.reshape(-1, block).sum(axis=1, dtype=np.float32)
        i = int(rng.integers(0, n))
        ids = np.arange(n)
        ranked = (z > z[i]) | ((z == z[i]) & (ids < i))
        exact = float(w[:n][ranked].sum(dtype=np.float64))
        tol = 1e-5 * float(sums.sum(dtype=np.float64)) + 1e-30
        got, proven = mass_before(z, w, i, sums, block, -np.inf)
        assert not proven and abs(got - exact) <= tol, (case, got, exact)
        limit = float(rng.uniform(0, 1.2)) * float(sums.sum(dtype=np.float64))
        got, proven = mass_before(z, w, i, sums, block, limit)
        if proven:
            assert got < limit and got >= exact - tol, (case, got, exact, limit)
        else:
            assert abs(got - exact) <= tol, (case, got, exact)
        rest = float(sums.sum(dtype=np.float64)) - float(w[i])
        assert proven or rest >= limit, (case, rest, limit)


def test_refused_runs_give_the_full_sorts_top_and_weights():
    """A refused set that repeats (free text's) is handled by its runs: zeroed by slices, and
    the top allowed token found by one argmax between them. Both must be what the scatter and
    the full sort give, runs at either end and ties included (the first id of equal maxima
    ranks first)."""
    rng = np.random.default_rng(31)
    for case in range(300):
        n = int(rng.integers(2, 3 * BLOCK))
        z = (rng.standard_normal(n) * 2).astype(np.float32)
        if case % 2:
            z = np.round(z).astype(np.float32)  # ties everywhere
        allowed = np.ones(n, dtype=bool)
        for _ in range(int(rng.integers(1, 6))):
            a = int(rng.integers(0, n))
            allowed[a: a + int(rng.integers(1, n // 2 + 2))] = False
        if case % 3 == 0:
            allowed[int(np.argmax(z))] = False  # the top itself refused
        if case % 5 == 0:
            allowed[: int(rng.integers(1, n // 3 + 2))] = False  # a run from id 0
        if case % 7 == 0:
            allowed[-int(rng.integers(1, n // 3 + 2)):] = False  # a run to the end
        if not allowed.any():
            allowed[int(rng.integers(n))] = True
        refused = np.flatnonzero(~allowed)
        row = Tempered(n)
        row.set(z, 0.8)
        row.refuse(refused)  # first sight: scattered
        row.set(z, 0.8)
        row.refuse(refused)  # the same array again: by its runs
        assert row._runs_of(refused) is not None or not len(refused)
        scattered = Tempered(n)
        scattered.set(z, 0.8)
        scattered.refuse(refused.copy())
        np.testing.assert_array_equal(row.weights, scattered.weights)
        allows = allowed.__getitem__
        expected, _ = reference(z, allowed, 0.8)
        assert row._first(allows, refused) == expected[0], case
        for min_p in (0.05, 0.5):
            kept, _ = reference(z, allowed, 0.8, min_p=min_p)
            got = row.prefix(0, min_p, allows, ranked=False, refused=refused)
            assert set(got.tolist()) == set(kept.tolist()), case


def test_a_row_reused_at_other_lengths_keeps_the_same_sets():
    """One buffer for rows of several lengths (not multiples of 8, shorter after longer): the
    flags past a row's end never count, with the row tempered or not (top_k and min_p alone
    do not temper it, and draw nothing from the whole row)."""
    rng = np.random.default_rng(8)
    row = Tempered(3 * BLOCK)
    for n in (3 * BLOCK - 1, 13, 2 * BLOCK + 3, 7, 1):
        z = rng.standard_normal(n).astype(np.float32)
        allowed = np.ones(n, dtype=bool)
        for weigh in (True, False):
            row.set(z, 0.7, weigh=weigh)
            for top_k, min_p in ((3, 0.0), (0, 0.3), (0, 1.0)):
                expected, _ = reference(z, allowed, 0.7, top_k=top_k, min_p=min_p)
                np.testing.assert_array_equal(row.prefix(top_k, min_p), expected, (n, top_k))
        with pytest.raises(RuntimeError):
            row.draw(rng)  # the last set did not weigh the row


# ---------------------------------------------------------------------------------------------
# Draws, against the reference distribution


def assert_follows(counts: dict[int, int], ids: np.ndarray, probs: np.ndarray) -> None:
    """Draws `counts` come from `probs` over `ids`: nothing outside `ids`; chi-square p > 1e-3
    and total variation under 1.5x its expected sampling noise, over bins of expected count >= 5
    (the rest pooled into one)."""
    assert set(counts) <= set(ids.tolist())  # nothing outside the kept set, ever
    draws = sum(counts.values())
    observed = np.array([counts.get(int(i), 0) for i in ids], dtype=float)
    expected = probs * draws
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    assert chisquare(obs, exp).pvalue > 1e-3
    tv = 0.5 * np.abs(obs - exp).sum() / draws
    noise = 0.5 * np.sqrt(2 / np.pi * exp * (1 - exp / draws)).sum() / draws  # E[TV] if exact
    assert tv < 1.5 * noise + 0.002, (tv, noise)


MASK_PATHS = {  # MaskBuffer.SPARSE_WORDS for each path (the vocabularies here are small)
    "allowed_ids": MaskBuffer.SPARSE_WORDS, "refused_ids": 8, "dense": -1, "no_grammar": None}
TRUNCATIONS = [{}, {"top_p": 0.9}, {"top_p": 0.3}, {"top_k": 20}, {"min_p": 0.05},
               {"top_k": 50, "top_p": 0.8, "min_p": 0.01}]


@pytest.mark.parametrize("path", list(MASK_PATHS))
@pytest.mark.parametrize("kw", TRUNCATIONS, ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()) or "temperature")
def test_draws_follow_the_reference_distribution(path, kw):
    rng = np.random.default_rng(zlib.crc32(repr((path, kw)).encode()))
    n = 2 * BLOCK + 500  # three blocks, the last one partial
    z = (rng.standard_normal(n) * 2.5).astype(np.float32)
    allowed = np.ones(n, dtype=bool)
    if path == "allowed_ids":
        allowed = rng.random(n) < 0.3
    elif path == "refused_ids":
        allowed[100:260] = False  # few words with a refused bit
        z[100:260] += 3  # the refused tokens would be the likeliest
    elif path == "dense":
        allowed = rng.random(n) < 0.7
    expected_ids, probs = reference(z, allowed, 0.9, **kw)
    masks = MaskBuffer(n, n)
    if MASK_PATHS[path] is not None:
        masks.SPARSE_WORDS = MASK_PATHS[path]
    picker = TokenPicker(SamplingParams(temperature=0.9, seed=7, **kw), masks, frozenset())
    matcher = FixedMask(allowed)
    draws = 5000
    counts: dict[int, int] = {}
    for _ in range(draws):
        t = picker.pick_unconstrained(z) if path == "no_grammar" else picker.pick(z, matcher)
        counts[t] = counts.get(t, 0) + 1
    assert_follows(counts, expected_ids, probs)
    if path == "allowed_ids":
        assert picker.stats.sparse_masks == picker.stats.full_masks > 0
    elif path != "no_grammar":
        assert picker.stats.sparse_masks == 0 and picker.stats.full_masks > 0


def test_refused_path_is_the_one_taken():
    """The MASK_PATHS above reach the paths they are named after."""
    n = 2 * BLOCK + 500
    allowed = np.ones(n, dtype=bool)
    allowed[100:260] = False
    masks = MaskBuffer(n, n)
    masks.SPARSE_WORDS = MASK_PATHS["refused_ids"]
    masks.fill(FixedMask(allowed))
    assert masks.allowed_ids() is None
    np.testing.assert_array_equal(masks.refused_ids(), np.arange(100, 260))
    np.testing.assert_array_equal(masks.known_refused(), np.arange(100, 260))  # remembered
    other = allowed.copy()
    other[5] = False
    masks.fill(FixedMask(other))  # another mask: not the remembered one
    assert masks.known_refused() is None
    np.testing.assert_array_equal(masks.refused_ids(), [5, *range(100, 260)])
    masks.SPARSE_WORDS = MASK_PATHS["dense"]
    masks.fill(FixedMask(allowed))
    assert masks.refused_ids() is None
    np.testing.assert_array_equal(masks.allowed_bits(), allowed)


def test_allowed_tokens_far_below_the_maximum():
    """Allowed logits 300 below a refused maximum underflow in float32 against it: the row is
    tempered again from the allowed logits, and draws keep their distribution."""
    n = 3 * BLOCK
    rng = np.random.default_rng(2)
    z = np.zeros(n, dtype=np.float32)
    z[:10] = 400.0
    allowed = np.zeros(n, dtype=bool)
    allowed[500:2500] = True
    z[allowed] = rng.standard_normal(allowed.sum()).astype(np.float32)
    masks = MaskBuffer(n, n)
    masks.SPARSE_WORDS = -1
    picker = TokenPicker(SamplingParams(temperature=1.0, seed=3, top_p=0.9), masks, frozenset())
    ids, probs = reference(z, allowed, 1.0, top_p=0.9)
    counts: dict[int, int] = {}
    for _ in range(3000):
        t = picker.pick(z, FixedMask(allowed))
        counts[t] = counts.get(t, 0) + 1
    assert_follows(counts, ids, probs)


@pytest.mark.parametrize("temperature", [1e-308, 1e-40, 1e4])
def test_extreme_temperatures(temperature):
    n = 2 * BLOCK
    rng = np.random.default_rng(4)
    z = rng.standard_normal(n).astype(np.float32)
    allowed = rng.random(n) < 0.5
    masks = MaskBuffer(n, n)
    masks.SPARSE_WORDS = -1
    picker = TokenPicker(SamplingParams(temperature=temperature, seed=0, top_p=0.5), masks,
                         frozenset())
    drawn = {picker.pick(z, FixedMask(allowed)) for _ in range(50)}
    if temperature < 1:  # greedy in all but name
        assert drawn == {int(np.flatnonzero(allowed)[np.argmax(z[allowed])])}
    else:  # nearly uniform: top_p 0.5 keeps the first half of the allowed, by rank
        kept, _ = reference(z, allowed, temperature, top_p=0.5)
        assert drawn <= set(kept.tolist()) and len(drawn) > 40


def test_a_seed_repeats_its_draws():
    n = 3 * BLOCK
    z = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    for kw in TRUNCATIONS:
        runs = []
        for _ in range(2):
            picker = TokenPicker(SamplingParams(temperature=0.8, seed=11, **kw), MaskBuffer(n, n),
                                 frozenset())
            runs.append([picker.pick_unconstrained(z) for _ in range(30)])
        assert runs[0] == runs[1], kw
