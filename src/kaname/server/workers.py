"""Work too slow for the event loop (rendering a prompt, counting its tokens, compiling its
grammar) on a pool of threads, awaited under the request's deadline (`Deadline.preparing`).

The event loop serves every connection: a 0.9 MB schema compiled on it froze /health and every
other request for 17-20 s. Here the loop only waits. What is slow is partly llguidance (Rust,
which releases the GIL: the loop runs freely meanwhile) and partly Python (the metaschema
check, rewrites), which shares the GIL with the loop in 5 ms turns: slower for the loop, never
frozen (docs/benchmarks.md, "Preparing off the event loop").

A job whose request gives up (its deadline passed, or the client left) is abandoned: the
request is answered at once, and the thread stops at its next Python instruction, where an
`Abandoned` exception is raised in it (CPython's PyThreadState_SetAsyncExc: Python code cannot
be stopped from outside otherwise). A call into llguidance is not interrupted; llguidance's
own limits (`LLParserLimits`: lexer fuel, grammar size, items per row) bound it, and the
exception is raised as it returns. What such work shares must survive an exception at any
instruction: `with` blocks release their locks, and the compile cache starts afresh where
one interrupts its update (grammar/cache.py).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def default_threads() -> int:
    """Threads for preparing requests: two at least, so that a cheap request passes one
    costly compile; at most four, since the Python part of a compile does not scale (one GIL)
    and the event loop's lag grows with every thread that wants the GIL (measured:
    docs/benchmarks.md, "Preparing off the event loop")."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))


class Abandoned(BaseException):
    """Raised inside a worker whose request gave up on it. A BaseException, so that the
    `except Exception` of code it interrupts does not swallow it."""


class Workers:
    """A thread pool whose jobs stop when their caller stops waiting."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or default_threads()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kaname-prepare")

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on a worker: its result or its error. Cancelled (the request's deadline
        passed, its client left: lifecycle.py's `Deadline.preparing`), the work is abandoned,
        whether it is running or still waiting for a worker."""
        job = _Job(work)
        future = asyncio.wrap_future(self._pool.submit(job.run))
        # retrieved here: an abandoned job's error is awaited by no one
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            job.abandon()
            raise

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _Job:
    """One piece of work and the thread it runs on, so that it can be stopped."""

    def __init__(self, work: Callable[[], Any]):
        self.work = work
        self.lock = threading.Lock()  # orders abandon() against the job's start and end
        self.thread: int | None = None
        self.abandoned = False
        self.finished = False

    def run(self) -> Any:
        with self.lock:
            if self.abandoned:  # given up while it waited for a worker
                raise Abandoned
            self.thread = threading.get_ident()
        thread = self.thread
        try:
            return self.work()
        finally:
            with self.lock:
                self.finished = True
                if self.abandoned:  # raised too late to stop the work: not in the next job
                    _raise_in(thread, None)

    def abandon(self) -> None:
        with self.lock:
            if self.abandoned:
                return
            self.abandoned = True
            if self.thread is not None and not self.finished:
                _raise_in(self.thread, Abandoned)


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in `thread` at its next Python instruction (None: cancel one pending)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                               ctypes.py_object(exc) if exc else None)
