"""`kaname bench sampling`: what each sampling mode costs per token on a 262k vocabulary.

The random-logits model over the embedded model's vocabulary (262,144 tokens), so that the
figures are the sampler's and not a model's. Modes: greedy, temperature 0.8, and temperature
0.8 with top_p 0.9, top_k 40 or min_p 0.05.
  in process: `decode` under a free-text grammar, 200 tokens a run; per token, the median of
      pick + commit (the sampler and the grammar) and of the whole step (the model's row too).
      `kaname bench engine` reports this part as well (its "sampling" key).
  through the server: `kaname serve --model random` (started here on a free port, or --url),
      chat completions and completions of 200 tokens; per token, the median over runs of the
      request's wall time / completion tokens, as a client sees it, and (for the server started
      here, from /proc) the server's CPU time / completion tokens: on a shared machine, wall
      time also counts the time the scheduler gives to others. A mode whose field the server
      ignores (its `kaname.ignored`; an --url server older than its top_k and min_p) is left
      out there, since it would time temperature alone.
Modes take turns within each repetition, so drift (neighbours on a shared machine) hits all.
Targets (issue 21): temperature <= 2x greedy, each truncation <= 1.2x temperature alone, per
token through the server.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import ServerProcess, machine, version_of

MODES: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0.0},
    "temperature": {"temperature": 0.8},
    "top_p": {"temperature": 0.8, "top_p": 0.9},
    "top_k": {"temperature": 0.8, "top_k": 40},
    "min_p": {"temperature": 0.8, "min_p": 0.05},
}
TRUNCATIONS = ("top_p", "top_k", "min_p")
TARGETS = {"temperature_over_greedy_max": 2.0, "truncation_over_temperature_max": 1.2}
PROMPT = "Write a long paragraph about anything."


@dataclass(frozen=True)
class Config:
    max_tokens: int
    repetitions: int


QUICK = Config(max_tokens=50, repetitions=1)
FULL = Config(max_tokens=200, repetitions=11)


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    """Temperature over greedy, each truncation measured over temperature."""
    out = {"temperature_over_greedy": medians["temperature"] / medians["greedy"]}
    for mode in TRUNCATIONS:
        if mode in medians:
            out[f"{mode}_over_temperature"] = medians[mode] / medians["temperature"]
    return out


def targets_met(ratios: dict[str, float]) -> dict[str, bool]:
    met = {}
    for key, value in ratios.items():
        limit = TARGETS["temperature_over_greedy_max" if key == "temperature_over_greedy"
                        else "truncation_over_temperature_max"]
        met[key] = value <= limit
    return met


def _turns(repetitions: int) -> Iterator[tuple[int, list[str]]]:
    """Each repetition runs every mode, starting one mode later than the last."""
    names = list(MODES)
    for rep in range(repetitions):
        k = rep % len(names)
        yield rep, names[k:] + names[:k]


# ---------------------------------------------------------------------------------------------
# In process


def in_process(config: Config) -> dict[str, Any]:
    """Per-token costs of each mode under a free-text grammar, on the random-logits model."""
    from ..decoding import SamplingParams, decode
    from ..grammar import GrammarCompiler, Text
    from ..runtimes.llamacpp import default_vocab
    from ..runtimes.random_logits import RandomLogitsRuntime

    vocab = default_vocab()
    runtime = RandomLogitsRuntime(vocab.tokenizer, eos_token_ids=vocab.eos_token_ids,
                                  bos_token_id=vocab.bos_token_id)
    compiled = GrammarCompiler(vocab.tokenizer).compile(Text())
    pick: dict[str, list[int]] = {m: [] for m in MODES}
    step: dict[str, list[int]] = {m: [] for m in MODES}
    for rep, order in _turns(config.repetitions):
        for mode in order:
            gc.collect()
            gc.disable()  # a collection inside a timed step is noise, not sampling cost
            try:
                t0 = time.perf_counter_ns()
                d = decode(runtime, [2], compiled.new_matcher(),
                           SamplingParams(seed=rep, **MODES[mode]), max_tokens=config.max_tokens)
                wall = time.perf_counter_ns() - t0
            finally:
                gc.enable()
            pick[mode] += d.constraint_ns
            step[mode].append(wall // max(d.usage.completion_tokens, 1))
    pick_us = {m: statistics.median(v) / 1000 for m, v in pick.items()}
    step_us = {m: statistics.median(v) / 1000 for m, v in step.items()}
    return {
        "pick_and_commit_us_p50": pick_us,
        "step_us_p50": step_us,
        "ratios_pick_and_commit": _ratios(pick_us),
        "ratios_step": _ratios(step_us),
        "config": {"model": "random logits, embedded vocabulary", "n_vocab": runtime.n_vocab,
                   "grammar": "free text", "max_tokens": config.max_tokens,
                   "repetitions": config.repetitions, "modes": MODES},
    }


# ---------------------------------------------------------------------------------------------
# Through the server


def cpu_ns(pid: int) -> int | None:
    """CPU time so far of every thread of process `pid`, in ns (Linux schedstat), or None."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    total = 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that has just ended
            continue
    return total


