"""`evaluate` and `rollback` for the test runtimes, whose logits come from a state advanced one
token at a time: each token's state is kept, so rolling back restores it exactly and a token
gets the same logits whether it came alone or with drafts. `batched` runs many sequences on
one such runtime by switching each one's state in for its calls, so a sequence gets the same
rows batched as alone (the same seeds, the same outputs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .base import ModelCall, Only, OverRuntime


class Stepped:
    """Mixin: a runtime defines `_snapshot`, `_restore` and `_step` (advance by one token,
    return the next logits row), `start` and `tokenize`, and calls `_reset_steps` when it
    starts a prompt; `_context` / `_set_context` hold what `start` chose besides that."""

    _steps: list[Any]
    exact_batch: int | None = None  # a row depends on the state alone, not on the batch
    exact_cells: int | None = None
    # `only` rows are -inf outside the ids asked for: a loop that asked too narrowly would
    # pick otherwise (tests compare with full rows)
    answers_only = True

    def _snapshot(self) -> Any:
        raise NotImplementedError

    def _restore(self, state: Any) -> None:
        raise NotImplementedError

    def _step(self, token: int) -> NDArray[np.float32]:
        raise NotImplementedError

    def _context(self) -> Any:
        return None

    def _set_context(self, context: Any) -> None:
        pass

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        raise NotImplementedError

    def _reset_steps(self) -> None:
        self._steps = []

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int],
                 only: Only = None) -> NDArray[np.float32]:
        """`only` is answered as narrowly as it allows (-inf outside the ids), so that the
        tests see whether the loop asks for it only where it reads nothing else."""
        where = {at: j for j, at in enumerate(logits_at)}
        rows: NDArray[np.float32] | None = None
        for i, token in enumerate(tokens):
            self._steps.append(self._snapshot())
            row = self._step(token)
            if i in where:
                if rows is None:
                    rows = np.empty((len(logits_at), len(row)), dtype=np.float32)
                ids = only[where[i]] if only is not None else None
                if ids is None:
                    rows[where[i]] = row
                else:
                    rows[where[i]] = -np.inf
                    rows[where[i], ids] = row[ids]
        return rows if rows is not None else np.empty((0, 0), dtype=np.float32)

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        if n > len(self._steps):
            raise ValueError(f"cannot roll back {n} tokens: {len(self._steps)} appended")
        self._restore(self._steps[-n])
        del self._steps[-n:]

    def batched(self, max_sequences: int) -> StepBatch:
        return StepBatch(self, max_sequences)


class StepBatch(OverRuntime):
    """A `BatchRuntime` over one stepped runtime: each slot keeps its whole state (the step
    state, the steps taken, what `start` chose), switched in for its calls."""

    runtime: Any  # a Runtime that is Stepped

    def __init__(self, runtime: Stepped, max_sequences: int):
        if max_sequences < 1:
            raise ValueError(f"max_sequences must be >= 1, got {max_sequences}")
        self.runtime = runtime
        self.max_sequences = max_sequences
        self.exact_batch = runtime.exact_batch
        self.exact_cells = runtime.exact_cells
        self.answers_only = runtime.answers_only
        self.capacity: int | None = None  # no KV cells: any number of tokens
        self._states: dict[int, tuple[Any, list[Any], Any]] = {}

    @property
    def n_ctx(self) -> int | None:
        return self.runtime.n_ctx

    def step(self, calls: Sequence[tuple[int, ModelCall]]
             ) -> list[NDArray[np.float32] | None]:
        out: list[NDArray[np.float32] | None] = []
        for slot, call in calls:
            if call.fresh:
                rows = self.runtime.start(call.tokens)[None].copy()
            else:
                self._switch_in(slot)
                rows = self.runtime.evaluate(call.tokens, call.logits_at, call.only)
            self._save(slot)
            out.append(rows)
        return out

    def rollback(self, slot: int, n: int) -> None:
        self._switch_in(slot)
        self.runtime.rollback(n)
        self._save(slot)

    def release(self, slot: int) -> None:
        self._states.pop(slot, None)

    def reuse(self, slot: int, prompt: Sequence[int]) -> int:
        return 0  # nothing to keep: a test runtime's start costs nothing

    def held(self, slot: int) -> int:
        return 0

    def forget(self, slot: int) -> None:
        pass

    def _switch_in(self, slot: int) -> None:
        r = self.runtime
        snapshot, r._steps, context = self._states[slot]
        r._restore(snapshot)
        r._set_context(context)

    def _save(self, slot: int) -> None:
        r = self.runtime
        self._states[slot] = (r._snapshot(), r._steps, r._context())
