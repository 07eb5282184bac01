"""One generation request to the backend, and what every endpoint does around it: the token
budget, sampling parameters, watching the client, streaming, counting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request

from ..decoding import Generation, SamplingParams
from ..edges.common import draft_counts
from ..errors import NotEnforcedError
from ..formats.request import Sampling
from ..grammar import CompiledConstraint
from . import access_log
from .admission import Slot, token_budget
from .backend import Backend, GenParams, Progress, TextSink
from .errors import APIError
from .lifecycle import Deadline
from .metrics import Metrics


class Call:
    """One generation request to the backend."""

    def __init__(self, backend: Backend, prompt: str, compiled: CompiledConstraint,
                 params: GenParams, allow_unenforced: bool, deadline: Deadline):
        self.backend, self.prompt, self.compiled, self.params = backend, prompt, compiled, params
        self.allow_unenforced = allow_unenforced
        self.deadline = deadline  # the request's, from its arrival; and the server's shutdown
        self.slot: Slot | None = None

    async def admit(self) -> Slot:
        """Wait for a generation slot. A stream takes it before its 200, so that a full
        queue is a 429, a timeout a 504 and a shutdown a 503, not an error event."""
        if self.slot is None:
            self.slot = await self.deadline.queued(self.backend.admit(), lost=Slot.release)
        return self.slot

    async def run(self, sink: Any) -> Generation:
        record = access_log.current()
        if record is not None:
            record.model = self.backend.model_id
            if sink is not None:  # a stream's (a non-streamed call stays without one)
                sink = _first_token_noted(record, sink)
        try:
            slot = await self.admit()
            progress = Progress()
            gen = await self.deadline.running(self.backend.generate(
                self.prompt, self.compiled, self.params, sink, slot=slot, progress=progress),
                progress)
        finally:
            if self.slot is not None and not self.slot.taken:  # no generation ever took it
                self.slot.release()
        if record is not None:
            u = gen.usage
            record.prompt_tokens, record.completion_tokens = u.prompt_tokens, u.completion_tokens
            record.draft_tokens, record.draft_accepted = u.draft_tokens, u.draft_accepted
            record.finish_reason = gen.finish_reason
        if gen.outside_grammar is not None and not self.allow_unenforced:
            raise NotEnforcedError(gen.outside_grammar)
        return gen


def _first_token_noted(record: access_log.RequestRecord, sink: TextSink) -> TextSink:
    """`sink`, noting when the first text came (the sink is called on the event loop, outside
    the request's context: the record is held here)."""
    def noted(text: str, ids: list[int]) -> None:
        if record.first_token is None:
            record.first_token = time.monotonic()
        sink(text, ids)

    return noted


async def run_watching(request: Request, call: Call, sink: TextSink | None = None
                       ) -> Generation:
    """Run a non-streamed generation (its text also to `sink`, where given); stop it if the
    client goes away meanwhile."""
    task = asyncio.create_task(call.run(sink))
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise APIError(499, "client closed the request", code="client_closed")


async def generate_streamed(call: Call
                            ) -> AsyncGenerator[tuple[str, list[int]] | Generation, None]:
    """(text, token ids) pieces as they come, then the Generation result; the generation's
    error on failure."""
    queue: asyncio.Queue[tuple[str, list[int]] | None] = asyncio.Queue()
    task = asyncio.create_task(call.run(lambda text, ids: queue.put_nowait((text, ids))))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (piece := await queue.get()) is not None:
            yield piece
        yield task.result()
    finally:
        if not task.done():  # the client went away: stop the generation
            task.cancel()


def budget(backend: Backend, prompt_tokens: int, asked: int | None, default: int, limit: int,
           param: str) -> int:
    """The output budget served (see `token_budget`)."""
    return token_budget(prompt_tokens, asked, default=default, limit=limit, n_ctx=backend.n_ctx,
                        param=param)


def gen_params(max_tokens: int, s: Sampling, draft: bool) -> GenParams:
    """A request's sampling (as its edge read it, `edges.common.sampling`) for a backend."""
    return GenParams(max_tokens, SamplingParams(
        temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p, seed=s.seed),
        list(s.stop), draft)


def usage(gen: Generation) -> dict[str, int]:
    u = gen.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens, **draft_counts(u)}


def count(metrics: Metrics, gen: Generation) -> None:
    metrics.tokens.labels("prompt").inc(gen.usage.prompt_tokens)
    metrics.tokens.labels("completion").inc(gen.usage.completion_tokens)
