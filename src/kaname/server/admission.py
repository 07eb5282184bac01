"""Admission: a bounded queue in front of N generation slots, and the token budget of a request.

Beyond `max_queue` waiting requests the answer is 429; a request whose prompt and completion
cannot fit the model's context is a 400 before it waits at all.
"""

from __future__ import annotations

import asyncio

from ..engine import check_context
from ..errors import ContextLengthError
from .errors import APIError
from .metrics import Metrics


class Slot:
    """One admitted generation. Released once, by whoever ends up owning it: the generation,
    or the response if the generation never started."""

    def __init__(self, admission: Admission):
        self._admission = admission
        self.taken = False  # a generation owns it and will release it
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._admission.release()


class Admission:
    """The check and the count happen in one synchronous step, so simultaneous arrivals cannot
    all slip past the queue limit."""

    def __init__(self, slots: int, max_queue: int, metrics: Metrics):
        self.slots = slots
        self.max_queue = max_queue
        self.metrics = metrics
        self.waiting = 0
        self.running = 0
        self._sem: asyncio.Semaphore | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        return self._sem

    async def acquire(self, timeout: float) -> Slot:
        if self.waiting + self.running >= self.slots + self.max_queue:
            raise APIError(429, f"server busy: {self.running} generations running and "
                                f"{self.waiting} queued (limit {self.max_queue}); retry later",
                           code="queue_full")
        self.waiting += 1
        self.metrics.queue_depth.set(self.waiting)
        try:
            await asyncio.wait_for(self._semaphore().acquire(), timeout)
        except TimeoutError:
            raise APIError(504, f"timed out after {timeout:.0f} s waiting for a generation "
                                "slot", code="timeout") from None
        finally:
            self.waiting -= 1
            self.metrics.queue_depth.set(self.waiting)
        self.running += 1
        self.metrics.active.inc()
        return Slot(self)

    def release(self) -> None:
        self.running -= 1
        self.metrics.active.dec()
        self._semaphore().release()


def token_budget(prompt_tokens: int | None, asked: int | None, *, default: int, limit: int,
                 n_ctx: int | None, param: str) -> int:
    """The output budget a request is served: what it asked for (unset: `default`), within
    the server's `limit` and what is left of the context. A larger ask is served up to what
    fits (its finish then says "length" if it is reached, and the report gives both figures),
    not refused: clients ask 32k-128k whatever the model. A prompt that leaves no room for
    one token is a ContextLengthError naming `param` (messages / prompt)."""
    value = min(asked if asked is not None else default, limit)
    if n_ctx is None or prompt_tokens is None:
        return max(1, value)
    try:
        check_context(prompt_tokens, 1, n_ctx)
    except ContextLengthError as e:
        e.param = param
        raise
    return max(1, min(value, n_ctx - prompt_tokens))
