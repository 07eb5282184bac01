"""What the HTTP layer needs from a source of text: the local engines or an upstream server.

Both stream text to a sink on the event loop and return a `Generated`. Options that do not
change per request (timeouts, the upstream's dialect, the turn's end marker) are given when a
backend is made; `generate` takes only what a request decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import llguidance as llg

from ..engine import Usage
from ..grammar import CompiledConstraint, GrammarCompiler
from .admission import Slot

# (text, the token ids it was decoded from): ids are empty where they are not known (upstream
# text checked by tokenizing it again), and may arrive before their text (a partial UTF-8
# character), which then comes with later ids
TextSink = Callable[[str, list[int]], None]


@dataclass
class GenParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class Generated:
    """What a backend generated: the text and how it ended, with the one `Usage` every
    result carries from the decoding loop to the edges."""

    text: str
    finish_reason: str  # "stop" | "length"
    usage: Usage
    # False only for upstream text that left the grammar: `text` is then the raw text, and
    # the caller decides whether it may be returned (allow_unenforced) or is a 502.
    enforced: bool = True
    not_enforced_reason: str | None = None
    token_ids: list[int] | None = None  # the generated tokens, where known
    stop_sequence: str | None = None  # the request's stop string generation ended at


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
                       sink: TextSink | None = None, *, slot: Slot | None = None) -> Generated:
        """Text in the language of `compiled`, streamed to `sink` as it is validated; a
        cancelled call stops its generation at the next token and frees its slot."""
        ...

    async def aclose(self) -> None: ...
