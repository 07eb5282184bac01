"""A request's Deadline (server/lifecycle.py) on its own: the work's result when it is in time,
a 504 at the deadline, a 503 once the server drains (preparing, waiting) or stops (running),
and the work cancelled whenever it loses or its caller goes away."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaname.server.backend import Progress
from kaname.server.errors import APIError
from kaname.server.lifecycle import ARRIVAL, Lifecycle


class Work:
    """A coroutine that takes `seconds`, and records whether it was cancelled."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.cancelled = False

    async def __call__(self) -> str:
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "done"


# times 0.15 s apart at least, so that a loaded machine cannot swap their order
@settings(max_examples=36, deadline=None)
@given(work=st.sampled_from([0.0, 0.3]), timeout=st.sampled_from([0.15, 0.6]),
       drain_after=st.none() | st.sampled_from([0.0, 0.45]), phase=st.sampled_from(
           ["preparing", "queued", "running"]))
def test_the_first_of_result_deadline_and_shutdown_decides(work, timeout, drain_after, phase):
    """Whichever comes first: the work's result, the deadline (504) or the shutdown (503:
    at once for waiting work, after the grace period, 0 here, for running work)."""
    async def main() -> None:
        life = Lifecycle(timeout)
        scope: dict = {}
        life.arrived(scope)
        deadline = life.deadline(scope)
        job = Work(work)
        if drain_after is not None:  # waiting requests stop at once, running ones at grace
            asyncio.get_running_loop().call_later(drain_after, life.drain, 0.0)
        start = asyncio.get_running_loop().time()
        try:
            # a running generation that never moves: its idle time counts from its start
            extra = (Progress(),) if phase == "running" else ()
            result = await getattr(deadline, phase)(job(), *extra)
        except APIError as e:
            took = asyncio.get_running_loop().time() - start
            assert job.cancelled
            if e.status == 504:
                assert e.code == "timeout" and took >= timeout - 0.01
                assert work > timeout and (drain_after is None or drain_after > timeout)
            else:
                assert e.status == 503 and e.code == "shutting_down"
                assert drain_after is not None and drain_after <= min(work, timeout)
                assert took < drain_after + 0.1
                assert ("grace period" in e.message) == (phase == "running")
            return
        assert result == "done" and not job.cancelled
        assert work < timeout and (drain_after is None or drain_after >= work)

    asyncio.run(main())


def test_the_deadline_counts_from_arrival():
    async def main() -> None:
        life = Lifecycle(10.0)
        now = asyncio.get_running_loop().time()
        deadline = life.deadline({ARRIVAL: now - 9.9})  # arrived 9.9 s ago
        assert deadline.left() < 0.11
        with pytest.raises(APIError) as e:
            await deadline.queued(Work(1.0)())
        assert e.value.status == 504

    asyncio.run(main())


def test_a_caller_that_goes_away_cancels_the_work():
    async def main() -> None:
        life = Lifecycle(10.0)
        job = Work(5.0)
        task = asyncio.create_task(life.deadline({}).running(job(), Progress()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert job.cancelled

    asyncio.run(main())


def test_work_is_cancelled_once_when_its_caller_goes_away_during_the_cleanup():
    """The deadline cancels the work; the caller goes away while the work cleans up. The work
    gets one cancel: a second would cut short whatever cleanup the first began (closing an
    upstream connection, for one: test_upstream_cancel.py)."""
    async def main() -> None:
        life = Lifecycle(0.05)
        cancels = 0
        release = asyncio.Event()  # the cleanup lasts until the test has cancelled the caller

        async def work() -> str:
            nonlocal cancels
            try:
                await asyncio.sleep(5.0)
            except asyncio.CancelledError:
                cancels += 1
                while not release.is_set():
                    try:
                        await release.wait()
                    except asyncio.CancelledError:
                        cancels += 1
                raise
            return "done"

        task = asyncio.create_task(life.deadline({}).running(work(), Progress()))
        while cancels == 0:  # the deadline passed: the work is cleaning up
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.sleep(0.05)
        assert cancels == 1

    asyncio.run(main())


def test_a_slot_admitted_as_the_caller_goes_away_is_released():
    """Admitted in the same pass of the loop as the caller is cancelled: the caller never
    gets the slot, so `lost` must release it, or the server has one slot less for good."""
    async def main() -> None:
        life = Lifecycle(10.0)
        free = asyncio.Event()
        lost: list[str] = []

        async def admit() -> str:
            await free.wait()
            return "slot"

        task = asyncio.create_task(life.deadline({}).queued(admit(), lost=lost.append))
        await asyncio.sleep(0.05)  # waiting for a slot
        free.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert lost == ["slot"]

    asyncio.run(main())


def test_nothing_waits_once_draining():
    async def main() -> None:
        life = Lifecycle(10.0)
        life.drain(5.0)
        with pytest.raises(APIError) as e:
            await life.deadline({}).queued(Work(0.0)())
        assert e.value.status == 503
        # a running generation still has its grace period
        assert await life.deadline({}).running(Work(0.01)(), Progress()) == "done"

    asyncio.run(main())


def test_a_running_generation_is_cut_only_after_the_timeout_without_progress():
    """While it runs, --request-timeout counts from its last progress (a model step), not
    from its arrival: a generation that keeps moving outlives the timeout many times over, and
    one that stops moving is cut the timeout after its last step."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        life = Lifecycle(0.3)
        progress = Progress()

        async def steady(steps: int, every: float) -> str:
            for _ in range(steps):
                await asyncio.sleep(every)
                progress.touch()
            return "done"

        t0 = loop.time()
        assert await life.deadline({}).running(steady(12, 0.1), progress) == "done"
        assert loop.time() - t0 > 3 * 0.3  # 1.2 s of steps under a 0.3 s timeout

        async def stalls() -> str:
            await steady(5, 0.1)  # moves for 0.5 s, then stops
            await asyncio.sleep(10)
            return "never"

        progress.touch()
        t0 = loop.time()
        with pytest.raises(APIError) as e:
            await life.deadline({}).running(stalls(), progress)
        took = loop.time() - t0
        assert e.value.status == 504 and e.value.code == "timeout"
        assert "no progress" in e.value.message
        assert 0.5 + 0.3 - 0.05 < took < 0.5 + 0.3 + 0.5, took

    asyncio.run(main())
