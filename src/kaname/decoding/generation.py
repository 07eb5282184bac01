"""One generation's result, the same object from the decoding loop to the edges.

The loop fills what it saw (text, tokens, how it ended, usage, timings); `Engine.generate` adds
what the grammar guaranteed and the post-check; an upstream backend makes one from the text it
replayed. The turn pipeline wraps it, parsed, in a `TurnResult`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .sampling import PickStats

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # tokens the grammar forced (with drafts: forced drafts the model accepted)
    forced_tokens: int = 0
    draft_tokens: int = 0  # proposed as drafts (forced bytes, prompt n-grams) and checked
    draft_accepted: int = 0  # of those, chosen by the model and kept


@dataclass(frozen=True)
class Enforced:
    """What the grammar guaranteed for this result: nothing is relaxed silently."""

    constraint: str
    grammar_hash: str
    strict: bool | None
    not_enforced: list[dict[str, str]]
    caps: dict[str, Any]


@dataclass
class Generation:
    text: str
    finish_reason: FinishReason
    usage: Usage
    # the generated token ids; None where they are not known (upstream text without ids)
    tokens: list[int] | None = field(default=None, repr=False)
    stop_sequence: str | None = None  # the request's stop string generation ended at
    # Why the text left the grammar (upstream text only; None: it did not). `text` is then the
    # raw text, and the caller decides whether it may be returned (allow_unenforced) or is a 502.
    outside_grammar: str | None = None
    # Set by Engine.generate: what the grammar guaranteed, and the jsonschema post-check for
    # JSON constraints (False whenever the output was cut short; None for other constraints).
    enforced: Enforced | None = None
    valid: bool | None = None
    parsed: Any = None
    stats: PickStats = field(default_factory=PickStats)
    # ns spent on the constraint per sampled token (pick + commit + forced), model excluded
    constraint_ns: list[int] = field(default_factory=list, repr=False)
    model_ns: int = 0  # in the runtime's calls
    first_token_ns: int = 0  # from the start to the first committed token

    @property
    def complete(self) -> bool:
        return self.finish_reason == "stop"

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "usage": asdict(self.usage),
            "valid": self.valid,
            "enforced": None if self.enforced is None else asdict(self.enforced),
            "stats": asdict(self.stats),
        }
