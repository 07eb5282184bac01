"""The compile cache's bound in RSS (issue 36): N distinct 100k-character regexes, each
compiled and decoded (max_tokens 64, --model random), against `kaname serve --format hermes
--compile-cache-mb MB`; prints the server's RSS growth every 10 requests and the cache's own
count at the end. Run alone:

    .venv/bin/python scripts/bench_cache_rss.py 256 120
    .venv/bin/python scripts/bench_cache_rss.py 0 60
"""

from __future__ import annotations

import random
import sys

import httpx

from kaname.bench.common import ServerProcess


def main(cache_mb: str, n: int) -> None:
    with ServerProcess("--model", "random", "--format", "hermes",
                       "--compile-cache-mb", cache_mb) as server:

        def rss_mb() -> int:
            with open(f"/proc/{server.pid}/statm") as f:
                return int(f.read().split()[1]) * 4096 >> 20

        client = httpx.Client(timeout=300)

        def send(pattern: str) -> None:
            r = client.post(server.url + "/v1/completions", json={
                "model": "random", "prompt": "x", "max_tokens": 64,
                "structured_outputs": {"regex": pattern}})
            if r.status_code != 200:
                print(r.status_code, r.text[:200])

        send("[a-z]+")
        start, rng = rss_mb(), random.Random(1)
        for i in range(n):
            send("".join(f"[a-{rng.choice('bcdefghij')}]" for _ in range(20_000)))
            if i % 10 == 9:
                print(f"{i + 1} regexes: RSS +{rss_mb() - start} MB", flush=True)
        metrics = client.get(server.url + "/metrics").text
        print([line for line in metrics.splitlines()
               if line.startswith("kaname_compile_cache_bytes")])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
