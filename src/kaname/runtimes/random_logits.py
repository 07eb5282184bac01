"""Models without a model: seeded random logits over a real vocabulary.

They isolate the constraint engine from model quality. If the constraint is right, *any*
model's output is valid, so thousands of seeded random generations must all validate.

`RandomLogitsRuntime` draws each row from a bank of seeded Gaussian rows (drawing 262k fresh
normals per token would cost more than the engine under test) with a mild bias towards
tokens that close JSON structures, so generations end within a few hundred tokens.
`AdversarialRuntime` strongly prefers whitespace and `"` tokens: the failure mode where a
model closes a string early and then emits legal whitespace for ever.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

from .stepped import Stepped

_BANK_ROWS = 64


@functools.lru_cache(maxsize=4)
def token_classes(tokenizer: llg.LLTokenizer
                  ) -> tuple[NDArray[np.bool_], NDArray[np.bool_], NDArray[np.bool_]]:
    """(closes_structure, whitespace_or_quote, special) flags per token id, in one pass over
    the vocabulary (262k tokens: done once per tokenizer)."""
    n = tokenizer.vocab_size
    closes = np.zeros(n, dtype=bool)
    ws_quote = np.zeros(n, dtype=bool)
    special = np.zeros(n, dtype=bool)
    for i in range(n):
        b = tokenizer.decode_bytes([i])
        special[i] = tokenizer.is_special_token(i)
        if not b or special[i]:
            continue
        closes[i] = any(c in b for c in (b'"', b"}", b"]", b","))
        ws_quote[i] = b.strip() == b"" or b.strip() == b'"' or set(b) <= set(b' \t\n\r"')
    return closes, ws_quote, special


class RandomLogitsRuntime(Stepped):
    """Seeded random logits over `tokenizer`'s vocabulary; the prompt is ignored. Each call
    draws one row (`evaluate`: one per token, so a token's row is the same with or without
    drafts after it).

    `n_ctx`: the context window it claims (the prompt is never read, so it holds any; a size
    lets tests exercise context limits without a model). None: unbounded."""

    def __init__(self, tokenizer: llg.LLTokenizer, *, seed: int = 0, scale: float = 1.0,
                 close_bias: float = 1.5, eos_token_ids: Sequence[int] | None = None,
                 bos_token_id: int | None = None, n_ctx: int | None = None):
        if n_ctx is not None and n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1 or None, got {n_ctx}")
        self.n_ctx = n_ctx
        self._tokenizer = tokenizer
        self._n_vocab = tokenizer.vocab_size
        self._eos = tuple(eos_token_ids if eos_token_ids is not None else tokenizer.eos_tokens)
        self._bos = bos_token_id
        self.seed = seed
        bank_rng = np.random.default_rng(12345)
        self._bank = bank_rng.standard_normal((_BANK_ROWS, self._n_vocab), dtype=np.float32)
        self._bank *= scale
        self._bias = self._make_bias(close_bias * scale)
        self._rng = np.random.default_rng(seed)
        self._row = np.empty(self._n_vocab, dtype=np.float32)

    def _make_bias(self, close_bias: float) -> NDArray[np.float32]:
        # Closing tokens and special tokens (a format's markers) get the bias, so random text
        # and JSON end within a few hundred tokens.
        closes, _, special = token_classes(self._tokenizer)
        return ((closes | special) * np.float32(close_bias)).astype(np.float32)

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        return self._tokenizer

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def eos_token_ids(self) -> Sequence[int]:
        return self._eos

    def tokenize(self, text: str) -> list[int]:
        ids = self._tokenizer.tokenize_str(text)
        return [self._bos, *ids] if self._bos is not None else ids

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        self._rng = np.random.default_rng(self.seed)
        self._reset_steps()
        return self._next()

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        return self._next()

    def _snapshot(self) -> Any:
        return self._rng.bit_generator.state

    def _restore(self, state: Any) -> None:
        self._rng.bit_generator.state = state

    def _step(self, token: int) -> NDArray[np.float32]:
        return self._next()

    def _next(self) -> NDArray[np.float32]:
        # A random bank row, circularly shifted by a random offset: 64 x 262k distinct rows
        # for the cost of one copy.
        row = self._bank[self._rng.integers(_BANK_ROWS)]
        shift = int(self._rng.integers(self._n_vocab))
        self._row[:shift] = row[self._n_vocab - shift:]
        self._row[shift:] = row[: self._n_vocab - shift]
        self._row += self._bias
        return self._row


class AdversarialRuntime(RandomLogitsRuntime):
    """Random logits plus a strong preference for whitespace and `"` tokens."""

    def __init__(self, tokenizer: llg.LLTokenizer, *, seed: int = 0, preference: float = 8.0,
                 **kwargs: object):
        self._preference = preference
        super().__init__(tokenizer, seed=seed, **kwargs)  # type: ignore[arg-type]

    def _make_bias(self, close_bias: float) -> NDArray[np.float32]:
        _, ws_quote, _ = token_classes(self._tokenizer)
        return (ws_quote * np.float32(self._preference)).astype(np.float32)
