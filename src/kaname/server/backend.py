"""What the HTTP layer needs from a source of text: the local engines or an upstream server.

Both stream text to a sink on the event loop and return a `Generation`. Options that do not
change per request (timeouts, the upstream's dialect, the turn's end marker) are given when a
backend is made; `generate` takes only what a request decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import llguidance as llg

from ..decoding import Generation, SamplingParams
from ..grammar import CompiledConstraint, GrammarCompiler
from .admission import Slot

# (text, the token ids it was decoded from): ids are empty where they are not known (upstream
# text checked by tokenizing it again), and may arrive before their text (a partial UTF-8
# character), which then comes with later ids
TextSink = Callable[[str, list[int]], None]


@dataclass
class GenParams:
    """What a request decides of its generation: how to pick tokens, how many, where to stop."""

    max_tokens: int
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0))
    stop: list[str] = field(default_factory=list)
    draft: bool = True  # local models: drafts the model verifies (upstreams decide their own)


class Progress:
    """When a running generation last moved: a model step that carried it (a chunk of its
    prompt read, or tokens), or an upstream's chunk. `--request-timeout` counts from there
    while it runs, so a long prompt being read or a long answer being written is never cut
    (lifecycle.py's `Deadline.running`). Touched from any thread."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = time.monotonic()

    def touch(self) -> None:
        self.at = time.monotonic()

    def idle(self) -> float:
        """Seconds since it last moved."""
        return time.monotonic() - self.at


class Backend(Protocol):
    model_id: str
    tokenizer: llg.LLTokenizer  # the vocabulary grammars are compiled for
    compiler: GrammarCompiler

    @property
    def n_ctx(self) -> int | None:
        """The model's context window in tokens; None where it is not known here."""
        ...

    def count_tokens(self, prompt: str) -> int:
        """Prompt tokens as the model will see them (its BOS included)."""
        ...

    async def admit(self) -> Slot:
        """Wait for a generation slot (429 when the queue is full, 504 on timeout)."""
        ...

    async def generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                       sink: TextSink | None = None, *, slot: Slot | None = None,
                       progress: Progress | None = None) -> Generation:
        """Text in the language of `compiled`, streamed to `sink` as it is validated, touching
        `progress` as it moves; a cancelled call stops its generation at the next token and
        frees its slot. It has no deadline of its own: the caller's decides."""
        ...

    async def aclose(self) -> None: ...
