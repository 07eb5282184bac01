"""What the edges cost: one turn asked through chat completions, the Responses API and
Anthropic's Messages API, side by side on one `kaname serve` (random-logits model, so the
figures are kaname's own overhead, not a model's); and what binding a custom tool's input to a
Lark grammar inside a JSON string costs per token against the same grammar unescaped.

    .venv/bin/python scripts/bench_apis.py --requests 40

Each request is the same turn (a user message, one tool, tool_choice required, no reasoning,
seeded) in each API's shape, plain and streamed; the three answers of one seed must be the
same call. Run it
alone on the machine: the figures are latencies. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from kaname.bench.common import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "days": {"type": "integer", "minimum": 1,
                                                    "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
QUESTION = "What will the weather be in Osaka for the next three days?"
PATCH = r"""
start: "*** Begin Patch" LF hunk+ "*** End Patch" LF?
hunk: "*** Add File: " PATH LF ("+" LINE LF)+
    | "*** Delete File: " PATH LF
PATH: /[A-Za-z0-9_.\/-]{1,24}/
LINE: /[^\n]{0,40}/
%import common.LF
"""


def _bodies(seed: int, stream: bool) -> dict[str, dict[str, Any]]:
    common = {"model": "random", "seed": seed, "temperature": 1.0, "stream": stream}
    return {
        "/v1/chat/completions": {
            **common, "max_tokens": 160, "tool_choice": "required",
            "parallel_tool_calls": False, "reasoning_effort": "none",
            "messages": [{"role": "user", "content": QUESTION}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                                                        "parameters": PARAMS}}]},
        "/v1/responses": {
            **common, "max_output_tokens": 160, "tool_choice": "required",
            "parallel_tool_calls": False, "input": QUESTION, "reasoning": {"effort": "none"},
            "tools": [{"type": "function", "name": "get_weather", "parameters": PARAMS}]},
        "/v1/messages": {
            **common, "max_tokens": 160, "thinking": {"type": "disabled"},
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [{"role": "user", "content": QUESTION}],
            "tools": [{"name": "get_weather", "input_schema": PARAMS}]},
    }


def _call(path: str, text: str, stream: bool) -> Any:
    """The (name, arguments) of the turn's call, read from the API's answer."""
    if stream:
        if path == "/v1/chat/completions":
            args, name = "", None
            for line in text.splitlines():
                if line.startswith("data: {"):
                    for c in json.loads(line[6:])["choices"]:
                        for tc in c["delta"].get("tool_calls") or []:
                            name = name or tc["function"].get("name")
                            args += tc["function"].get("arguments", "")
            return name, json.loads(args)
        last = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        if path == "/v1/responses":
            return _call(path, json.dumps(last[-1]["response"]), False)
        parts: dict[int, str] = {}
        names: dict[int, str] = {}
        for e in last:
            if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use":
                names[e["index"]] = e["content_block"]["name"]
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
                parts[e["index"]] = parts.get(e["index"], "") + e["delta"]["partial_json"]
        (i,) = names
        return names[i], json.loads(parts[i])
    body = json.loads(text)
    if path == "/v1/chat/completions":
        fn = body["choices"][0]["message"]["tool_calls"][0]["function"]
        return fn["name"], json.loads(fn["arguments"])
    if path == "/v1/responses":
        item = next(o for o in body["output"] if o["type"] == "function_call")
        return item["name"], json.loads(item["arguments"])
    block = next(b for b in body["content"] if b["type"] == "tool_use")
    return block["name"], block["input"]


def bench_http(requests: int) -> None:
    log = ROOT / "runs" / "bench-apis-server.log"
    log.parent.mkdir(exist_ok=True)
    with ServerProcess("--model", "random", "--format", "qwen3", startup_timeout=120,
                       log_path=log) as server:
        url = server.url
        times: dict[tuple[str, bool], list[float]] = {}
        same = 0
        with httpx.Client(timeout=60) as http:
            for stream in (False, True):  # warm up each path once
                for path, body in _bodies(10**6, stream).items():
                    http.post(url + path, json=body).raise_for_status()
            for seed in range(requests):
                for stream in (False, True):
                    calls = []
                    for path, body in _bodies(seed, stream).items():
                        t0 = time.perf_counter()
                        r = http.post(url + path, json=body)
                        times.setdefault((path, stream), []).append(time.perf_counter() - t0)
                        r.raise_for_status()
                        calls.append(_call(path, r.text, stream))
                    same += all(c == calls[0] for c in calls)
    load = os.getloadavg()[0]
    print(f"\n{requests} seeds × plain/streamed, random model, load average {load:.2f}; "
          f"the same call from all three APIs: {same}/{2 * requests}\n")
    print("| endpoint | plain median ms | ratio | streamed median ms | ratio |")
    print("|---|---|---|---|---|")
    base = {s: statistics.median(times[("/v1/chat/completions", s)]) for s in (False, True)}
    for path in _bodies(0, False):
        plain = statistics.median(times[(path, False)])
        streamed = statistics.median(times[(path, True)])
        print(f"| `{path}` | {plain * 1e3:.1f} | {plain / base[False]:.2f} | "
              f"{streamed * 1e3:.1f} | {streamed / base[True]:.2f} |")


def bench_custom(seeds: int) -> None:
    """Per-token constraint time: the patch grammar as a completion constraint (raw), and as a
    custom tool's input inside qwen3's JSON call (escaped), on the Gemma vocabulary."""
    from kaname.decoding import SamplingParams, decode
    from kaname.formats import TurnRequest, build_grammar, get_format, tools_from_openai
    from kaname.grammar import GrammarCompiler, Lark
    from kaname.runtimes.llamacpp import default_vocab
    from kaname.runtimes.random_logits import RandomLogitsRuntime

    vocab = default_vocab()
    tok = vocab.tokenizer
    fmt = get_format("qwen3")
    tools = tools_from_openai([{"type": "custom", "custom": {"name": "apply_patch", "format": {
        "type": "grammar", "grammar": {"syntax": "lark", "definition": PATCH}}}}])
    grammars = {"raw Lark (completion)": PATCH,
                "custom tool, escaped in JSON": build_grammar(
                    fmt, TurnRequest(tools=tools, tool_choice="apply_patch"), tok)}
    runtime = RandomLogitsRuntime(tok, eos_token_ids=vocab.eos_token_ids)
    print(f"\nconstraint time per token, {seeds} seeds, Gemma vocabulary, random model\n")
    print("| grammar | compile ms | tokens | µs/token median | µs/token p95 |")
    print("|---|---|---|---|---|")
    for label, lark in grammars.items():
        t0 = time.perf_counter()
        compiled = GrammarCompiler(tok, cache_size=0).compile(Lark(lark))
        compile_ms = (time.perf_counter() - t0) * 1e3
        costs: list[int] = []
        for seed in range(seeds):
            runtime.seed = seed
            d = decode(runtime, [2], compiled.new_matcher(),
                       SamplingParams(temperature=0.9, seed=seed), max_tokens=300)
            costs += d.constraint_ns
        costs.sort()
        print(f"| {label} | {compile_ms:.1f} | {len(costs)} | "
              f"{statistics.median(costs) / 1e3:.1f} | "
              f"{costs[int(len(costs) * 0.95)] / 1e3:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    bench_http(args.requests)
    bench_custom(args.seeds)


if __name__ == "__main__":
    main()
