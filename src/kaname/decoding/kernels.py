"""Loops numpy cannot run in one pass, compiled by numba.

top_p's test of one drawn token (`Tempered.top_p_keeps`) sums the weights of the tokens whose
logit is at least the token's. numpy needs three passes for that (a comparison into flags, a
cast to float32, a dot product: ~10 µs per 32k tokens); one fused, vectorized loop takes ~3 µs
and can stop at any block, not only at a chunk's end.

Compiled at the first call (~1 s) and cached on disk (numba's cache: beside this file, else
the user's cache folder); `warm()` pays that up front, as a server does at start.
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import NDArray


# reassoc: lets LLVM vectorize the sums (their order changes; float32 error stays ~1e-6 of a
# block's weight, far below tempered.MARGIN); no other fast-math flag, so -inf compares as usual
@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _at_least(z: NDArray[np.float32], w: NDArray[np.float32], zi: np.float32, lo: int,
              hi: int) -> np.float32:
    # over slices: a loop over range(lo, hi) is not vectorized (10x slower)
    zs, ws = z[lo:hi], w[lo:hi]
    s = np.float32(0.0)
    for j in range(zs.shape[0]):
        if zs[j] >= zi:
            s += ws[j]
    return s


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _mass_before(z: NDArray[np.float32], w: NDArray[np.float32], i: int,
                 sums: NDArray[np.float32], block: int, limit: float) -> tuple[float, bool]:
    n = z.shape[0]
    zi = z[i]
    blocks = (n + block - 1) // block
    total = 0.0
    heaviest = 0
    for b in range(blocks):
        total += sums[b]
        if sums[b] > sums[heaviest]:
            heaviest = b
    first = heaviest if sums[heaviest] >= 0.25 * total else -1
    light = 0.9 * total / blocks
    before = -np.float64(w[i])
    unread = total
    for stage in range(3):
        for b in range(blocks - 1, -1, -1):
            if stage == 0:
                if b != first:
                    continue
            elif b == first or (sums[b] < light) != (stage == 2):
                continue
            before += _at_least(z, w, zi, b * block, min(b * block + block, n))
            unread -= sums[b]
            if before + unread < limit:
                return before + unread, True
    zs, ws = z[i + 1: n], w[i + 1: n]  # equal logits with a larger id rank after i
    tied = np.float32(0.0)
    for j in range(zs.shape[0]):
        if zs[j] == zi:
            tied += ws[j]
    return before - tied, False


def mass_before(z: NDArray[np.float32], w: NDArray[np.float32], i: int,
                sums: NDArray[np.float32], block: int, limit: float) -> tuple[float, bool]:
    """The weight `w` of the tokens ranked before token `i` of the row `z` (a larger logit, or
    an equal one with a smaller id), read block by block (`sums`: each block's weight): the
    heaviest block first where it holds a quarter of the weight (a peaked row), then from the
    row's end (the likeliest still in cache), blocks under 0.9 of the mean weight last (the
    refused: their weight is zero). With the blocks not read counted in full it is an upper
    bound, and as soon as that falls below `limit` the answer is (that bound, True); else
    (the weight, False), summed in float64 from float32 blocks."""
    before, proven = _mass_before(z, w, i, sums, block, limit)
    return float(before), bool(proven)


def warm() -> None:
    """Compile (or load from numba's cache) now rather than at the first top_p draw."""
    z = np.zeros(2, dtype=np.float32)
    mass_before(z, np.ones(2, dtype=np.float32), 0, np.full(1, 2, dtype=np.float32), 2, 0.0)
