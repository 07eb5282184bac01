"""Text from the local engines: one generation per engine replica, off the event loop.

A cancelled request (client gone, deadline passed) stops its generation at the next token;
the slot is freed only once the generation thread has stopped.
"""

from __future__ import annotations

import asyncio
import codecs
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import llguidance as llg

from ..decoding import Generation
from ..engine import Engine
from ..grammar import CompiledConstraint, GrammarCompiler
from .admission import Admission, Slot
from .backend import GenParams, TextSink
from .errors import APIError
from .metrics import Metrics


class _Stop(Exception):
    """Raised inside the generation thread to end it early."""


class LocalBackend:
    """Engines sharing one vocabulary and compile cache; one generation per engine at once."""

    def __init__(self, engines: list[Engine], model_id: str, metrics: Metrics, *,
                 max_queue: int, request_timeout: float):
        self.engines = engines
        self.model_id = model_id
        self.metrics = metrics
        self.request_timeout = request_timeout
        self.tokenizer: llg.LLTokenizer = engines[0].runtime.tokenizer
        self.compiler: GrammarCompiler = engines[0].compiler
        self._free = list(engines)
        self._admission = Admission(len(engines), max_queue, metrics)
        self._executor = ThreadPoolExecutor(max_workers=len(engines),
                                            thread_name_prefix="kaname-gen")
        self._running: set[threading.Event] = set()  # cancel flags of running generations

    @property
    def n_ctx(self) -> int | None:
        return self.engines[0].runtime.n_ctx

    def count_tokens(self, prompt: str) -> int:
        return len(self.engines[0].runtime.tokenize(prompt))

    async def admit(self) -> Slot:
        return await self._admission.acquire(self.request_timeout)

    async def generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                       sink: TextSink | None = None, *, slot: Slot | None = None
                       ) -> Generation:
        deadline = time.monotonic() + self.request_timeout
        slot = slot or await self.admit()
        slot.taken = True
        engine = self._free.pop()
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        self._running.add(cancel)
        stream = _TextStream(engine.runtime.tokenizer, params.stop, sink, loop)

        def on_tokens(ids: list[int]) -> None:
            if cancel.is_set() or time.monotonic() > deadline:
                raise _Stop
            stream.push(ids)

        def work() -> Generation:
            s = params.sampling
            return engine.generate(prompt, compiled, max_tokens=params.max_tokens,
                                   temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                   min_p=s.min_p, seed=s.seed, stop=params.stop,
                                   drafting="verify" if params.draft else "off",
                                   on_tokens=on_tokens)

        def done(f: Any) -> None:  # the slot is free only once the thread has stopped
            self._running.discard(cancel)
            self._free.append(engine)
            slot.release()
            if not f.cancelled():
                f.exception()  # retrieved: a cancelled generation's _Stop is expected

        cfut = self._executor.submit(work)
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
        except _Stop:
            raise APIError(504, f"generation timed out after {self.request_timeout:.0f} s",
                           code="timeout") from None
        stream.flush(result.text)
        self.metrics.observe_constraint_ns(result.constraint_ns)
        u = result.usage
        for kind, n in (("forced", u.forced_tokens), ("draft", u.draft_tokens),
                        ("draft_accepted", u.draft_accepted)):
            self.metrics.tokens.labels(kind).inc(n)
        return result

    async def aclose(self) -> None:
        """On shutdown (after uvicorn's grace period): stop what still runs at its next
        token, so the process does not wait for whole generations."""
        for cancel in list(self._running):
            cancel.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


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
