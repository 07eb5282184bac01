"""One logits row as a distribution to draw from, without a full sort of a 262k vocabulary.

At temperature T, token i has weight exp((z_i - max z) / T). A row costs one float32 pass each
for the shift, the scale and the exp, into a reused buffer, plus the buffer's sums per block of
BLOCK tokens (float64 copies, exp and a full cumsum cost several times more). A draw is then two
short searches (which block, by the blocks' cumulative sums; where inside it, by that block's
own cumulative sum: inverse CDF), a few µs, so drawing again is cheap: rejection sampling
against the grammar, or against a truncation, costs little per try.

What the grammar refuses is zeroed in the weights (the few refused ids, or the allowed bits
multiplied in), not copied into a -inf row, and only the blocks touched are summed again.

Truncation keeps a prefix of the allowed tokens ranked by logit, ties by token id (the order a
stable full sort gives), judged on the masked distribution:
  top_k, min_p: the prefix is short. One pass picks the tokens over a logit threshold (a
      strided subsample's order statistic for top_k; T ln(1 / min_p) below the top allowed
      logit for min_p), the grammar is asked about those alone, and only they are sorted and
      weighed: without top_p the row is never tempered (`set(weigh=False)`), so these cost
      less than temperature alone. The ids over a threshold are found 8 flags at a time where few
      words of 8 hold one (numpy's nonzero over a 262k-flag row costs ~3x the comparison).
  top_p: the prefix can be half the vocabulary (a flat distribution), so it is not built. A
      draw is kept iff the mass ranked before it is below top_p of the total (at most one
      fused pass, kernels.py, usually a quarter of one), else drawn again: rejection
      sampling, exact, and a draw is kept with probability >= top_p.
The order is the logits' own (exact, float32); masses are float32 sums, and a decision within
MARGIN of the total from its boundary is taken again in float64, the reference's precision.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from .kernels import mass_before

BLOCK = 1024
# 1/T above this is greedy for every float32 logit gap already; it keeps 0 * inf out of the row.
_MAX_SCALE = 1e30
# A float32 mass this close (relative to the total) to a truncation boundary is recomputed in
# float64; float32 sums over 262k weights err by ~1e-6 typically, far below it.
MARGIN = 1e-3
# Allowed weights summing below this (relative to the row's largest, 1) lose float32 precision
# to underflow: the row is recomputed from its allowed logits.
TINY = 1e-25
# Draws tried against top_p before the kept prefix is built explicitly.
TOP_P_TRIES = 8
_SUBSAMPLE = 4096
_LANES8 = np.arange(8, dtype=np.int64)
_FEW_WORDS = 512
_FEW_RUNS = 64

# Which of some token ids the grammar allows (MaskBuffer.allows).
Allows = Callable[[NDArray[np.int64]], NDArray[np.bool_]]


class Tempered:
    """Weights exp((z - max z) / T) of one row `z` in reused buffers; `z` is only read."""

    def __init__(self, capacity: int):
        self.block = min(BLOCK, max(capacity, 1))
        size = -(-max(capacity, 1) // self.block) * self.block
        # Zero beyond the row: padding weighs nothing in the block sums.
        self._w = np.zeros(size, dtype=np.float32)
        self._flags = np.zeros(-(-size // 8) * 8, dtype=np.bool_)  # False beyond the row
        self.weighed = False
        self.n = 0
        self.z: NDArray[np.float32] = self._w[:0]
        self.temperature = 1.0
        self.top_id = 0
        self._total = 0.0
        self._summed = False
        # (the ids `prefix` kept last and their weights, for `draw_among`)
        self._among: tuple[NDArray[np.int64], NDArray[np.float64]] | None = None
        # (the last refused ids, and their runs once they come again)
        self._runs: tuple[NDArray[np.int64], list[tuple[int, int]] | None] | None = None
        self._sums = np.zeros(size // self.block, dtype=np.float32)
        self._cum = np.zeros(size // self.block, dtype=np.float64)

    @property
    def weights(self) -> NDArray[np.float32]:
        return self._w[: self.n]

    def set(self, z: NDArray[np.float32], temperature: float, *, weigh: bool = True) -> None:
        """Temper the row `z` (float32; -inf weighs nothing). `weigh=False` reads only its
        maximum: enough for `prefix` and `draw_among` (top_k, min_p), not for draws from the
        whole row or top_p."""
        n = len(z)
        if n > len(self._w) or n == 0:
            raise ValueError(f"a row of {n} logits for a buffer of {len(self._w)}")
        if n < self.n:
            self._w[n: self.n] = 0
            self._flags[n: self.n] = False
        self.n, self.z, self.temperature = n, z, temperature
        self.top_id = int(np.argmax(z))  # the first of equal maxima: the top-ranked token
        top = z[self.top_id]
        if not np.isfinite(top):
            raise ValueError("a logits row without a finite maximum")
        self.weighed = weigh
        self._summed = False
        self._among = None
        if not weigh:
            return
        scale = _MAX_SCALE if temperature * _MAX_SCALE < 1 else 1.0 / temperature
        w = self._w[:n]
        with np.errstate(over="ignore", invalid="ignore"):  # a huge scale: -inf, weighs 0
            np.subtract(z, top, out=w)
            np.multiply(w, np.float32(scale), out=w)
            np.exp(w, out=w)

    def refuse(self, ids: NDArray[np.int64]) -> None:
        """Weigh `ids` zero (ids < n, ascending)."""
        if not len(ids):
            return
        runs = self._runs_of(ids)
        if runs is not None:
            for a, b in runs:
                self._w[a:b] = 0
        else:
            self._w[ids] = 0
        if self._summed:  # sum again only the blocks touched (free text: a few, at the ends)
            blocks = np.unique(ids // self.block)
            self._sums[blocks] = self._w.reshape(-1, self.block)[blocks].sum(axis=1)
            np.cumsum(self._sums, dtype=np.float64, out=self._cum)
            self._total = float(self._cum[-1])

    def _runs_of(self, ids: NDArray[np.int64]) -> list[tuple[int, int]] | None:
        """`ids` (ascending) as a few runs [a, b) of consecutive ids, when the same array came
        last time too (free text refuses the same ids at every step: Gemma's, 6 runs holding
        6,397 ids, 6,145 of them in one), else None. A few slices cost less than a scatter,
        and the tokens between them are the allowed ones. (Known by identity: an array
        passed here is not changed in place afterwards, as MaskBuffer's never are.)"""
        if self._runs is None or self._runs[0] is not ids:
            self._runs = (ids, None)
        elif self._runs[1] is None:
            cut = np.flatnonzero(np.diff(ids) != 1) + 1
            starts, stops = ids[np.r_[0, cut]], ids[np.r_[cut - 1, len(ids) - 1]] + 1
            found = list(zip(starts.tolist(), stops.tolist(), strict=True))
            self._runs = (ids, found if len(found) <= _FEW_RUNS else [])
        return self._runs[1] or None

    def keep(self, allowed: NDArray[np.bool_]) -> None:
        """Weigh zero what `allowed` (one flag per id from 0; ids beyond it) does not allow."""
        m = min(len(allowed), self.n)
        np.multiply(self._w[:m], allowed[:m], out=self._w[:m])
        self._w[m: self.n] = 0
        self._summed = False

    def underflowed(self) -> bool:
        """Whether the weights sum below TINY: float32 has lost them (the heaviest tokens
        were refused, and the rest lie ~57 T below them)."""
        return not self.total > TINY

    @property
    def total(self) -> float:
        """The weights' sum."""
        self._sum_blocks()
        return self._total

    def _sum_blocks(self) -> None:
        # Only when a draw or the total needs them (top_k and min_p do not). Summed, never
        # updated by subtraction: that could leave a zeroed block a residue to be drawn from.
        if self._summed:
            return
        if not self.weighed:
            raise RuntimeError("the row was set without its weights (weigh=False)")
        self._w.reshape(-1, self.block).sum(axis=1, out=self._sums)
        np.cumsum(self._sums, dtype=np.float64, out=self._cum)
        self._total = float(self._cum[-1])
        self._summed = True

    # -----------------------------------------------------------------------------------------
    # Draws

    def draw(self, rng: np.random.Generator) -> int:
        """An index drawn with probability weight / total (total > 0)."""
        u = rng.random() * self.total
        b = int(np.searchsorted(self._cum, u, side="right"))
        if b >= len(self._cum):  # u rounded up to the total
            b = int(np.flatnonzero(self._sums)[-1])
        base = float(self._cum[b - 1]) if b else 0.0
        lo = b * self.block
        seg = self._w[lo: lo + self.block]
        c = np.cumsum(seg, dtype=np.float64)
        # cum[b] > u >= base, so block b weighs something; rescale u into its own cumsum
        r = (u - base) / (float(self._cum[b]) - base) * float(c[-1])
        j = int(np.searchsorted(c, r, side="right"))
        if j >= len(c):
            j = int(np.flatnonzero(seg)[-1])
        return lo + j

    def draw_among(self, ids: NDArray[np.int64], rng: np.random.Generator) -> int:
        """One of `ids` (non-empty), with probability proportional to its weight: their own
        softmax, in float64 (the reference's), from their logits alone."""
        if self._among is not None and self._among[0] is ids:  # weighed by `prefix` already
            w = self._among[1]
        else:
            z = self.z[ids].astype(np.float64)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                w = np.exp((z - z.max()) / self.temperature)  # an extreme T: 0s and the top's 1
        self._among = None
        c = np.cumsum(w)
        j = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
        if j >= len(c):
            j = int(np.flatnonzero(w)[-1])
        return int(ids[j])

    def draw_top_p(self, top_p: float, rng: np.random.Generator, allows: Allows | None = None
                   ) -> int:
        """A draw from the weights truncated to the top_p prefix: drawn, then kept or drawn
        again (rejection sampling is exact). A rejected draw rejects every token ranked after
        it too, without another pass."""
        floor = -1
        for _ in range(TOP_P_TRIES):
            i = self.draw(rng)
            if floor >= 0 and not self.ranks_before(i, floor):
                continue
            if self.top_p_keeps(i, top_p):
                return i
            floor = i
        return self.draw_among(self.top_p_prefix(top_p, allows), rng)

    # -----------------------------------------------------------------------------------------
    # Truncation

    def ranks_before(self, a: int, b: int) -> bool:
        za, zb = self.z[a], self.z[b]
        return bool(za > zb or (za == zb and a < b))

    def top_p_keeps(self, i: int, top_p: float) -> bool:
        """Whether `i` is in the smallest ranked prefix holding top_p of the mass.

        At most one pass, fused (`kernels.mass_before`), block by block: the weight of the
        tokens at or above i's logit, less i's own, bounds the mass ranked before i from above
        (tokens tied with i rank after it when their id is larger, and are subtracted at the
        end). With the blocks not yet read counted in full, the bound often proves i kept
        early: a draw lies below top_p with probability top_p, most of the time well below (a
        quarter of a pass on average at top_p 0.9 on a flat distribution)."""
        total = self.total
        bound, margin = top_p * total, MARGIN * total
        before, proven = mass_before(self.z, self._w, i, self._sums, self.block, bound - margin)
        if proven:
            return True
        if abs(before - bound) > margin:
            return before < bound
        z, zi = self.z, self.z[i]
        p = self._exact_probabilities()
        return float(p[z > zi].sum() + p[:i][z[:i] == zi].sum()) < top_p

    def prefix(self, top_k: int = 0, min_p: float = 0.0, allows: Allows | None = None, *,
               ranked: bool = True, refused: NDArray[np.int64] | None = None
               ) -> NDArray[np.int64]:
        """The tokens `allows` allows (None: all) that top_k and/or min_p keep; in rank order
        if `ranked` or top_k, else ascending. Only logits and `allows` are read, so the row
        need not be masked. `refused`: the ids `allows` refuses, if known (see `_first`)."""
        if min_p > 0:
            top = self._first(allows, refused)
            zt, t = float(self.z[top]), self.temperature
            # the logits within t * ln(1 / min_p) of the top one, with room for rounding; the
            # float64 test then decides as the reference does
            reach = t * -math.log(min_p)
            low = zt - reach - 1e-4 * (abs(zt) + reach)
            ids = self._at_least(np.float32(low))
            if allows is not None:
                ids = ids[allows(ids)]
            z = self.z[ids].astype(np.float64)
            with np.errstate(over="ignore", invalid="ignore"):
                e = np.exp((z - zt) / t)
            kept = e >= min_p
            ids = ids[kept]
            if not (ranked or top_k):
                # their weights relative to the top, as `draw_among` computes them
                self._among = (ids, e[kept])
                return ids
        else:
            ids = self._over_threshold(top_k, allows)
        order = rank(ids, self.z)
        return order[:top_k] if top_k else order

    def _at_least(self, g: np.float32) -> NDArray[np.int64]:
        """Ids (ascending) of the logits >= g: one comparison into flags, then only the
        8-flag words holding one are unpacked."""
        n = self.n
        flags = self._flags[: -(-n // 8) * 8]  # False past n
        np.greater_equal(self.z, g, out=flags[:n])
        held = flags.view(np.uint64) != 0  # (nonzero on uint64 itself: ~7x slower)
        if np.count_nonzero(held) > _FEW_WORDS:  # many: unpacking costs more than nonzero
            return np.flatnonzero(flags[:n])
        words = np.flatnonzero(held)
        hits = flags.reshape(-1, 8)[words]
        return (words[:, None] * 8 + _LANES8)[hits]

    def cut_top_p(self, ranked: NDArray[np.int64], top_p: float) -> NDArray[np.int64]:
        """The part of the ranked prefix `ranked` that top_p keeps (mass of the whole row)."""
        c = np.cumsum(self._w[ranked], dtype=np.float64)
        bound = top_p * self.total
        keep = int(np.searchsorted(c, bound, side="left")) + 1
        decisive = c[max(keep - 2, 0): keep]
        if len(decisive) and np.abs(decisive - bound).min() <= MARGIN * self.total:
            c = np.cumsum(self._exact_probabilities()[ranked])
            keep = int(np.searchsorted(c, top_p, side="left")) + 1
        return ranked[:keep]

    def top_p_prefix(self, top_p: float, allows: Allows | None = None) -> NDArray[np.int64]:
        """The top_p prefix built explicitly: candidates over a threshold, grown until they
        hold the boundary, then sorted and cut."""
        w = self._w[: self.n]
        need = (top_p + MARGIN) * self.total
        k = 64
        while True:
            ids = self._over_threshold(k, allows)
            if k >= self.n or float(w[ids].sum(dtype=np.float64)) >= need:
                break
            k *= 8
        return self.cut_top_p(rank(ids, self.z), top_p)

    def _first(self, allows: Allows | None, refused: NDArray[np.int64] | None = None) -> int:
        """The top-ranked token `allows` allows. `refused`: the ids it refuses, if known; when
        they are a few runs, one argmax over the stretches between them finds it."""
        if allows is None or allows(np.array([self.top_id]))[0]:
            return self.top_id
        runs = self._runs_of(refused) if refused is not None and len(refused) else None
        if runs is None:
            ids = self._over_threshold(1, allows)
            return int(ids[np.argmax(self.z[ids])])  # ascending: the first maximum ranks first
        best, at = -np.inf, -1
        for lo, hi in zip([0, *(b for _, b in runs)], [*(a for a, _ in runs), self.n],
                          strict=True):
            if lo < hi:
                j = lo + int(np.argmax(self.z[lo:hi]))
                if at < 0 or self.z[j] > best:  # strictly: an equal one further on ranks after
                    best, at = self.z[j], j
        if at < 0:
            raise ValueError("every token is refused")
        return at

    def _over_threshold(self, k: int, allows: Allows | None) -> NDArray[np.int64]:
        """Ids (ascending) of at least min(k, all allowed) allowed tokens: every allowed token
        whose logit is at least the lowest of theirs, so a ranked prefix."""
        z = self.z
        step = max(1, self.n // _SUBSAMPLE)
        sample = z[::step]
        # a subsample's q-th largest lies above ~q * step tokens; ask for twice k
        q = min(len(sample), 2 * k // step + 4)
        while q < len(sample):
            g = np.partition(sample, len(sample) - q)[len(sample) - q]
            ids = self._at_least(g)
            if allows is not None:
                ids = ids[allows(ids)]
            if len(ids) >= k:
                return ids
            q = min(len(sample), q * 4)
        ids = np.arange(self.n)
        return ids if allows is None else ids[allows(ids)]

    def _exact_probabilities(self) -> NDArray[np.float64]:
        """The reference's float64 softmax over the tokens that weigh something (rare: only
        for a decision at a boundary)."""
        allowed = self._w[: self.n] > 0
        z = self.z.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp((z - z[allowed].max()) / self.temperature)
        e[~allowed] = 0
        return e / e.sum()


def rank(ids: NDArray[np.int64], z: NDArray[np.float32]) -> NDArray[np.int64]:
    """`ids` in rank order: logit descending, then id ascending (a stable sort's order), by
    one int64 key each so that numpy's fast unstable sort is exact."""
    bits = (z[ids] + np.float32(0)).view(np.int32).astype(np.int64)  # + 0: -0.0 ties 0.0
    key = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # a float's order, as an integer
    return ids[np.argsort((-key << 32) | ids)]