ENDPOINTS = ("chat", "completions")


def _request(client: Any, endpoint: str, model: str, mode: str, seed: int,
             max_tokens: int) -> int:
    """One generation; its completion tokens."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "seed": seed,
                            **MODES[mode]}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": PROMPT}]
        r = client.post("/v1/chat/completions", json=body)
    else:
        body["prompt"] = PROMPT
        r = client.post("/v1/completions", json=body)
    r.raise_for_status()
    tokens: int = r.json()["usage"]["completion_tokens"]
    return tokens


def ignored_modes(client: Any, model: str) -> list[str]:
    """The modes whose field the server ignores (`kaname.ignored` of a chat completion: a
    server before top_k and min_p were read): timing them would time temperature alone."""
    r = client.post("/v1/chat/completions", json={
        "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": PROMPT}],
        **{k: v for params in MODES.values() for k, v in params.items() if k != "temperature"}})
    r.raise_for_status()
    ignored = {i["pointer"] for i in (r.json().get("kaname") or {}).get("ignored", [])}
    return [m for m in TRUNCATIONS if f"/{m}" in ignored]


def through_server(url: str, config: Config, pid: int | None = None) -> dict[str, Any]:
    """ms per completion token of each mode the server accepts, on chat completions and
    completions: wall time, and the server's CPU time where its `pid` is given."""
    import httpx

    with httpx.Client(base_url=url, timeout=600) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        ignored = ignored_modes(client, model)
        modes = [m for m in MODES if m not in ignored]
        wall: dict[str, dict[str, list[float]]] = {e: {m: [] for m in modes} for e in ENDPOINTS}
        cpu: dict[str, dict[str, list[float]]] = {e: {m: [] for m in modes} for e in ENDPOINTS}
        tokens: dict[str, set[int]] = {e: set() for e in ENDPOINTS}
        for endpoint in ENDPOINTS:  # untimed: first requests warm caches and pools
            for mode in modes:
                _request(client, endpoint, model, mode, 0, 8)
        for rep, order in _turns(config.repetitions):
            for mode in (m for m in order if m in modes):
                for endpoint in ENDPOINTS:
                    c0 = cpu_ns(pid) if pid else None
                    t0 = time.perf_counter()
                    n = max(_request(client, endpoint, model, mode, rep, config.max_tokens), 1)
                    seconds = time.perf_counter() - t0
                    c1 = cpu_ns(pid) if pid else None
                    tokens[endpoint].add(n)
                    wall[endpoint][mode].append(seconds * 1000 / n)
                    if c0 is not None and c1 is not None:
                        cpu[endpoint][mode].append((c1 - c0) / 1e6 / n)
    out: dict[str, Any] = {"modes_ignored_by_the_server": ignored}
    for endpoint in ENDPOINTS:
        medians = {m: statistics.median(v) for m, v in wall[endpoint].items()}
        part: dict[str, Any] = {"ms_per_token_p50": medians, "ratios": _ratios(medians),
                                "completion_tokens": sorted(tokens[endpoint])}
        if all(cpu[endpoint].values()):
            cpu_medians = {m: statistics.median(v) for m, v in cpu[endpoint].items()}
            part["cpu_ms_per_token_p50"] = cpu_medians
            part["cpu_ratios"] = _ratios(cpu_medians)
        out[endpoint] = part
    return out


# ---------------------------------------------------------------------------------------------
# Running and reporting


