"""Continuous batching: the local model's generations advance together, one model step each.

One thread owns the batch runtime. Each step it admits the sequences waiting (at most the
batch's size, each in the free slot whose cache holds the longest prefix of its prompt), then
makes the pending model call of every running sequence in one `BatchRuntime.step`, and sends
each its rows: the sequence's own decoding loop (`decoding.Steps`: its matcher, sampler, stop
rules, budget and streaming callback) picks, drafts and asks for its next call. A sequence
that finishes, fails or is cancelled frees its slot at once.

The constraint work per step stays cheap: the lazy check (the model's pick checked against
the grammar first, a full mask only on a miss) runs in each loop; only the model call is
shared. Between steps the loops run on `workers` threads (llguidance's mask computation and
numpy's work on a logits row release the GIL), so one sequence's full mask does not wait for
another's. A sequence's rows do not depend on the others (each has its own KV stream), except
through the kernels a bigger call takes (`LlamaCppBatch`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..decoding import Generation
from ..decoding.loop import Steps
from ..runtimes.base import BatchRuntime, ModelCall, Rows

# Builds a sequence's steps once its slot is known: (slot's rollback) -> Steps
MakeSteps = Callable[[Callable[[int], None]], Steps]


class Cancelled(Exception):
    """A sequence ended before it finished (its request was cancelled, or the scheduler
    closed)."""


@dataclass(eq=False)
class _Seq:
    make: MakeSteps
    prompt: list[int]
    stopped: Callable[[], bool]
    need: int = 0  # cells it may take: its prompt and its budget
    moved: Callable[[], None] | None = None  # told of each step that carried it
    future: Future[Generation] = field(default_factory=Future)
    slot: int = -1
    steps: Steps | None = None
    call: ModelCall | None = None


class Scheduler:
    """Runs generations on a `BatchRuntime`, all running ones advanced in one call a step."""

    def __init__(self, batch: BatchRuntime, on_step: Callable[[int], None] | None = None, *,
                 step_rows: int = 8, workers: int | None = None):
        """`on_step(n)` hears of each model step and the sequences it carried. `step_rows`:
        the logits rows a step is kept to where drafts would add more (`draft_room`).
        `workers`: threads the sequences' loops run on between steps; by default half the
        cores (1 on 2 cores, where the loops are ~4% of the batch's time on the embedded model
        and the model's own threads have both cores: docs/benchmarks.md)."""
        self.batch = batch
        self.step_rows = step_rows
        self.workers = workers or max(1, (os.cpu_count() or 1) // 2)
        self._pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="kaname-seq") \
            if self.workers > 1 else None
        self._model_lock = threading.Lock()  # a rollback from a loop: one at a time
        self._on_step = on_step
        self._cond = threading.Condition()
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._free = list(range(batch.max_sequences))
        self._closed = False
        self.steps_run = 0  # model steps made (for tests and metrics)
        self.max_running = 0  # the most sequences one step has carried
        # seconds in the model's steps, and in the sequences' own loops between them
        # (picking under the grammar, drafting, streaming): the second holds every step up
        self.model_seconds = 0.0
        self.loop_seconds = 0.0
        self._thread = threading.Thread(target=self._loop, name="kaname-batch", daemon=True)
        self._thread.start()

    def submit(self, make: MakeSteps, prompt: list[int],
               stopped: Callable[[], bool] = lambda: False, *, budget: int = 0,
               moved: Callable[[], None] | None = None) -> Future[Generation]:
        """Queue a generation; it joins the batch at the next step boundary with a free
        slot, and, where the batch's cache is bounded, room for its prompt and `budget`
        (its max_tokens). `stopped()` is asked every step: True ends it with `Cancelled` (a
        long prompt's prefill included, which calls no token callback). `moved()` hears of
        each step that carried it (a chunk of its prompt, or tokens). The future holds the
        Generation, or the exception its loop raised."""
        seq = _Seq(make, prompt, stopped, len(prompt) + budget, moved)
        with self._cond:
            if self._closed:
                seq.future.set_exception(Cancelled("the server is shutting down"))
                return seq.future
            self._waiting.append(seq)
            self._cond.notify()
        return seq.future

    def draft_room(self) -> int:
        """Draft tokens a sequence's next call may carry: each running sequence's share of
        the rows left in a step after one row each. A logits row costs about the same as
        a sequence (Gemma 3 270M: 262k-row output layer), so on a full batch drafts would
        only lengthen every sequence's step; alone, a sequence drafts freely."""
        n = max(len(self._running), 1)
        return max(self.step_rows - n, 0) // n

    def close(self) -> None:
        """Stop after the current step: what still waits or runs ends with `Cancelled`."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._waiting or self._running):
                    self._cond.wait()
                if self._closed:
                    ending = [*self._running, *self._waiting]
                    self._running, self._waiting = [], deque()
                    break
                admitted = self._admit()
            try:
                for seq in admitted:
                    self._begin(seq)
                self._step()
            except BaseException as e:  # a bug of ours: fail what runs, keep serving
                for seq in list(self._running):
                    self._end(seq, e)
        for seq in ending:
            self._end(seq, Cancelled("the server is shutting down"))
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def _admit(self) -> list[_Seq]:
        """Waiting sequences into free slots, in order, each where the most of its prompt is
        kept, while the cache has room (`_make_room`)."""
        admitted = []
        while self._waiting and self._free:
            seq = self._waiting[0]
            slot = max(self._free, key=lambda s: self.batch.reuse(s, seq.prompt))
            if not self._make_room(seq, slot):
                break  # it waits for running sequences to end (and so does the queue)
            self._waiting.popleft()
            seq.slot = slot
            self._free.remove(slot)
            self._running.append(seq)
            admitted.append(seq)
        return admitted

    def _make_room(self, seq: _Seq, slot: int) -> bool:
        """Whether `seq` fits the cache beside the running sequences' prompts and budgets,
        dropping what free slots keep for reuse where that makes it fit (those that share
        least with its prompt first). Counted without sharing, so never more than the cache
        holds: a running sequence grows to its budget at most."""
        capacity = self.batch.capacity
        if capacity is None:
            return True
        running = sum(s.need for s in self._running)
        if running + seq.need > capacity:
            # alone it cannot fit either: let it in, to fail on its own context check
            return not self._running
        kept = sorted((s for s in self._free if s != slot and self.batch.held(s)),
                      key=lambda s: self.batch.reuse(s, seq.prompt))
        held = sum(self.batch.held(s) for s in kept)
        while kept and running + seq.need + held > capacity:
            s = kept.pop(0)
            held -= self.batch.held(s)
            self.batch.forget(s)
        return True

    def _begin(self, seq: _Seq) -> None:
        slot = seq.slot

        def rollback(n: int) -> None:
            with self._model_lock:
                self.batch.rollback(slot, n)

        try:
            seq.steps = seq.make(rollback)
            seq.call = next(seq.steps)
        except StopIteration as done:  # pragma: no cover - a loop always calls the model
            self._end(seq, done.value)
        except BaseException as e:  # the request's own error (a bad parameter, ...)
            self._end(seq, e)

    def _step(self) -> None:
        for seq in [s for s in self._running if s.stopped()]:
            self._end(seq, Cancelled("cancelled"))
        live = [s for s in self._running if s.call is not None]
        if not live:
            return
        calls = [(s.slot, s.call) for s in live if s.call is not None]
        t0 = time.perf_counter()
        try:
            rows = self.batch.step(calls)
        except BaseException as e:  # a model error ends the sequences of the step
            for seq in live:
                self._end(seq, e)
            return
        t1 = time.perf_counter()
        self.steps_run += 1
        self.max_running = max(self.max_running, len(live))
        if self._on_step is not None:
            self._on_step(len(live))
        for seq in live:
            if seq.moved is not None:
                seq.moved()
        ready = [(seq, r) for seq, r in zip(live, rows, strict=True) if r is not None]
        if self._pool is not None and len(ready) > 1:
            # this thread takes a share too; _send keeps every error to its own sequence
            others = [self._pool.submit(self._send, seq, r) for seq, r in ready[1:]]
            self._send(*ready[0])
            for f in others:
                f.result()
        else:
            for seq, r in ready:
                self._send(seq, r)
        self.model_seconds += t1 - t0
        self.loop_seconds += time.perf_counter() - t1

    def _send(self, seq: _Seq, rows: Rows) -> None:
        assert seq.steps is not None
        try:
            seq.call = seq.steps.send(rows)
        except StopIteration as done:
            self._end(seq, done.value)
        except BaseException as e:  # the loop's error, or the callback's cancel
            self._end(seq, e)

    def _end(self, seq: _Seq, outcome: Generation | BaseException) -> None:
        if seq.steps is not None:
            seq.steps.close()
            seq.steps = None
        seq.call = None
        with self._cond:
            if seq in self._running:
                self._running.remove(seq)
            if seq.slot >= 0:
                self.batch.release(seq.slot)
                self._free.append(seq.slot)
                seq.slot = -1
        if isinstance(outcome, BaseException):
            seq.future.set_exception(outcome)
        else:
            seq.future.set_result(outcome)
