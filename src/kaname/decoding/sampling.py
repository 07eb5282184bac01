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
      the distribution, so these always take the full mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

from .masks import MaskBuffer


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
        if not 0 <= self.min_p < 1:
            raise ValueError("min_p must be in [0, 1)")

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

    def allowed(self, matcher: llg.LLMatcher, token: int) -> bool:
        if token in self.eos:
            return matcher.is_accepting()
        return matcher.validate_tokens([token]) == 1

    def pick(self, logits: NDArray[np.float32], matcher: llg.LLMatcher) -> int:
        p = self.params
        if p.greedy:
            if self.lazy:
                token = int(np.argmax(logits))
                if self.allowed(matcher, token):
                    self.stats.lazy_hits += 1
                    return token
            return self._greedy_masked(logits, matcher)
        if self.lazy:
            z = logits.astype(np.float64)
            # shift before dividing: a tiny temperature must not overflow to inf - inf = NaN
            weights = np.exp((z - z.max()) / p.temperature)
            cdf = np.cumsum(weights)
            for _ in range(self.REJECTION_TRIES):
                token = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
                token = min(token, len(cdf) - 1)
                if self.allowed(matcher, token):
                    self.stats.lazy_hits += 1
                    return token
        return self._sample_masked(logits, matcher)

    def pick_unconstrained(self, logits: NDArray[np.float32]) -> int:
        """The same choice rule with no grammar: the baseline the constraint is measured on."""
        if self.params.greedy:
            return int(np.argmax(logits))
        return self._sample(logits.astype(np.float64))

    def _greedy_masked(self, logits: NDArray[np.float32], matcher: llg.LLMatcher) -> int:
        self._fill(matcher)
        ids = self.masks.allowed_ids()
        if ids is not None:
            self.stats.sparse_masks += 1
            if len(ids) == 0:
                raise dead_end(matcher)
            return int(ids[np.argmax(logits[ids])])
        return int(np.argmax(self.masks.apply_dense(logits)))

    def _sample_masked(self, logits: NDArray[np.float32], matcher: llg.LLMatcher) -> int:
        self._fill(matcher)
        ids = self.masks.allowed_ids()
        if ids is None:
            masked = self.masks.apply_dense(logits)
            ids = np.flatnonzero(masked > -np.inf)
        else:
            self.stats.sparse_masks += 1
        if len(ids) == 0:
            raise dead_end(matcher)
        return int(ids[self._sample(logits[ids].astype(np.float64))])

    def _sample(self, z: NDArray[np.float64]) -> int:
        """Sample an index of `z` (allowed logits) with temperature / top-k / top-p / min-p."""
        p = self.params
        probs = np.exp((z - z.max()) / p.temperature)
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        keep = len(order)
        if p.top_k:
            keep = min(keep, p.top_k)
        if p.top_p < 1:
            # smallest prefix whose mass reaches top_p
            keep = min(keep, int(np.searchsorted(np.cumsum(probs[order]), p.top_p)) + 1)
        if p.min_p > 0:
            keep = min(keep, max(1, int(np.sum(probs >= p.min_p * probs[order[0]]))))
        chosen = order[:keep]
        w = probs[chosen]
        return int(chosen[self.rng.choice(len(chosen), p=w / w.sum())])

    def _fill(self, matcher: llg.LLMatcher) -> None:
        self.stats.full_masks += 1
        self.masks.fill(matcher)
        if matcher.is_error():
            raise dead_end(matcher)


def dead_end(matcher: llg.LLMatcher) -> Exception:
    from ..errors import KanameError
    from ..grammar.compiler import limit_error

    message = matcher.get_error().split("\n<")[0].strip()  # drop the state dump
    too_large = limit_error(message, "grammar")
    if too_large is not None:
        return too_large
    return KanameError(f"the grammar failed while decoding (internal error): "
                       f"{message or 'no token allowed'}")
