"""Picking the next token under a grammar, the cheap way when it is exact.

Lazy masking: a real model's own pick is usually allowed by the grammar (Gemma 3 270M greedy:
~90% of picks over four schemas, see docs/benchmarks.md), and checking one token costs
microseconds while a full mask costs far more to compute and apply. So:
  greedy (temperature 0): argmax of the raw logits; if the grammar rejects it, argmax over the
      allowed ids. Exact: the allowed argmax is the same either way.
  plain temperature: draw from the raw distribution until an allowed token comes (rejection
      sampling, bounded tries), else draw from the masked distribution. Exact: rejection
      sampling from p yields p restricted to the allowed set, renormalised.
  top-k / top-p / min-p: users expect the mask *before* truncation, and truncating first changes
      the distribution, so these always take the full mask (computing one costs tens of µs; it
      is never applied as a masked copy of the row, see tempered.py).
Sampling draws from a `Tempered` row: one float32 exp per token and block sums, then µs per
draw (top_k and min_p alone skip that: they weigh only the tokens they keep); truncation never
sorts the vocabulary (tempered.py says how, and why it is exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..grammar.matcher import Matcher
from .masks import MaskBuffer
from .tempered import Allows, Tempered


@dataclass(frozen=True)
class SamplingParams:
    """How to choose among allowed tokens. temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def lazy_is_exact(self) -> bool:
        """Whether checking the raw pick first gives the same distribution as masking first."""
        return self.greedy or (self.top_p >= 1 and self.top_k == 0 and self.min_p == 0)


@dataclass
class PickStats:
    lazy_hits: int = 0
    full_masks: int = 0
    sparse_masks: int = 0


class TokenPicker:
    """Chooses each next token for one generation; `lazy=False` forces the full-mask path."""

    REJECTION_TRIES = 4

    def __init__(self, params: SamplingParams, masks: MaskBuffer, eos: frozenset[int], *,
                 lazy: bool = True):
        self.params = params
        self.masks = masks
        self.eos = eos
        self.lazy = lazy and params.lazy_is_exact
        self.rng = np.random.default_rng(params.seed)
        self.stats = PickStats()
        self.row = Tempered(1 if params.greedy else masks.n_vocab)
        # top_k and min_p alone weigh only the tokens they keep: the row is never tempered
        self.weigh = params.top_p < 1 or not (params.top_k or params.min_p > 0)

    def allowed(self, matcher: Matcher, token: int) -> bool:
        if token in self.eos:
            return matcher.is_accepting()
        return matcher.validate_tokens([token]) == 1

    def pick(self, logits: NDArray[np.float32], matcher: Matcher) -> int:
        p = self.params
        if p.greedy:
            if self.lazy:
                token = int(np.argmax(logits))
                if self.allowed(matcher, token):
                    self.stats.lazy_hits += 1
                    return token
            return self._greedy_masked(logits, matcher)
        row = self.row
        row.set(logits, p.temperature, weigh=self.weigh)
        if self.lazy:
            for _ in range(self.REJECTION_TRIES):
                token = row.draw(self.rng)
                if self.allowed(matcher, token):
                    self.stats.lazy_hits += 1
                    return token
        return self._sample_masked(logits, matcher)

    def pick_unconstrained(self, logits: NDArray[np.float32]) -> int:
        """The same choice rule with no grammar: the baseline the constraint is measured on."""
        if self.params.greedy:
            return int(np.argmax(logits))
        self.row.set(logits, self.params.temperature, weigh=self.weigh)
        return self._draw(self.row)

    def _greedy_masked(self, logits: NDArray[np.float32], matcher: Matcher) -> int:
        self._fill(matcher)
        ids = self.masks.allowed_ids()
        if ids is not None:
            self.stats.sparse_masks += 1
            if len(ids) == 0:
                raise dead_end(matcher)
            return int(ids[np.argmax(logits[ids])])
        return int(np.argmax(self.masks.apply_dense(logits)))

    def _sample_masked(self, logits: NDArray[np.float32], matcher: Matcher) -> int:
        """A draw from the masked (then truncated) distribution; `self.row` holds the row."""
        self._fill(matcher)
        p = self.params
        refused = self.masks.known_refused()
        if refused is None:
            ids = self.masks.allowed_ids()
            if ids is not None:
                self.stats.sparse_masks += 1
                if len(ids) == 0:
                    raise dead_end(matcher)
                sub = Tempered(len(ids))
                sub.set(logits[ids], p.temperature, weigh=self.weigh)
                return int(ids[self._draw(sub)])
        row, allows = self.row, self.masks.allows
        if p.top_p >= 1 and (p.top_k or p.min_p > 0):
            # top_k and min_p read the top of the row alone: the mask is asked about those
            # tokens, and the row is never masked
            if refused is None and p.min_p > 0:  # min_p's top allowed token (free text's
                refused = self.masks.refused_ids()  # are known once its mask repeats)
            kept = row.prefix(p.top_k, p.min_p, allows, ranked=False, refused=refused)
            if len(kept) == 0:
                raise dead_end(matcher)
            return row.draw_among(kept, self.rng)
        if refused is None:
            refused = self.masks.refused_ids()
        if refused is not None:
            row.refuse(refused)
        else:
            row.keep(self.masks.allowed_bits())
        if row.underflowed():
            # The allowed tokens lie so far below the row's maximum that their weights
            # underflowed: temper the allowed logits alone (rare, so the slow masked copy).
            masked = self.masks.apply_dense(logits)
            if not np.isfinite(masked.max()):
                raise dead_end(matcher)
            row.set(masked, p.temperature)
        return self._draw(row, allows)

    def _draw(self, row: Tempered, allows: Allows | None = None) -> int:
        """Draw from `row` (masked where `allows` says) with top-k / top-p / min-p."""
        p = self.params
        if p.top_k or p.min_p > 0:
            kept = row.prefix(p.top_k, p.min_p, allows, ranked=p.top_p < 1)
            if p.top_p < 1:
                kept = row.cut_top_p(kept, p.top_p)
            return row.draw_among(kept, self.rng)
        if p.top_p < 1:
            return row.draw_top_p(p.top_p, self.rng, allows)
        return row.draw(self.rng)

    def _fill(self, matcher: Matcher) -> None:
        self.stats.full_masks += 1
        self.masks.fill(matcher)
        if matcher.is_error():
            raise dead_end(matcher)


def dead_end(matcher: Matcher) -> Exception:
    from ..errors import KanameError
    from ..grammar.compiler import limit_error

    message = matcher.error()
    too_large = limit_error(message, "grammar")
    if too_large is not None:
        return too_large
    return KanameError(f"the grammar failed while decoding (internal error): "
                       f"{message or 'no token allowed'}")
