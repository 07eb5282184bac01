"""Parsing request bodies off the event loop (server/bodies.py): what the hop to a worker
costs against parsing a body on the loop (its `INLINE_BELOW`), and, for a 3.7 MB body, how
long the loop waits for the GIL while a worker parses it, plain and as bodies.py does it.

    PYTHONPATH=src .venv/bin/python scripts/bench_bodies.py
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from kaname.edges.chat import ChatCompletionRequest
from kaname.server.bodies import _loads_yielding, _uncollected, parse
from kaname.server.lifecycle import Lifecycle
from kaname.server.workers import Workers

JSON = "application/json"


def chat(n: int, shape: str) -> bytes:
    part = {"type": "text", "text": "hello there"}
    messages: list[dict[str, Any]]
    if shape == "one long text":
        messages = [{"role": "user", "content": "hello there, " * (3 * n)}]
    elif shape == "text parts":
        messages = [{"role": "user", "content": [part] * n}]
    else:  # one-part messages
        messages = [{"role": "user", "content": [part]} for _ in range(n)]
    return json.dumps({"model": "m", "messages": messages}).encode()


def best_ms(work: Callable[[], Any], runs: int = 5, k: int = 20) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(k):
            work()
        times.append((time.perf_counter() - t) / k)
    return min(times) * 1e3


async def hop_us(workers: Workers) -> float:
    deadline = Lifecycle(300).deadline({})
    for _ in range(200):
        await deadline.preparing(workers.run(lambda: None))
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        await deadline.preparing(workers.run(lambda: None))
    return (time.perf_counter() - t) / n * 1e6


async def lag(workers: Workers, work: Callable[[], Any]) -> tuple[float, float]:
    """(seconds `work` took on a worker, the longest the loop waited meanwhile)."""
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    stop = False

    async def tick() -> None:
        while not stop:
            t = loop.time()
            await asyncio.sleep(0.001)
            lags.append(loop.time() - t - 0.001)

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    t = time.perf_counter()
    await workers.run(work)
    took = time.perf_counter() - t
    stop = True
    await task
    return took, max(lags)


async def main() -> None:
    workers = Workers()
    print(f"hop to a worker and back: {await hop_us(workers):.0f} us\n")
    print("| shape | size | parse on the loop |\n|---|---:|---:|")
    for shape in ("one long text", "text parts", "one-part messages"):
        for n in (100, 300, 1000, 2000):
            raw = chat(n, shape)
            ms = best_ms(lambda: parse(ChatCompletionRequest, raw, JSON))  # noqa: B023
            print(f"| {shape} | {len(raw) / 1024:.1f} KiB | {ms:.2f} ms |")
    big = json.dumps({"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}]} for _ in range(60_000)]}
    ).encode()
    print(f"\n{len(big) / 2**20:.1f} MiB of 60,000 one-part messages, best of 3 "
          "(took, the loop's worst wait):\n")
    print("| on a worker | took | loop waits |\n|---|---:|---:|")
    ways: dict[str, Callable[[], Any]] = {
        "json.loads + validate": lambda: parse(ChatCompletionRequest, big, JSON),
        "per-object loads": lambda: parse(ChatCompletionRequest, big, JSON,
                                          loads=_loads_yielding),
        "per-object loads, collector paused (bodies.py)": lambda: _uncollected(
            lambda: parse(ChatCompletionRequest, big, JSON, loads=_loads_yielding)),
    }
    for name, work in ways.items():
        runs = [await lag(workers, work) for _ in range(3)]
        print(f"| {name} | {min(r[0] for r in runs):.2f} s "
              f"| {min(r[1] for r in runs) * 1e3:.0f} ms |")
    workers.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
