"""Preparing requests off the event loop, and what compiled grammars cost in memory: the
measurements behind `server/workers.py` (how many threads) and `grammar/cache.py` (the size
estimate of a compile-cache entry). On the Gemma vocabulary (262k tokens).

    .venv/bin/python scripts/bench_prepare.py memory   # RSS per compiled grammar, by shape
    .venv/bin/python scripts/bench_prepare.py pool     # threads: compile throughput, loop lag
    .venv/bin/python scripts/bench_prepare.py health   # /health while a 1 MB schema compiles

(`health` runs servers only, so it also measures an older checkout: PYTHONPATH=OLD/src.)
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import string
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kaname.grammar import GrammarCompiler, JsonSchema, Regex
from kaname.runtimes.llamacpp import default_vocab

rnd = random.Random(0)


def word() -> str:
    return "".join(rnd.choices(string.ascii_lowercase, k=9))


def rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def props(n: int, tag: str, *, mixed: bool = True) -> JsonSchema:
    """`n` properties: strings, integers and arrays of numbers (`mixed`), or strings."""
    kinds: list[dict[str, Any]] = [{"type": "string"}]
    if mixed:
        kinds += [{"type": "integer"}, {"type": "array", "items": {"type": "number"}}]
    return JsonSchema({"type": "object", "properties": {f"{tag}_{i}": kinds[i % len(kinds)]
                                                        for i in range(n)}}, strict=True)


SHAPES: dict[str, tuple[int, Callable[[str], Any]]] = {  # name: (entries, k-th constraint)
    "regex, a few characters": (300, lambda k: Regex(f"k{k}[a-z]+")),
    "schema, 1 property": (100, lambda k: props(1, k)),
    "schema, 100 properties": (30, lambda k: props(100, k)),
    "schema, 500 properties": (10, lambda k: props(500, k)),
    "schema, 2,000 string properties": (4, lambda k: props(2000, k, mixed=False)),
    "regex, alternation of 10k words": (6, lambda k: Regex(
        "(" + "|".join(word() for _ in range(10_000)) + ")")),
    "schema, enum of 3,000 strings": (4, lambda k: JsonSchema(
        {"enum": [f"v{k}_{i}" for i in range(3000)]}, strict=True)),
}


def memory() -> None:
    """Each shape in a process of its own: memory another shape's entries freed would be
    reused and hide an entry's cost."""
    import subprocess

    print("| shape | grammar chars | RSS per entry | estimate | estimate / RSS |")
    print("|---|---:|---:|---:|---:|")
    for name in SHAPES:
        subprocess.run([sys.executable, __file__, "memory-one", name], check=True)


def memory_one(name: str) -> None:
    from kaname.grammar.cache import compiled_size

    n, make = SHAPES[name]
    c = GrammarCompiler(default_vocab().tokenizer, cache_bytes=1 << 40)
    c.compile(make("warm"))  # the allocator's first growth for this shape is not an entry's
    before, chars, estimate = rss(), 0, 0
    for k in range(n):
        constraint = make(str(k))
        compiled = c.compile(constraint)
        chars += len(compiled.grammar)
        key = len(str(getattr(constraint, "schema", None) or constraint.pattern))
        estimate += compiled_size(compiled.grammar, key)
    per = (rss() - before) / n
    print(f"| {name} | {chars // n:,} | {per / 1e6:.2f} MB | {estimate / n / 1e6:.2f} MB "
          f"| {estimate / n / max(per, 1):.1f} |", flush=True)


async def through_pool(threads: int, compiler: GrammarCompiler, constraints: list[Any]
                       ) -> tuple[float, float, float]:
    from kaname.server.workers import Workers

    workers = Workers(threads)
    lags: list[float] = []
    stop = False

    async def probe() -> None:  # what the event loop's other requests see
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    task = asyncio.create_task(probe())
    t = time.perf_counter()
    await asyncio.gather(*(workers.run(lambda x=x: compiler.compile(x),
                                       deadline=time.monotonic() + 600) for x in constraints))
    wall = time.perf_counter() - t
    stop = True
    await task
    workers.shutdown()
    return wall, max(lags), statistics.mean(lags)


def pool() -> None:
    tokenizer = default_vocab().tokenizer
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()}")
    print("| constraints | threads | wall | loop lag worst | loop lag mean |")
    print("|---|---:|---:|---:|---:|")
    for name, make in (("8 regexes of 10k words (mostly llguidance)",
                        lambda: Regex("(" + "|".join(word() for _ in range(10_000)) + ")")),
                       ("8 schemas of 1,500 properties (mostly Python)",
                        lambda: props(1500, word(), mixed=False))):
        constraints = [make() for _ in range(8)]
        for threads in (1, 2, 4, 8):
            c = GrammarCompiler(tokenizer, cache_bytes=0, refused_bytes=0)
            wall, worst, mean = asyncio.run(through_pool(threads, c, constraints))
            print(f"| {name} | {threads} | {wall:.1f} s | {worst * 1000:.0f} ms "
                  f"| {mean * 1000:.1f} ms |", flush=True)


def health() -> None:
    import httpx
    from serverproc import ServerProcess

    schema = {"type": "object", "properties": {f"property_name_{i:05d}": {"type": "string"}
                                               for i in range(22_000)}}
    body = {"model": "random", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "big", "strict": True, "schema": schema}}}
    for timeout in ("120", "3"):
        with ServerProcess("--model", "random", "--request-timeout", timeout) as s:
            box: dict[str, Any] = {}

            def send(box: dict[str, Any] = box) -> None:
                t = time.monotonic()
                box["status"] = httpx.post(f"{s.url}/v1/chat/completions", json=body,
                                           timeout=300).status_code
                box["took"] = time.monotonic() - t

            thread = threading.Thread(target=send)
            thread.start()
            latencies = []
            while thread.is_alive():
                t = time.monotonic()
                httpx.get(f"{s.url}/health", timeout=300)
                latencies.append(time.monotonic() - t)
                time.sleep(0.1)
            thread.join()
            print(f"--request-timeout {timeout}: {box['status']} after {box['took']:.1f} s; "
                  f"/health {len(latencies)} times meanwhile, worst {max(latencies):.2f} s, "
                  f"median {statistics.median(latencies) * 1000:.0f} ms", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["memory-one"]:
        memory_one(sys.argv[2])
    else:
        {"memory": memory, "pool": pool, "health": health}[sys.argv[1]]()
