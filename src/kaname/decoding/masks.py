"""Turning llguidance's bitmask into something cheap to pick a token from.

Computing a mask costs tens of µs; *applying* one to a 262k-vocabulary logits row the obvious
way (`np.putmask`, `llguidance.numpy`) costs milliseconds. So a mask is applied by its shape:
  sparse (few non-zero 32-bit words): gather the allowed ids and work on those logits only;
  dense: unpack the bits once and copy the logits through them into one preallocated buffer.
"""

from __future__ import annotations

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

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

    def fill(self, matcher: llg.LLMatcher) -> None:
        matcher.unsafe_compute_mask_ptr(self.words.ctypes.data, self.words.nbytes)

    def allowed_ids(self) -> NDArray[np.int64] | None:
        """Allowed token ids when the mask is sparse, else None (use `apply_dense`)."""
        nz = np.flatnonzero(self.words)
        if len(nz) > self.SPARSE_WORDS:
            return None
        bits = np.unpackbits(self.words[nz].view(np.uint8), bitorder="little").reshape(-1, 32)
        ids = (nz[:, None] * 32 + _LANES)[bits.astype(bool)]
        return ids[ids < self._nbits]

    def apply_dense(self, logits: NDArray[np.float32]) -> NDArray[np.float32]:
        """Masked copy of `logits` (disallowed = -inf) in the preallocated buffer."""
        allowed = np.unpackbits(self.words.view(np.uint8), bitorder="little",
                                count=self._nbits).view(bool)
        self.masked.fill(-np.inf)
        np.copyto(self.masked[: self._nbits], logits[: self._nbits], where=allowed)
        return self.masked
