"""Turning llguidance's bitmask into something cheap to pick a token from.

Computing a mask costs tens of µs; *applying* one to a 262k-vocabulary logits row the obvious
way (`np.putmask`, `llguidance.numpy`) costs milliseconds. So a mask is applied by its shape:
  sparse (few non-zero 32-bit words): gather the allowed ids and work on those logits only;
  dense: unpack the bits once and copy the logits through them into one preallocated buffer.
Sampling needs no masked copy at all: it zeroes the refused tokens' weights (`refused_ids` when
few are refused, as in free text, else `allowed_bits`), see tempered.py.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..grammar.matcher import Matcher

_LANES = np.arange(32, dtype=np.int64)


class MaskBuffer:
    """One reusable bitmask plus the scratch rows needed to apply it."""

    # Gathering ids costs O(non-zero words); above this the dense path is cheaper.
    SPARSE_WORDS = 512

    def __init__(self, n_vocab: int, tokenizer_vocab: int):
        self.n_vocab = n_vocab
        self.words = np.zeros((tokenizer_vocab + 31) // 32, dtype=np.int32)
        self.masked = np.empty(n_vocab, dtype=np.float32)
        self._nbits = min(n_vocab, tokenizer_vocab)
        self._refused: tuple[bytes, NDArray[np.int64]] | None = None  # (words, their ids)

    def fill(self, matcher: Matcher) -> None:
        matcher.fill_mask(self.words)

    def allowed_ids(self) -> NDArray[np.int64] | None:
        """Allowed token ids when the mask is sparse, else None (use `apply_dense`)."""
        if np.count_nonzero(self.words) > self.SPARSE_WORDS:
            return None
        nz = np.flatnonzero(self.words)
        bits = np.unpackbits(self.words[nz].view(np.uint8), bitorder="little").reshape(-1, 32)
        ids = (nz[:, None] * 32 + _LANES)[bits.astype(bool)]
        return ids[ids < self._nbits]

    def known_refused(self) -> NDArray[np.int64] | None:
        """`refused_ids()` when the mask is the one it last answered for (free text refuses
        the same tokens at every step), else None; a comparison of the words alone."""
        if self._refused is not None and self._refused[0] == self.words.tobytes():
            return self._refused[1]
        return None

    def refused_ids(self) -> NDArray[np.int64] | None:
        """Refused token ids below n_vocab when few are refused, else None (use
        `allowed_bits`). Ids past the tokenizer's vocabulary are refused."""
        partial = self.words != -1  # -1: all 32 bits set
        if np.count_nonzero(partial) > self.SPARSE_WORDS:
            return None
        known = self.known_refused()
        if known is not None:
            return known
        at = np.flatnonzero(partial)
        bits = np.unpackbits(self.words[at].view(np.uint8), bitorder="little")
        ids = (at[:, None] * 32 + _LANES)[~bits.reshape(-1, 32).astype(bool)]
        ids = ids[ids < self._nbits]
        if self.n_vocab > self._nbits:
            ids = np.concatenate([ids, np.arange(self._nbits, self.n_vocab)])
        self._refused = (self.words.tobytes(), ids)
        return ids

    def allows(self, ids: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Whether each of `ids` is allowed (a bit test each: for a few candidates)."""
        if self._nbits >= self.n_vocab:  # every id has its bit (fewer numpy calls)
            return ((self.words[ids >> 5] >> (ids & 31)) & 1).astype(bool)
        inside = ids < self._nbits
        at = np.where(inside, ids, 0)
        return ((self.words[at >> 5] >> (at & 31)) & 1).astype(bool) & inside

    def allowed_bits(self) -> NDArray[np.bool_]:
        """One flag per token id below min(n_vocab, the tokenizer's vocabulary)."""
        return np.unpackbits(self.words.view(np.uint8), bitorder="little",
                             count=self._nbits).view(bool)

    def apply_dense(self, logits: NDArray[np.float32]) -> NDArray[np.float32]:
        """Masked copy of `logits` (disallowed = -inf) in the preallocated buffer."""
        allowed = np.unpackbits(self.words.view(np.uint8), bitorder="little",
                                count=self._nbits).view(bool)
        self.masked.fill(-np.inf)
        np.copyto(self.masked[: self._nbits], logits[: self._nbits], where=allowed)
        return self.masked
