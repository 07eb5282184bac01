"""Text from the local engine: every request's generation a sequence of one batch.

Requests are admitted up to the batch's size (`--max-concurrency`), more wait in the queue
(`--max-queue`), and the scheduler (`scheduler.py`) advances all running generations one
model step at a time. A cancelled request (client gone, deadline passed) ends its sequence
at the next step; its admission slot is freed only once the scheduler has let it go.
"""

from __future__ import annotations

import asyncio
import codecs
import threading
from concurrent.futures import Future
from typing import Any

import llguidance as llg

from ..decoding import Generation, kernels
from ..engine import Engine
from ..grammar import CompiledConstraint, GrammarCompiler
from ..runtimes.base import BatchRuntime
from .admission import Admission, Slot
from .backend import GenParams, Progress, TextSink
from .errors import APIError
from .metrics import Metrics
from .scheduler import Cancelled, Scheduler


class _Stop(Exception):
    """Raised inside a generation's loop to end it early."""


def batch_of(engine: Engine, size: int) -> BatchRuntime:
    """`size` sequences of the engine's runtime in one batch (the runtime's `batched`)."""
    batched = getattr(engine.runtime, "batched", None)
    if batched is None:
        raise TypeError(f"{type(engine.runtime).__name__} cannot run a batch (no `batched`)")
    batch: BatchRuntime = batched(size)
    return batch


class LocalBackend:
    """One engine and a batch of its runtime; up to the batch's size generations at once."""

    def __init__(self, engine: Engine, batch: BatchRuntime, model_id: str, metrics: Metrics,
                 *, max_queue: int, request_timeout: float):
        self.engine = engine
        self.batch = batch
        self.model_id = model_id
        self.metrics = metrics
        self.request_timeout = request_timeout
        self.tokenizer: llg.LLTokenizer = engine.runtime.tokenizer
        self.compiler: GrammarCompiler = engine.compiler
        self.scheduler = Scheduler(batch, metrics.batch_sequences.observe)
        metrics.watch_batch(lambda: (self.scheduler.model_seconds,
                                     self.scheduler.loop_seconds))
        self._admission = Admission(batch.max_sequences, max_queue, metrics)
        self._running: set[threading.Event] = set()  # cancel flags of running generations
        kernels.warm()  # numba compiles at the first call: here, not in the first top_p request

    @property
    def n_ctx(self) -> int | None:
        return self.batch.n_ctx

    def count_tokens(self, prompt: str) -> int:
        return len(self.engine.runtime.tokenize(prompt))

    async def admit(self) -> Slot:
        return await self._admission.acquire(self.request_timeout)

    async def generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                       sink: TextSink | None = None, *, slot: Slot | None = None,
                       progress: Progress | None = None) -> Generation:
        slot = slot or await self.admit()
        slot.taken = True
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        self._running.add(cancel)
        try:
            tokens = await asyncio.to_thread(self.engine.runtime.tokenize, prompt)
        except BaseException:
            self._running.discard(cancel)
            slot.release()
            raise
        stream = _TextStream(self.tokenizer, params.stop, sink, loop)

        stopped = cancel.is_set  # set when the caller's deadline cancels it (Deadline.running)

        def on_tokens(ids: list[int]) -> None:
            if stopped():
                raise _Stop
            stream.push(ids)

        def make(rollback: Any) -> Any:
            return self.engine.steps(
                tokens, compiled, self.batch, rollback, sampling=params.sampling,
                max_tokens=params.max_tokens, stop=params.stop,
                drafting="verify" if params.draft else "off", on_tokens=on_tokens,
                draft_room=self.scheduler.draft_room)

        def done(f: Future[Generation]) -> None:  # the slot is free once the sequence is
            self._running.discard(cancel)
            slot.release()

        cfut = self.scheduler.submit(make, tokens, stopped, budget=params.max_tokens,
                                     moved=progress.touch if progress is not None else None)
        cfut.add_done_callback(lambda f: loop.call_soon_threadsafe(done, f))
        try:
            wrapped = asyncio.wrap_future(cfut)
            # retrieved here too: a cancelled request no longer awaits it ("exception was
            # never retrieved" for the generation's expected _Stop)
            wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())
            result = await asyncio.shield(wrapped)
        except asyncio.CancelledError:
            cancel.set()
            raise
        except (_Stop, Cancelled):  # stopped for its caller, or the server shut down
            raise APIError(503, "the generation was stopped: the server is shutting down",
                           code="shutting_down") from None
        stream.flush(result.text)
        self.metrics.observe_constraint_ns(result.constraint_ns)
        u = result.usage
        for kind, n in (("forced", u.forced_tokens), ("draft", u.draft_tokens),
                        ("draft_accepted", u.draft_accepted)):
            self.metrics.tokens.labels(kind).inc(n)
        return result

    async def aclose(self) -> None:
        """On shutdown (after uvicorn's grace period): stop what still runs at its next
        step, so the process does not wait for whole generations."""
        for cancel in list(self._running):
            cancel.set()
        self.scheduler.close()
class _TextStream:
    """Token ids → text chunks for the sink, holding back what a stop string may still cut."""

    def __init__(self, tokenizer: llg.LLTokenizer, stop: list[str], sink: TextSink | None,
                 loop: asyncio.AbstractEventLoop):
        self.tok = tokenizer
        self.sink = sink
        self.loop = loop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.sent = 0
        self.pending: list[int] = []  # ids whose text is not sent yet

    def push(self, ids: list[int]) -> None:
        if self.sink is None:
            return
        self.pending += ids
        self.text += self.decoder.decode(self.tok.decode_bytes(ids))
        upto = len(self.text) - self.hold
        if upto > self.sent:
            self.loop.call_soon_threadsafe(self.sink, self.text[self.sent:upto], self.pending)
            self.sent, self.pending = upto, []

    def flush(self, final: str) -> None:
        """The rest of the final text (a stop string may have cut it) and of the ids."""
        if self.sink is not None and (len(final) > self.sent or self.pending):
            self.sink(final[self.sent:], self.pending)
