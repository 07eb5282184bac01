"""A cancelled upstream generation gives its connection back, however its cancels arrive.

httpcore closes the connection of a cancelled stream in its exception handler; a second cancel
landing inside that handler left the connection ACTIVE in the pool for good, and once the pool
(2 connections a slot) was full of them every later request waited for a connection until its
deadline: a proxy that 504s forever after a few stalled upstream answers."""

from __future__ import annotations

import asyncio

from fake_upstreams import OK_TEXT, FakeUpstream

from kaname.decoding import SamplingParams
from kaname.grammar import GrammarCompiler, Lark
from kaname.server.backend import GenParams
from kaname.server.metrics import Metrics
from kaname.server.upstream import UpstreamBackend

PARAMS = GenParams(50, SamplingParams(temperature=0.0))


def test_cancels_in_any_rhythm_leave_the_upstream_usable(gemma):
    """Stalled answers, each cancelled twice with 0-5 passes of the event loop between (the
    request's deadline, then the backend's own timeout or a client that went away), each rhythm
    more often than the pool has connections: a good request afterwards is answered at once."""
    compiler = GrammarCompiler(gemma.tokenizer)
    compiled = compiler.compile(Lark("start: /(.|\\n)*/"))

    async def main(url: str, seen: list[object]) -> None:
        backend = UpstreamBackend(url, "random", "kaname", gemma.tokenizer, compiler,
                                  Metrics(lambda: (0, 0)), api_key=None, max_concurrency=1,
                                  max_queue=4, request_timeout=30.0)
        try:
            for passes in range(6):
                for _ in range(3):  # more than the pool's 2 connections
                    asked = len(seen)
                    task = asyncio.create_task(backend.generate("FAULT:stall-headers", compiled,
                                                                PARAMS))
                    async with asyncio.timeout(5.0):
                        while len(seen) == asked:  # the upstream has it, and stalls
                            assert not task.done(), task
                            await asyncio.sleep(0.01)
                    await asyncio.sleep(0.05)  # its headers came: the body is being read
                    task.cancel()
                    for _pass in range(passes):
                        await asyncio.sleep(0)
                    task.cancel()
                    await asyncio.wait({task})
                    assert task.cancelled()
                    gen = await asyncio.wait_for(backend.generate("hello", compiled, PARAMS), 5.0)
                    assert (gen.text, gen.finish_reason) == (OK_TEXT, "stop"), passes
        finally:
            await backend.aclose()

    with FakeUpstream() as up:
        asyncio.run(main(up.url, up.requests))