def run(config: Config, url: str | None = None, server: bool = True) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    data: dict[str, Any] = {"benchmark": "sampling", "mode": config.__dict__,
                            "in_process": in_process(config)}
    if server:
        if url:
            data["server"] = through_server(url, config)
        else:
            with ServerProcess("--model", "random") as local:
                data["server"] = through_server(local.url, config, local.pid)
        data["targets"] = TARGETS
        data["targets_met"] = {ep: targets_met(data["server"][ep]["ratios"])
                               for ep in ENDPOINTS}
        data["targets_met_cpu"] = {ep: targets_met(data["server"][ep]["cpu_ratios"])
                                   for ep in ENDPOINTS if "cpu_ratios" in data["server"][ep]}
    data["machine"] = machine()
    data["versions"] = {"numpy": version_of("numpy"), "llguidance": version_of("llguidance")}
    # Timings on a shared machine are only as good as its idleness: the load around the run.
    data["run"] = {"started_utc": started,
                   "loadavg": {"before": load_before, "after": os.getloadavg()}}
    return data


def print_in_process(part: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"sampling per token, in process (random logits, "
                    f"{part['config']['n_vocab']:,} tokens, free-text grammar), medians")
    for col in ("mode", "pick+commit µs", "x greedy", "x temperature", "step µs", "x greedy",
                "x temperature"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    pick, step = part["pick_and_commit_us_p50"], part["step_us_p50"]
    for mode in MODES:
        t.add_row(mode, f"{pick[mode]:,.1f}", f"{pick[mode] / pick['greedy']:.2f}",
                  f"{pick[mode] / pick['temperature']:.2f}", f"{step[mode]:,.1f}",
                  f"{step[mode] / step['greedy']:.2f}", f"{step[mode] / step['temperature']:.2f}")
    Console().print(t)


def print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    print_in_process(data["in_process"])
    console = Console()
    server = data.get("server", {})
    for endpoint in ENDPOINTS if server else ():
        part = server[endpoint]
        ms, cpu = part["ms_per_token_p50"], part.get("cpu_ms_per_token_p50")
        t = Table(title=f"through kaname serve --model random, {endpoint}: per token, median "
                        f"of {data['mode']['repetitions']} (completion tokens "
                        f"{part['completion_tokens']})")
        cols = ["mode", "wall ms", "x greedy", "x temperature"]
        if cpu:
            cols += ["server CPU ms", "x greedy", "x temperature"]
        for col in cols:
            t.add_column(col, justify="left" if col == "mode" else "right")
        for mode in MODES:
            if mode not in ms:
                t.add_row(mode, "ignored by the server (kaname.ignored)")
                continue
            row = [mode, f"{ms[mode]:.3f}", f"{ms[mode] / ms['greedy']:.2f}",
                   f"{ms[mode] / ms['temperature']:.2f}"]
            if cpu:
                row += [f"{cpu[mode]:.3f}", f"{cpu[mode] / cpu['greedy']:.2f}",
                        f"{cpu[mode] / cpu['temperature']:.2f}"]
            t.add_row(*row)
        console.print(t)
    if "targets" in data:
        tg = data["targets"]
        console.print(f"targets: temperature ≤ {tg['temperature_over_greedy_max']}x greedy, "
                      f"top_p / top_k / min_p ≤ {tg['truncation_over_temperature_max']}x "
                      f"temperature; wall: {data['targets_met']}; server CPU: "
                      f"{data.get('targets_met_cpu')}")
    load = data["run"]["loadavg"]
    console.print(f"load average before {load['before']}, after {load['after']}\n"
                  f"machine: {data['machine']}")


def main(quick: bool = False, as_json: bool = False, url: str | None = None,
         server: bool = True) -> int:
    """Run the sampling benchmark. A missed target is reported, not an error: the figures on a
    shared machine move with its load."""
    data = run(QUICK if quick else FULL, url, server)
    if as_json:
        print(json.dumps(data))
    else:
        print_tables(data)
    missed = [f"{ep}: {k}" for ep, met in data.get("targets_met", {}).items()
              for k, ok in met.items() if not ok]
    if missed:
        print(f"kaname bench sampling: targets missed: {', '.join(missed)}", file=sys.stderr)
    return 0
