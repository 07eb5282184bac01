"""Work off the event loop: a caller that stops waiting (its deadline passed, `asyncio.wait_for`
here, `Deadline.preparing` in the server; its client left) is answered at once, and the work
itself stops rather than keep a worker."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kaname.server.workers import Abandoned, Workers


def spin(state: dict[str, object]) -> None:
    """Pure Python that never ends by itself; says how it ended."""
    state["started"] = True
    try:
        n = 0
        while True:
            n += 1
    except BaseException as e:
        state["ended_by"] = type(e)
        raise


def wait_for(condition, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_results_and_errors_come_back():
    async def main() -> None:
        w = Workers(2)
        assert await w.run(lambda: 6 * 7) == 42
        with pytest.raises(ZeroDivisionError):
            await w.run(lambda: 1 / 0)
        w.shutdown()

    asyncio.run(main())


def test_work_past_its_deadline_is_answered_on_time_and_stopped():
    state: dict[str, object] = {}

    async def main() -> float:
        w = Workers(1)
        t = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(w.run(lambda: spin(state)), 0.5)
        took = time.monotonic() - t
        # the worker is free again: the next job runs on it
        assert await w.run(lambda: "next") == "next"
        w.shutdown()
        return took

    took = asyncio.run(main())
    assert 0.4 < took < 5
    assert wait_for(lambda: state.get("ended_by") is Abandoned)


def test_a_caller_that_goes_away_stops_its_work():
    state: dict[str, object] = {}

    async def main() -> None:
        w = Workers(1)
        task = asyncio.create_task(w.run(lambda: spin(state)))
        while not state.get("started"):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await w.run(lambda: "next") == "next"
        w.shutdown()

    asyncio.run(main())
    assert wait_for(lambda: state.get("ended_by") is Abandoned)


def test_work_still_queued_at_its_deadline_never_runs():
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def hold() -> bool:
        started.set()
        return release.wait(30)

    async def main() -> None:
        w = Workers(1)
        busy = asyncio.ensure_future(w.run(hold))
        while not started.is_set():
            await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(w.run(lambda: ran.append("queued")), 0.3)
        release.set()
        assert await busy is True
        assert await w.run(lambda: "after") == "after"
        w.shutdown()

    asyncio.run(main())
    assert ran == []


def test_an_abandon_that_comes_as_the_work_ends_never_reaches_the_next_job():
    """Deadlines set to pass about when each job ends, many times over: whichever side wins,
    no exception meant for one job is raised in the next, nor in the pool's own code."""

    def job(seconds: float) -> str:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return "done"

    async def main() -> tuple[int, int]:
        w = Workers(1)
        done = passed = 0
        for i in range(80):  # (jobs longer than the GIL's 5 ms turns, so both sides race)
            seconds = 0.01 + (i % 5) * 0.005
            try:
                await asyncio.wait_for(w.run(lambda s=seconds: job(s)),
                                       seconds * (0.5 + (i % 7) / 6))
                done += 1
            except TimeoutError:
                passed += 1
            assert await w.run(lambda: "clean") == "clean"
        w.shutdown()
        return done, passed

    done, passed = asyncio.run(main())
    assert done + passed == 80 and passed > 0
