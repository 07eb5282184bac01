"""kaname's own matcher interface over one grammar, per request.

Decoding, the replay verifier and the post-checks use this, not `llguidance.LLMatcher`
directly: it names the operations verified drafts need (validate without committing, roll
back) and keeps llguidance's error reporting in one place. As vLLM's `backend_types` does,
it would let another mask library stand in.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance as llg
import numpy as np
from numpy.typing import NDArray


class Matcher:
    """The state of one generation in one grammar."""

    __slots__ = ("_m",)

    def __init__(self, matcher: llg.LLMatcher):
        self._m = matcher

    @property
    def llg(self) -> llg.LLMatcher:
        """llguidance's matcher itself: for benchmarks that measure llguidance's own path."""
        return self._m

    def copy(self) -> Matcher:
        return Matcher(self._m.deep_copy())

    def accept_tokens(self, tokens: Sequence[int]) -> bool:
        """Commit `tokens`; False (and the matcher in error) where the grammar refuses one."""
        return bool(self._m.consume_tokens(list(tokens)))

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, in order, the grammar allows from here, committing none."""
        return int(self._m.validate_tokens(list(tokens))) if tokens else 0

    def rollback(self, n: int) -> None:
        """Undo the last `n` committed tokens."""
        if n:
            self._m.rollback(n)

    def fill_mask(self, words: NDArray[np.int32]) -> None:
        """The allowed next tokens as a bitmask (bit i of word i // 32: token i)."""
        self._m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)

    def forced_bytes(self) -> bytes:
        """The bytes every continuation starts with (empty where the grammar has a choice)."""
        return bytes(self._m.compute_ff_bytes())

    def forced_tokens(self) -> list[int]:
        """llguidance's tokenization of the forced bytes (boundary-safe, not canonical)."""
        return list(self._m.compute_ff_tokens())

    def is_stopped(self) -> bool:
        """Nothing but the end can follow."""
        return bool(self._m.is_stopped())

    def is_accepting(self) -> bool:
        """The output may end here."""
        return bool(self._m.is_accepting())

    def is_error(self) -> bool:
        return bool(self._m.is_error())

    def error(self) -> str:
        """llguidance's message, without its state dump."""
        return str(self._m.get_error()).split("\n<")[0].strip()
