"""`kaname bench prefill`: how fast `kaname serve` reads a coding agent's prompt, beside
llama.cpp reading as many tokens.

The prompt is Claude Code's first request (tests/data/agent_requests, 12k tokens on the
embedded model), sent to `kaname serve --ctx-size 32768 --any-model-name` (the README's agent
command line) as a stream; the figure is the time to its first content event (the prompt read,
rendered and tokenized, and one token). Three reads of it:

- cold: a fresh server, nothing cached;
- retry: the same request again (its prompt in the KV cache of the slot that read it);
- next turn: the same conversation with an assistant reply and a new user message after it
  (what an agent sends next: the old prompt is a prefix of the new one).

Each alone, and again on a fresh server with 7 other sequences streaming long answers in the
batch (the default batch is 8). The peer is llama-cpp-python's `Llama.eval` over as many tokens
on the same GGUF, all cores, n_batch 512, in a process of its own with nothing else running.
Targets (issue 37): cold ≤ 1.3x llama.cpp's read; retry and next turn ≤ 15% of the cold read,
alone and in the busy batch.

Run it alone: on 2 cores llama.cpp's threads spin, a busy neighbour makes it worthless. The JSON
records the load average before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from .common import ServerProcess, machine, version_of

ROOT = Path(__file__).resolve().parents[3]
REQUEST = ROOT / "tests" / "data" / "agent_requests" / "claude-code-2.1.332" / \
    "01-first-stream.json"
CTX = 32768
BUSY = 7  # other sequences streaming beside the measured one (the default batch holds 8)
HEADERS = {"x-api-key": "unused", "anthropic-version": "2023-06-01"}
NEXT_TURN = [{"role": "assistant", "content": "I will look at the repository first."},
             {"role": "user", "content": "Good. Now list the files you would change."}]


def _first_event(base: str, body: dict[str, Any]) -> tuple[float, int]:
    """(seconds to the first content event of a streamed Messages request, prompt tokens)."""
    start = time.perf_counter()
    prompt_tokens = -1
    with httpx.stream("POST", f"{base}/v1/messages", json={**body, "stream": True},
                      headers=HEADERS, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"/v1/messages: {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("type") == "message_start":
                prompt_tokens = event["message"]["usage"]["input_tokens"]
            elif event.get("type") in ("content_block_start", "content_block_delta"):
                return time.perf_counter() - start, prompt_tokens
    raise RuntimeError("the stream ended without content")


def _reads(base: str, body: dict[str, Any]) -> dict[str, Any]:
    cold, tokens = _first_event(base, body)
    retry, _ = _first_event(base, body)
    following = {**body, "messages": [*body["messages"], *NEXT_TURN]}
    next_turn, next_tokens = _first_event(base, following)
    return {"prompt_tokens": tokens, "cold_s": round(cold, 3),
            "cold_tokens_per_s": round(tokens / cold, 1), "retry_s": round(retry, 3),
            "next_turn_s": round(next_turn, 3), "next_turn_prompt_tokens": next_tokens,
            "retry_of_cold": round(retry / cold, 4),
            "next_turn_of_cold": round(next_turn / cold, 4)}


class _Busy:
    """`n` streams of long free-text answers, kept running until stopped."""

    def __init__(self, base: str, n: int, max_tokens: int):
        self.base, self.n, self.max_tokens = base, n, max_tokens
        self.stop = threading.Event()
        self.tokens = 0
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(n)]

    def _run(self, i: int) -> None:
        body = {"model": "bench", "max_tokens": self.max_tokens, "temperature": 1.0, "seed": i,
                "stream": True, "messages": [{"role": "user", "content":
                                              f"Write a long story about ship number {i}."}]}
        while not self.stop.is_set():  # one answer after another, for as long as it runs
            with httpx.stream("POST", f"{self.base}/v1/chat/completions", json=body,
                              timeout=1800) as r:
                for line in r.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("data: {"):
                        self.tokens += 1

    def __enter__(self) -> _Busy:
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + 300
        while self.tokens < 4 * self.n and time.monotonic() < deadline:
            time.sleep(0.2)  # all of them streaming before the measured request goes in
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=30)


_PEER = """
import json, os, sys, time
from llama_cpp import Llama
path, n = sys.argv[1], int(sys.argv[2])
threads = os.cpu_count()
llm = Llama(model_path=path, n_ctx=n + 64, n_batch=512, n_ubatch=512, n_threads=threads,
            n_threads_batch=threads, verbose=False)
text = open(sys.argv[3]).read()
tokens = llm.tokenize(text.encode(), add_bos=True)
while len(tokens) < n:
    tokens += tokens[1:]
