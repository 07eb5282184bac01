"""The one interface the decoding loop needs from a model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import llguidance as llg
import numpy as np
from numpy.typing import NDArray


class ModelFacts(Protocol):
    """What the decoding loop reads of a model besides its calls: a single runtime's, and a
    batch's (the same model's) alike."""

    @property
    def tokenizer(self) -> llg.LLTokenizer: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def eos_token_ids(self) -> Sequence[int]: ...

    @property
    def n_ctx(self) -> int | None:
        """Tokens of prompt and completion together a sequence can hold; None: unbounded."""
        ...

    @property
    def exact_batch(self) -> int | None:
        """The most tokens one call evaluates with the very numerics of one token a call
        (None: any number). Drafts are checked in calls of at most this many tokens, so
        that they never change an answer, not even at a near tie."""
        ...

    @property
    def exact_cells(self) -> int | None:
        """How far into a sequence `exact_batch` holds: a call that would reach past this many
        KV cells of its sequence takes one token (None: everywhere). llama.cpp computes
        attention over a longer cache otherwise for a call of several tokens than for one."""
        ...

    @property
    def answers_only(self) -> bool:
        """Whether `evaluate` (a batch's `step`) reads `only` (see `Only`); where it does not,
        the loop does not work out the few ids it would ask for."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Prompt text to tokens, with the model's BOS where it wants one."""
        ...


@runtime_checkable
class Runtime(ModelFacts, Protocol):
    """A model behind a vocabulary. Logits rows are float32 of length `n_vocab` and are only
    valid until the next call (runtimes may reuse the buffer)."""

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        """Evaluate a fresh prompt; return the logits for the next token."""
        ...

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        """Append tokens (one sampled, maybe forced ones) in one call; logits for the next."""
        ...

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int],
                 only: Only = None) -> Rows:
        """Append `tokens` in one call; for each index i of `logits_at` (ascending), the logits
        for the token after `tokens[:i + 1]`, as the rows of a fresh array, or of `Rows` that
        computes each when it is read. A draft is checked this way: the sampled token and its
        drafts in one model call. `only`: see `Only`."""
        ...

    def rollback(self, n: int) -> None:
        """Forget the last `n` appended tokens (their KV cells), as if never evaluated."""
        ...


class Rows(Protocol):
    """A call's logits rows, by their index in `logits_at`. An array is one; a runtime may
    instead compute a row only when it is read (`LlamaCppRuntime`: from the final hidden
    state), so that a caller reads only the rows it needs (a draft's, up to its first rejected
    token). A row read stays valid after the runtime's next call."""

    def __len__(self) -> int: ...

    def __getitem__(self, k: int, /) -> NDArray[np.float32]: ...


# Per row of `logits_at`, None or the token ids the caller will take the argmax of and read
# nothing else of that row: the runtime may then answer with a row whose argmax over those ids
# is the full row's, their logits within float rounding of it and -inf elsewhere (the full
# row is always a valid answer). Greedy decoding asks it where the grammar allows a handful
# of tokens, which a runtime can score without its whole output layer (output_layer.py).
Only = Sequence[NDArray[np.int64] | None] | None


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What one sequence asks of the model at one step: append `tokens` and return the logits
    rows after `tokens[:i + 1]` for each i of `logits_at`. A `fresh` call starts the sequence
    over on the prompt `tokens` (a runtime may keep a common prefix cached) and returns the
    one row after it."""

    tokens: Sequence[int]
    logits_at: Sequence[int]
    fresh: bool = False
    only: Only = None


@runtime_checkable
class BatchRuntime(ModelFacts, Protocol):
    """Many sequences of one model, each in a slot (0 .. max_sequences-1), evaluated together:
    one `step` makes, for every sequence that takes part, the call it asked for. The facts
    (`tokenizer`, `n_vocab`, `eos_token_ids`, `exact_batch`, `tokenize`) are the single
    runtime's; `n_ctx` is per sequence."""

    @property
    def max_sequences(self) -> int: ...

    @property
    def capacity(self) -> int | None:
        """Tokens the sequences' caches hold in all (KV cells); None: no bound."""
        ...

    def step(self, calls: Sequence[tuple[int, ModelCall]]) -> list[Rows | None]:
        """Make each (slot, call) in one model step; per call its logits rows (fresh arrays,
        or `Rows` computed when read), or None for a fresh call whose prompt is not all in
        yet (a long prompt is taken a chunk a step, so that it does not stall the others):
        send it again."""
        ...

    def rollback(self, slot: int, n: int) -> None:
        """Forget the last `n` tokens of the sequence in `slot`."""
        ...

    def release(self, slot: int) -> None:
        """The sequence in `slot` is done (its cache may be kept for a prompt that shares
        its prefix)."""
        ...

    def reuse(self, slot: int, prompt: Sequence[int]) -> int:
        """How many tokens of `prompt` the free `slot` holds already (0 where nothing is
        kept): the scheduler gives a new sequence the slot that saves the most."""
        ...

    def held(self, slot: int) -> int:
        """Tokens the free `slot` still holds in its cache (counted against `capacity`)."""
        ...

    def forget(self, slot: int) -> None:
        """Drop what the free `slot` holds, to make room."""
        ...


class OverRuntime:
    """A batch's facts, read from the single runtime it runs (`self.runtime`)."""

    runtime: Runtime

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        return self.runtime.tokenizer

    @property
    def n_vocab(self) -> int:
        return self.runtime.n_vocab

    @property
    def eos_token_ids(self) -> Sequence[int]:
        return self.runtime.eos_token_ids

    def tokenize(self, text: str) -> list[int]:
        return self.runtime.tokenize(text)
