"""How long /health waits while a 1 MB literal is compiled and decoded (issue 36): one request
at a time (a `choice` of one 1 MB option, a schema `enum` of it, a 1 MB regex) against
`kaname serve --model random --format hermes`, /health polled every 20 ms meanwhile; prints
the worst /health and the request's own answer. Run alone:

    .venv/bin/python scripts/bench_loop_stall.py            # this checkout
    PYTHONPATH=/path/to/other/src .venv/bin/python scripts/bench_loop_stall.py   # another
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import httpx

from kaname.bench.common import ServerProcess

LITERAL = "x" * 1_000_000
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "choice": ("/v1/completions", {"model": "random", "prompt": "x", "max_tokens": 4,
                                   "structured_outputs": {"choice": [LITERAL]}}),
    "enum": ("/v1/chat/completions", {
        "model": "random", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "a", "schema": {"enum": [LITERAL]}}}}),
    "regex": ("/v1/completions", {"model": "random", "prompt": "x", "max_tokens": 4,
                                  "structured_outputs": {"regex": "y" * 1_000_000}}),
}


def main() -> None:
    with ServerProcess("--model", "random", "--format", "hermes") as server:
        print(f"load {os.getloadavg()[0]:.2f}")
        for name, (path, body) in CASES.items():
            answer: list[str] = []

            def send(path: str = path, body: dict[str, Any] = body,
                     answer: list[str] = answer) -> None:
                start = time.monotonic()
                r = httpx.post(server.url + path, json=body, timeout=300)
                answer.append(f"{r.status_code} in {time.monotonic() - start:.2f} s")

            sender = threading.Thread(target=send)
            sender.start()
            worst = 0.0
            while sender.is_alive():
                start = time.monotonic()
                httpx.get(server.url + "/health")
                worst = max(worst, time.monotonic() - start)
                time.sleep(0.02)
            print(f"{name}: worst /health {worst:.3f} s; the request: {answer[0]}", flush=True)


if __name__ == "__main__":
    main()
