"""Time to first token of real coding agents' first requests on `kaname serve`.

Replays the first request Claude Code and Codex CLI sent (tests/data/agent_requests, recorded by
scripts/record_agents.py) against `kaname serve --ctx-size N --any-model-name` on the embedded
model, streamed, and measures the time until the first content event (the prompt's prefill and
the first token); the stream is then closed, which stops the generation. Prints one line per
agent: prompt tokens, the first (cold) TTFT, the TTFTs of the same request repeated (its prompt
then in llama.cpp's KV cache), and the load average.

    .venv/bin/python scripts/bench_agent_prompts.py [--ctx-size 32768] [--runs 3]

Run it alone: on 2 cores llama.cpp's threads spin, a busy neighbour makes the figures worthless.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from kaname.bench.common import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests/data/agent_requests"
REQUESTS = {
    "Claude Code 2.1.332": RECORDED / "claude-code-2.1.332/01-first-stream.json",
    "Codex CLI 0.171.0": RECORDED / "codex-0.171.0/01-first-stream.json",
}
# the first event that carries generated text, per API
FIRST = {"/v1/messages": ("content_block_start", "content_block_delta"),
         "/v1/responses": ("response.output_item.added",)}


def _ttft(base: str, path: str, body: dict) -> tuple[float, int | None]:
    """(seconds to the first content event, prompt tokens where the stream says them)."""
    prompt_tokens = None
    start = time.perf_counter()
    with httpx.stream("POST", base + path, json=body, timeout=600,
                      headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"}) as r:
        if r.status_code != 200:
            raise SystemExit(f"{path}: {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            kind = event.get("type", "")
            if kind == "message_start":
                prompt_tokens = event["message"]["usage"]["input_tokens"]
            if kind in FIRST[path]:
                return time.perf_counter() - start, prompt_tokens
    raise SystemExit(f"{path}: the stream ended without content")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctx-size", type=int, default=32768)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with ServerProcess("--ctx-size", str(args.ctx_size), "--any-model-name",
                       startup_timeout=300) as server:
        base = server.url
        print(f"kaname serve --ctx-size {args.ctx_size} (embedded Gemma 3 270M), "
              f"load average before: {os.getloadavg()[0]:.2f}")
        for name, path in REQUESTS.items():
            rec = json.loads(path.read_text())
            route = rec["path"].split("?")[0]
            body = {**rec["body"], "stream": True}
            tokens = None  # Responses streams carry no prompt count until they end
            times = []
            for _ in range(args.runs):
                seconds, counted = _ttft(base, route, body)
                times.append(seconds)
                tokens = counted if counted is not None else tokens
            if tokens is None:  # one output token, to read the prompt's count
                r = httpx.post(base + route, json={**body, "stream": False,
                                                   "max_output_tokens": 1}, timeout=600)
                tokens = r.json()["usage"]["input_tokens"]
            # the first run prefills the whole prompt; the next ones find it in llama.cpp's
            # KV cache (the same prompt again: what an agent's next turn mostly is)
            warm = statistics.median(times[1:]) if len(times) > 1 else float("nan")
            print(f"{name:22} prompt {tokens:6d} tokens  TTFT cold {times[0]:6.2f} s "
                  f"({tokens / times[0]:4.0f} tokens/s)  repeated: median {warm:5.2f} s "
                  f"({', '.join(f'{t:.2f}' for t in times[1:])})")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
