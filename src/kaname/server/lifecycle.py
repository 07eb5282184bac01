"""How long a request may wait and run, and the server's shutdown.

`--request-timeout` bounds time without progress: a request's preparing and its wait for a
generation slot together (from its arrival), then, while it runs, each stretch without a step
of its generation (a chunk of its prompt read, a token, an upstream's chunk). A long prompt
being read or a long answer being written is progress, never cut: an agent's 12k-token prompt
takes minutes to read on a busy 2-core machine, and its answer is bounded by max_tokens.

On SIGTERM (or Ctrl-C) the server stops accepting connections and drains: requests waiting for
a generation slot are answered 503 at once (so that their clients can go elsewhere), running
generations get the grace period (`--graceful-shutdown`) to finish, and those still running
then end with a 503, or with an error event and the end of the stream where the 200 was sent.
uvicorn alone would wait for every connection, the queued ones included, and cancel what was
left when its timeout ran out, without an answer ("Server disconnected"); `serve` tells the
app first, then lets uvicorn wait a little longer than the grace period for the answers to go
out. Errors are `APIError`s, rendered like every other in each API's shape.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI
from starlette.types import Scope

from .backend import Progress
from .errors import APIError
from .transport import read_deadline_protocol

T = TypeVar("T")

ARRIVAL = "kaname.arrival"  # scope key: the event loop's time when the request arrived
# seconds uvicorn waits beyond the grace period for the answers that end it to be written
ANSWER_MARGIN = 5.0


class _Flag:
    """A one-way switch that coroutines can wait for, on whichever event loop they run
    (asyncio.Event binds to the first loop that waits on it)."""

    def __init__(self) -> None:
        self.is_set = False
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        self.is_set = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def waiter(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.is_set:
            waiter.set_result(None)
        else:
            self._waiters.add(waiter)
        return waiter

    def forget(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)
        waiter.cancel()


class Lifecycle:
    """The server's state as requests see it: serving, draining (SIGTERM: nothing new
    starts), stopped (the grace period is over: nothing runs on)."""

    def __init__(self, request_timeout: float):
        self.request_timeout = request_timeout
        self.draining = _Flag()
        self.stopped = _Flag()
        self.grace = 0.0

    def arrived(self, scope: Scope) -> None:
        """Note a request's arrival (the app's outermost middleware calls this)."""
        scope.setdefault(ARRIVAL, asyncio.get_running_loop().time())

    def deadline(self, scope: Scope) -> Deadline:
        """The deadline of the request `scope` belongs to."""
        arrival = scope.get(ARRIVAL) or asyncio.get_running_loop().time()
        return Deadline(self, arrival + self.request_timeout)

    def drain(self, grace: float) -> None:
        """Answer the waiting requests now and stop the running ones in `grace` seconds."""
        if self.draining.is_set:
            return
        self.grace = grace
        self.draining.set()
        asyncio.get_running_loop().call_later(grace, self.stopped.set)


@dataclass(frozen=True)
class Deadline:
    """One request's bound: a 504 when the event loop's clock passes `at` while it is
    prepared or waits, or when its running generation goes the request timeout without
    progress; a 503 when the server shuts down."""

    lifecycle: Lifecycle
    at: float

    def left(self) -> float:
        """Seconds left (never below 0)."""
        return max(0.0, self.at - asyncio.get_running_loop().time())

    async def preparing(self, work: Awaitable[T]) -> T:
        """`work` (preparing the request off the event loop: its body, prompt, grammar), within
        the deadline; nothing new is prepared once the server drains. Cancelled when it loses,
        the work stops (workers.py)."""
        life = self.lifecycle
        return await self._until(work, life.draining, lambda: APIError(
            503, "server shutting down: new requests are not started; retry",
            code="shutting_down"), lambda: APIError(
            504, f"the request could not be prepared (its body parsed, its prompt rendered, "
                 f"its grammar compiled) within the request timeout of {life.request_timeout:g} s",
            code="timeout"))

    async def queued(self, admission: Awaitable[T],
                     lost: Callable[[T], None] | None = None) -> T:
        """`admission` (waiting for a generation slot), within the deadline; nothing is
        admitted once the server drains. `lost(slot)`: a slot admitted as the caller went
        away, which no one else would release."""
        life = self.lifecycle
        return await self._until(admission, life.draining, lambda: APIError(
            503, "server shutting down: waiting requests are not started; retry",
            code="shutting_down"), lambda: APIError(
            504, f"timed out after {life.request_timeout:g} s waiting for a generation slot",
            code="timeout"), lost)

    async def running(self, generation: Awaitable[T], progress: Progress) -> T:
        """`generation`, until it goes the request timeout without `progress`, and within
        the grace period of a shutdown."""
        life = self.lifecycle
        return await self._until(generation, life.stopped, lambda: APIError(
            503, f"server shutting down: the generation did not finish within the "
                 f"{life.grace:g} s grace period; retry", code="shutting_down"),
            lambda: APIError(504, f"the generation made no progress for "
                                  f"{life.request_timeout:g} s (--request-timeout)",
                             code="timeout"), progress=progress)

    def _wait(self, progress: Progress | None) -> float:
        """Seconds until the work is late, as things stand."""
        if progress is None:
            return self.left()
        return max(0.0, self.lifecycle.request_timeout - progress.idle())

    async def _until(self, work: Awaitable[T], flag: _Flag,
                     stopped: Callable[[], APIError], late: Callable[[], APIError],
                     lost: Callable[[T], None] | None = None,
                     progress: Progress | None = None) -> T:
        """`work`'s result, or `stopped()` once `flag` is set, or `late()` at the deadline
        (with `progress`: once it goes the request timeout without);
        `work` is cancelled when it loses (a generation then stops at its next token), and
        when this is (the client went away): once, so that its cleanup runs to the end; a
        result it gives all the same then goes to `lost`. Nothing starts once `flag` is
        set."""
        if flag.is_set:
            if asyncio.iscoroutine(work):
                work.close()  # never started: no "never awaited" warning
            raise stopped()
        task = asyncio.ensure_future(work)
        waiter = flag.waiter()
        either: set[asyncio.Future[Any]] = {task, waiter}
        cancelled = False
        try:
            while True:
                done, _ = await asyncio.wait(either, timeout=self._wait(progress),
                                             return_when=asyncio.FIRST_COMPLETED)
                if done or self._wait(progress) <= 0:
                    break
            if not task.done():
                task.cancel()
                cancelled = True
                await asyncio.wait({task})
        except BaseException:
            if not cancelled:  # a second cancel would cut short the cleanup the first began
                task.cancel()
            if lost is not None:  # done as this was cancelled, or done despite its cancel
                task.add_done_callback(
                    lambda t: t.cancelled() or t.exception() is not None or lost(t.result()))
            raise
        finally:
            flag.forget(waiter)
        if task.cancelled():  # lost the race (a result that came in meanwhile is kept)
            raise stopped() if waiter in done else late()
        return task.result()


class _Server(uvicorn.Server):
    """uvicorn, telling the app that it shuts down before it waits for the connections."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, grace: float):
        super().__init__(config)
        self.lifecycle, self.grace = lifecycle, grace

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.lifecycle.drain(self.grace)
        await super().shutdown(sockets)


def serve(app: FastAPI, *, host: str, port: int, log_level: str, grace: float,
          read_timeout: float = 30.0) -> None:
    """Run `app` (made by `create_app`) until SIGTERM / Ctrl-C, then drain it: waiting
    requests answered 503, running ones given `grace` seconds. A connection whose request
    is not all in within `read_timeout` seconds is closed (transport.py)."""
    lifecycle: Lifecycle = app.state.lifecycle
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            http=read_deadline_protocol(read_timeout),
                            timeout_graceful_shutdown=math.ceil(grace + ANSWER_MARGIN))
    _Server(config, lifecycle, grace).run()