tokens = tokens[:n]
start = time.perf_counter()
llm.eval(tokens)
took = time.perf_counter() - start
print(json.dumps({"tokens": n, "seconds": round(took, 3), "threads": threads,
                  "tokens_per_s": round(n / took, 1)}))
"""


def _llama_cpp_read(gguf: Path, tokens: int, text_file: Path) -> dict[str, Any]:
    """llama-cpp-python reading `tokens` tokens of `text_file`'s text, in its own process."""
    p = subprocess.run([sys.executable, "-c", _PEER, str(gguf), str(tokens), str(text_file)],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"llama-cpp-python: {p.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def run(request: Path = REQUEST, *, quick: bool = False) -> dict[str, Any]:
    from ..runtimes.models import default_model_path

    recorded = json.loads(request.read_text())
    body = recorded["body"]
    if quick:  # a smoke run: the conversation without its 11k tokens of system prompt and tools
        body = {k: v for k, v in body.items() if k not in ("system", "tools")}
    body = {**body, "max_tokens": 8}
    load_before = os.getloadavg()[0]
    server_args = ("--ctx-size", str(CTX), "--any-model-name")
    out: dict[str, Any] = {"command": "kaname bench prefill" + (" --quick" if quick else ""),
                           "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                           "machine": machine(), "request": str(request.relative_to(ROOT))
                           if request.is_relative_to(ROOT) else str(request),
                           "server": "kaname serve " + " ".join(server_args)}
    with ServerProcess(*server_args, startup_timeout=300) as server:
        out["alone"] = _reads(server.url, body)
    with ExitStack() as stack:
        server = stack.enter_context(ServerProcess(*server_args, startup_timeout=300))
        # long answers, each within what the 32k cache leaves beside the 12k-token prompt
        busy = stack.enter_context(_Busy(server.url, BUSY, 64 if quick else 1000))
        out["busy_batch"] = {**_reads(server.url, body), "other_sequences": busy.n}
    text_file = request  # its JSON text is as good as any to read: llama.cpp reads tokens
    peer = _llama_cpp_read(default_model_path(), out["alone"]["prompt_tokens"], text_file)
    out["llama_cpp_python"] = {**peer, "version": version_of("llama-cpp-python")}
    cold = out["alone"]["cold_s"]
    out["ratios"] = {
        "cold_of_llama_cpp": round(cold / peer["seconds"], 3),
        "busy_cold_of_llama_cpp": round(out["busy_batch"]["cold_s"] / peer["seconds"], 3),
        "retry_of_cold": out["alone"]["retry_of_cold"],
        "next_turn_of_cold": out["alone"]["next_turn_of_cold"],
        "busy_retry_of_cold": out["busy_batch"]["retry_of_cold"],
        "busy_next_turn_of_cold": out["busy_batch"]["next_turn_of_cold"]}
    r = out["ratios"]
    out["targets_met"] = {
        "cold_within_1.3x_llama_cpp": r["cold_of_llama_cpp"] <= 1.3,
        "retry_and_next_turn_within_15pct": max(
            r["retry_of_cold"], r["next_turn_of_cold"], r["busy_retry_of_cold"],
            r["busy_next_turn_of_cold"]) <= 0.15}
    out["run"] = {"loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    return out


def main(*, quick: bool = False, as_json: bool = False, request: Path | None = None) -> int:
    result = run(request or REQUEST, quick=quick)
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    a, b, p, r = (result["alone"], result["busy_batch"], result["llama_cpp_python"],
                  result["ratios"])
    print(f"{result['command']}  ({result['date']}; {result['machine']})")
    print(f"prompt {a['prompt_tokens']} tokens ({result['request']}), {result['server']}")
    for name, x in (("alone", a), (f"beside {b['other_sequences']} streams", b)):
        print(f"  {name:18} cold {x['cold_s']:7.2f} s ({x['cold_tokens_per_s']:5.0f} tok/s)  "
              f"retry {x['retry_s']:6.2f} s ({x['retry_of_cold']:.1%})  next turn "
              f"{x['next_turn_s']:6.2f} s ({x['next_turn_of_cold']:.1%})")
    print(f"  llama-cpp-python {p['version']}: {p['tokens']} tokens in {p['seconds']:.2f} s "
          f"({p['tokens_per_s']:.0f} tok/s, {p['threads']} threads); kaname cold / llama.cpp "
          f"{r['cold_of_llama_cpp']:.2f}x alone, {r['busy_cold_of_llama_cpp']:.2f}x busy")
    print(f"  targets: {result['targets_met']}; load average {result['run']['loadavg_1m']}")
    return 0
