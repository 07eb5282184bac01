"""The one interface the decoding loop needs from a model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import llguidance as llg
import numpy as np
from numpy.typing import NDArray


@runtime_checkable
class Runtime(Protocol):
    """A model behind a vocabulary. Logits rows are float32 of length `n_vocab` and are only
    valid until the next call (runtimes may reuse the buffer)."""

    @property
    def tokenizer(self) -> llg.LLTokenizer: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def eos_token_ids(self) -> Sequence[int]: ...

    @property
    def n_ctx(self) -> int | None:
        """Tokens of prompt and completion together the model can hold; None: unbounded."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Prompt text to tokens, with the model's BOS where it wants one."""
        ...

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        """Evaluate a fresh prompt; return the logits for the next token."""
        ...

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        """Append tokens (one sampled, maybe forced ones) in one call; logits for the next."""
        ...

    @property
    def exact_batch(self) -> int | None:
        """The most tokens one call evaluates with the very numerics of one token a call
        (None: any number). Drafts are checked in calls of at most this many tokens, so
        that they never change an answer, not even at a near tie."""
        ...

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> NDArray[np.float32]:
        """Append `tokens` in one call; for each index i of `logits_at` (ascending), the logits
        for the token after `tokens[:i + 1]`, as the rows of a fresh array. A draft is checked
        this way: the sampled token and its drafts in one model call."""
        ...

    def rollback(self, n: int) -> None:
        """Forget the last `n` appended tokens (their KV cells), as if never evaluated."""
        ...
