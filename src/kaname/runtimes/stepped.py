"""`evaluate` and `rollback` for the test runtimes, whose logits come from a state advanced one
token at a time: each token's state is kept, so rolling back restores it exactly and a token
gets the same logits whether it came alone or with drafts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray


class Stepped:
    """Mixin: a runtime defines `_snapshot`, `_restore` and `_step` (advance by one token,
    return the next logits row) and calls `_reset_steps` when it starts a prompt."""

    _steps: list[Any]
    exact_batch: int | None = None  # a row depends on the state alone, not on the batch

    def _snapshot(self) -> Any:
        raise NotImplementedError

    def _restore(self, state: Any) -> None:
        raise NotImplementedError

    def _step(self, token: int) -> NDArray[np.float32]:
        raise NotImplementedError

    def _reset_steps(self) -> None:
        self._steps = []

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> NDArray[np.float32]:
        where = {at: j for j, at in enumerate(logits_at)}
        rows: NDArray[np.float32] | None = None
        for i, token in enumerate(tokens):
            self._steps.append(self._snapshot())
            row = self._step(token)
            if i in where:
                if rows is None:
                    rows = np.empty((len(logits_at), len(row)), dtype=np.float32)
                rows[where[i]] = row
        return rows if rows is not None else np.empty((0, 0), dtype=np.float32)

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        if n > len(self._steps):
            raise ValueError(f"cannot roll back {n} tokens: {len(self._steps)} appended")
        self._restore(self._steps[-n])
        del self._steps[-n:]
