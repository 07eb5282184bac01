"""`kaname bench engine`: what the constraint costs per token, and what it does to tokens/s.

(a) Per-token constraint cost on the embedded Gemma 3 270M (262k vocabulary), greedy. The
    generation is driven step by step here so that, on the *same* logits row, two paths pick
    the next token:
      kaname: TokenPicker.pick (lazy: raw argmax, one-token check, full mask only on a miss)
          + consume_token + forced tokens;
      plain llguidance (what peers do): fill_next_token_bitmask + apply_token_bitmask_inplace
          + argmax + consume_token + forced tokens, on a deep copy of the matcher taken before
          the step (copying the matcher and the logits row is not timed).
    Greedy is exact, so both must pick the same token: a mismatch is a bug and is counted.
    Not compared: steps where llguidance forces by mask (a mask of one token where the grammar
    forces bytes), since kaname's mask also holds the other tokens spelling those bytes
    (`Matcher.widen`): there the model may choose another split, by design.
    The order of the two paths alternates per step so neither always finds warm caches.
(b) Tokens/s end to end: Engine.generate with a JSON schema vs the same loop with no matcher
    (same prompt, same max_tokens), medians over repetitions.
(c) Sampling per token (greedy, temperature, + top_p / top_k / min_p) on the random-logits model
    over the same 262k vocabulary, in process: the "sampling" key, from `kaname bench sampling`
    (which also measures it through the server).
(d) Verified drafts (`drafts_bench`): tokens/s with drafts, forced tokens only, neither, and
    unconstrained, on these cases and on extraction cases; acceptance; greedy identity.

The workload, `common.CASES`, is shared with `kaname bench e2e`.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import llguidance as llg
import llguidance.numpy as lln
import numpy as np
from numpy.typing import NDArray

from ..decoding import SamplingParams, TokenPicker, decode
from ..decoding.masks import MaskBuffer
from ..engine import Engine
from ..errors import KanameError
from ..grammar import CompiledConstraint, Matcher
from ..runtimes.base import Runtime
from . import drafts_bench, sampling_bench
from .common import CASES, Case, machine, percentile, version_of

TARGETS = {"overhead_ratio_max": 0.5, "tps_ratio_min": 1.0}


@dataclass(frozen=True)
class Config:
    cases: tuple[Case, ...]
    max_tokens: int
    repetitions: int


QUICK = Config(CASES[:1], max_tokens=40, repetitions=1)
FULL = Config(CASES, max_tokens=200, repetitions=3)

# ---------------------------------------------------------------------------------------------
# Pure helpers


def summarize_us(ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / mean in µs of durations given in ns."""
    us = [n / 1000 for n in ns]
    return {"p50": percentile(us, 50), "p99": percentile(us, 99), "mean": statistics.fmean(us)}


def ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


# ---------------------------------------------------------------------------------------------
# (a) Per-token constraint cost, both paths on the same logits


@dataclass
class Step:
    """One sampled token (plus the forced tokens that followed it), timed on both paths."""

    kind: str  # "lazy_hit" or "full_mask": how kaname's picker got its token
    tokens: int  # tokens committed this step: 1 + forced
    kaname_pick_ns: int
    kaname_commit_ns: int
    plain_mask_ns: int
    plain_apply_ns: int
    plain_argmax_ns: int
    plain_commit_ns: int
    mismatch: bool

    @property
    def kaname_ns(self) -> int:
        return self.kaname_pick_ns + self.kaname_commit_ns

    @property
    def plain_ns(self) -> int:
        return (self.plain_mask_ns + self.plain_apply_ns + self.plain_argmax_ns
                + self.plain_commit_ns)


def _commit(matcher: llg.LLMatcher, token: int, eos: frozenset[int]) -> list[int]:
    """Consume `token` and the forced tokens after it with llguidance's own calls, as a plain
    llguidance user does; returns the forced tokens."""
    if token in eos:
        return []
    if not matcher.consume_token(token):
        raise KanameError(f"matcher refused token {token}: {matcher.get_error()}")
    forced: list[int] = matcher.compute_ff_tokens()
    if forced and not matcher.consume_tokens(forced):
        raise KanameError(f"matcher refused its forced tokens: {matcher.get_error()}")
    return forced


def _commit_kaname(matcher: Matcher, token: int, eos: frozenset[int]) -> list[int]:
    """`_commit` through kaname's matcher, which must see every token it is to mask after."""
    if token in eos:
        return []
    if not matcher.accept_tokens([token]):
        raise KanameError(f"matcher refused token {token}: {matcher.error()}")
    forced = matcher.forced_tokens()
    if forced and not matcher.accept_tokens(forced):
        raise KanameError(f"matcher refused its forced tokens: {matcher.error()}")
    return forced


def _kaname_path(picker: TokenPicker, matcher: Matcher, logits: NDArray[np.float32],
                 eos: frozenset[int]) -> tuple[int, list[int], int, int]:
    t0 = time.perf_counter_ns()
    token = picker.pick(logits, matcher)
    t1 = time.perf_counter_ns()
    forced = _commit_kaname(matcher, token, eos)
    t2 = time.perf_counter_ns()
    return token, forced, t1 - t0, t2 - t1


def _plain_path(matcher: llg.LLMatcher, bitmask: NDArray[np.int32], row: NDArray[np.float32],
                eos: frozenset[int]) -> tuple[int, list[int], tuple[int, int, int, int]]:
    t0 = time.perf_counter_ns()
    lln.fill_next_token_bitmask(matcher, bitmask)
    t1 = time.perf_counter_ns()
    lln.apply_token_bitmask_inplace(row, bitmask)
    t2 = time.perf_counter_ns()
    token = int(np.argmax(row))
    t3 = time.perf_counter_ns()
    forced = _commit(matcher, token, eos)
    t4 = time.perf_counter_ns()
    return token, forced, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)


def trace_steps(runtime: Runtime, compiled: CompiledConstraint, prompt: Sequence[int],
                max_tokens: int) -> list[Step]:
    """Greedy constrained generation, timing kaname's and the plain path at every step."""
    tok = runtime.tokenizer
    eos = frozenset(runtime.eos_token_ids)
    picker = TokenPicker(SamplingParams(), MaskBuffer(runtime.n_vocab, tok.vocab_size), eos,
                         lazy=True)
    bitmask = lln.allocate_token_bitmask(1, tok.vocab_size)
    matcher = compiled.new_matcher()
    steps: list[Step] = []
    produced = 0
    logits = runtime.start(prompt)
    while produced < max_tokens and not matcher.is_stopped():
        shadow = matcher.llg.deep_copy()
        forcing = bool(matcher.llg.deep_copy().compute_ff_tokens())  # (not on `shadow`: its
        # forced tokens would be cached for the timed mask)
        # The plain path masks in place, so it gets a copy. Copying also brings a freshly
        # computed row into this core's cache: its first touch (~60 µs here) counts for neither.
        row = logits.copy()
        before = picker.stats.lazy_hits
        if len(steps) % 2 == 0:
            token, forced, k_pick, k_commit = _kaname_path(picker, matcher, logits, eos)
            p_token, p_forced, p_ns = _plain_path(shadow, bitmask, row, eos)
        else:
            p_token, p_forced, p_ns = _plain_path(shadow, bitmask, row, eos)
            token, forced, k_pick, k_commit = _kaname_path(picker, matcher, logits, eos)
        kind = "lazy_hit" if picker.stats.lazy_hits > before else "full_mask"
        steps.append(Step(kind, 1 + len(forced), k_pick, k_commit, *p_ns,
                          mismatch=not forcing and (token, forced) != (p_token, p_forced)))
        if token in eos:
            break
        produced += 1 + len(forced)
        logits = runtime.advance([token, *forced])
    return steps


# ---------------------------------------------------------------------------------------------
# (b) Tokens/s, constrained vs unconstrained


@dataclass
class Run:
    tokens: int
    seconds: float
    forced: int = 0
    lazy_hits: int = 0
    full_masks: int = 0
    finish_reason: str = ""
    valid: bool | None = None


def constrained_run(engine: Engine, case: Case, max_tokens: int) -> Run:
    t0 = time.perf_counter()
    r = engine.generate(case.prompt, case.schema, max_tokens=max_tokens)
    seconds = time.perf_counter() - t0
    return Run(r.usage.completion_tokens, seconds, r.usage.forced_tokens, r.stats.lazy_hits,
               r.stats.full_masks, r.finish_reason, r.valid)


def unconstrained_run(engine: Engine, case: Case, max_tokens: int) -> Run:
    # Tokenising is inside the timer because Engine.generate tokenises inside it too.
    t0 = time.perf_counter()
    d = decode(engine.runtime, engine.runtime.tokenize(case.prompt), None, SamplingParams(),
               max_tokens=max_tokens)
    seconds = time.perf_counter() - t0
    return Run(d.usage.completion_tokens, seconds, finish_reason=d.finish_reason)


# ---------------------------------------------------------------------------------------------
# Running and reporting


@dataclass
class CaseResult:
    name: str
    steps: list[Step] = field(default_factory=list)
    constrained: list[Run] = field(default_factory=list)
    unconstrained: list[Run] = field(default_factory=list)


def run_case(engine: Engine, case: Case, config: Config) -> CaseResult:
    compiled = engine.compile(case.schema)  # compiled once, outside every timer
    prompt = engine.runtime.tokenize(case.prompt)
    # Evaluate the prompt once untimed: every timed run then finds it in the KV cache alike.
    engine.runtime.start(prompt)
    result = CaseResult(case.name)
    for rep in range(config.repetitions):
        gc.collect()
        gc.disable()  # a collection inside a timed step is noise, not constraint cost
        try:
            result.steps += trace_steps(engine.runtime, compiled, prompt, config.max_tokens)
        finally:
            gc.enable()
        # Alternate which mode goes first so drift (thermal, neighbours) hits both alike.
        modes = (constrained_run, unconstrained_run)
        for mode in modes if rep % 2 == 0 else modes[::-1]:
            out = mode(engine, case, config.max_tokens)
            target = result.constrained if mode is constrained_run else result.unconstrained
            target.append(out)
    return result


def _tps(runs: Sequence[Run]) -> float:
    return share(sum(r.tokens for r in runs), sum(r.seconds for r in runs))


def _path_breakdown(steps: Sequence[Step]) -> dict[str, dict[str, float]]:
    total = sum(s.kaname_ns for s in steps)
    out: dict[str, dict[str, float]] = {}
    for kind in ("lazy_hit", "full_mask"):
        ns = [s.kaname_ns for s in steps if s.kind == kind]
        out[kind] = {
            "steps": len(ns),
            "step_share": share(len(ns), len(steps)),
            "time_share": share(sum(ns), total),
            "mean_us": statistics.fmean(ns) / 1000 if ns else 0.0,
        }
    return out


def _phase_shares(steps: Sequence[Step]) -> dict[str, dict[str, float]]:
    k_total = sum(s.kaname_ns for s in steps)
    p_total = sum(s.plain_ns for s in steps)
    return {
        "kaname": {
            "pick": share(sum(s.kaname_pick_ns for s in steps), k_total),
            "commit_and_forced": share(sum(s.kaname_commit_ns for s in steps), k_total),
        },
        "plain_llguidance": {
            "fill_bitmask": share(sum(s.plain_mask_ns for s in steps), p_total),
            "apply_bitmask": share(sum(s.plain_apply_ns for s in steps), p_total),
            "argmax": share(sum(s.plain_argmax_ns for s in steps), p_total),
            "commit_and_forced": share(sum(s.plain_commit_ns for s in steps), p_total),
        },
    }


def report(results: Sequence[CaseResult], config: Config, quick: bool) -> dict[str, Any]:
    """Everything measured, as one JSON-ready dict."""
    steps = [s for r in results for s in r.steps]
    kaname = summarize_us([s.kaname_ns for s in steps])
    plain = summarize_us([s.plain_ns for s in steps])
    # The plain path minus llguidance.numpy's apply kernel: what a peer with a free (fused,
    # on-device) apply would pay. A floor for peers, not a path anyone runs on this CPU.
    floor = summarize_us([s.plain_ns - s.plain_apply_ns for s in steps])
    # Paired per repetition: constrained and unconstrained of the same repetition ran
    # back to back, so their ratio cancels slow drift better than a ratio of medians.
    reps = range(config.repetitions)
    c_tps = [_tps([r.constrained[i] for r in results]) for i in reps]
    u_tps = [_tps([r.unconstrained[i] for r in results]) for i in reps]
    runs = [run for r in results for run in r.constrained]
    completion = sum(r.tokens for r in runs)
    picks = sum(r.lazy_hits + r.full_masks for r in runs)
    overhead = ratio(kaname["mean"], plain["mean"])
    tps_ratio = statistics.median(ratio(c, u) for c, u in zip(c_tps, u_tps, strict=True))
    return {
        "benchmark": "engine",
        "mode": "quick" if quick else "full",
        "overhead_ratio_vs_llguidance": overhead,
        "overhead_ratio_p50": ratio(kaname["p50"], plain["p50"]),
        "constrained_over_unconstrained_tps": tps_ratio,
        "overhead_ratio_vs_plain_without_apply": ratio(kaname["mean"], floor["mean"]),
        "per_token_us": {"kaname": kaname, "plain_llguidance": plain,
                         "plain_llguidance_without_apply": floor},
        "steps": len(steps),
        "tokens_per_step": share(sum(s.tokens for s in steps), len(steps)),
        "kaname_paths": _path_breakdown(steps),
        "phase_shares": _phase_shares(steps),
        "tokens_per_s": {"constrained": statistics.median(c_tps),
                         "unconstrained": statistics.median(u_tps)},
        "forced_share": share(sum(r.forced for r in runs), completion),
        "lazy_hit_share": share(sum(r.lazy_hits for r in runs), picks),
        "greedy_mismatches": sum(s.mismatch for s in steps),
        "targets": TARGETS,
        "targets_met": {
            "overhead_ratio": overhead <= TARGETS["overhead_ratio_max"],
            "tps_ratio": tps_ratio >= TARGETS["tps_ratio_min"],
        },
        "cases": [_case_json(r) for r in results],
        "config": {"max_tokens": config.max_tokens, "repetitions": config.repetitions,
                   "model": "Gemma 3 270M Q4_K_M (llama.cpp)", "sampling": "greedy",
                   "llguidance": version_of("llguidance"),
                   "llama_cpp_python": version_of("llama-cpp-python")},
        "machine": machine(),
    }


def _case_json(r: CaseResult) -> dict[str, Any]:
    last = r.constrained[-1]
    return {
        "name": r.name,
        "steps": len(r.steps),
        "completion_tokens": last.tokens,
        "forced_tokens": last.forced,
        "finish_reason": last.finish_reason,
        "valid": last.valid,
        "kaname_us_p50": summarize_us([s.kaname_ns for s in r.steps])["p50"],
        "plain_us_p50": summarize_us([s.plain_ns for s in r.steps])["p50"],
        "tps_constrained": statistics.median(_tps([x]) for x in r.constrained),
        "tps_unconstrained": statistics.median(_tps([x]) for x in r.unconstrained),
        "runs": {"constrained": [asdict(x) for x in r.constrained],
                 "unconstrained": [asdict(x) for x in r.unconstrained]},
    }


def print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    pt = data["per_token_us"]
    t = Table(title=f"(a) constraint cost per sampled token, µs ({data['steps']} steps, "
                    f"{data['tokens_per_step']:.2f} tokens/step)")
    for col in ("path", "p50", "p99", "mean"):
        t.add_column(col, justify="left" if col == "path" else "right")
    for name, key in (("kaname (lazy)", "kaname"), ("plain llguidance", "plain_llguidance"),
                      ("plain, apply not counted", "plain_llguidance_without_apply")):
        t.add_row(name, *(f"{pt[key][q]:,.1f}" for q in ("p50", "p99", "mean")))
    console.print(t)

    b = Table(title="kaname's picks by path")
    for col in ("path", "steps", "share of steps", "share of kaname time", "mean µs"):
        b.add_column(col, justify="left" if col == "path" else "right")
    for kind, v in data["kaname_paths"].items():
        b.add_row(kind, str(v["steps"]), f"{v['step_share']:.1%}", f"{v['time_share']:.1%}",
                  f"{v['mean_us']:,.1f}")
    console.print(b)

    s = Table(title=f"(b) end to end, median of {data['config']['repetitions']} repetition(s)")
    s.add_column("case")
    for col in ("tokens", "forced", "finish", "valid", "tok/s constrained",
                "tok/s unconstrained"):
        s.add_column(col, justify="right")
    for c in data["cases"]:
        s.add_row(c["name"], str(c["completion_tokens"]), str(c["forced_tokens"]),
                  c["finish_reason"], str(c["valid"]), f"{c['tps_constrained']:.1f}",
                  f"{c['tps_unconstrained']:.1f}")
    tps = data["tokens_per_s"]
    s.add_row("all", "", "", "", "", f"{tps['constrained']:.1f}", f"{tps['unconstrained']:.1f}",
              style="bold")
    console.print(s)

    tg, met = data["targets"], data["targets_met"]
    console.print(
        f"overhead ratio kaname/plain (means): {data['overhead_ratio_vs_llguidance']:.3f} "
        f"(p50s: {data['overhead_ratio_p50']:.3f}; target ≤ {tg['overhead_ratio_max']}: "
        f"{'met' if met['overhead_ratio'] else 'NOT met'}; vs plain without its apply: "
        f"{data['overhead_ratio_vs_plain_without_apply']:.3f})\n"
        f"constrained / unconstrained tok/s: {data['constrained_over_unconstrained_tps']:.3f} "
        f"(target ≥ {tg['tps_ratio_min']}: {'met' if met['tps_ratio'] else 'NOT met'})\n"
        f"forced share {data['forced_share']:.1%}, lazy-hit share {data['lazy_hit_share']:.1%}, "
        f"greedy mismatches {data['greedy_mismatches']}\n"
        f"machine: {data['machine']}")
    if "sampling" in data:
        sampling_bench.print_in_process(data["sampling"])


def run(config: Config, quick: bool) -> dict[str, Any]:
    from ..runtimes.llamacpp import LlamaCppRuntime

    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    engine = Engine(LlamaCppRuntime.default())
    results = []
    for case in config.cases:
        print(f"kaname bench: {case.name}…", file=sys.stderr)
        results.append(run_case(engine, case, config))
    data = report(results, config, quick)
    print("kaname bench: sampling modes on the random model…", file=sys.stderr)
    data["sampling"] = sampling_bench.in_process(sampling_bench.QUICK if quick
                                                 else sampling_bench.FULL)
    print("kaname bench: drafts…", file=sys.stderr)
    data["drafts"] = drafts_bench.measure(engine, repetitions=config.repetitions,
                                          max_tokens=config.max_tokens, cases=config.cases)
    # Timings on a shared machine are only as good as its idleness: record the load around
    # the run (this run itself adds ~1-2 to it) so a reader can tell a disturbed run.
    data["run"] = {"started_utc": started,
                   "loadavg_1m": {"before": load_before, "after": os.getloadavg()[0]}}
    return data


def main(quick: bool = False, as_json: bool = False) -> int:
    """Run the engine benchmark; exit status 1 if the greedy paths ever disagreed (kaname's
    pick and plain llguidance's, or decoding with drafts and without)."""
    try:
        data = run(QUICK if quick else FULL, quick)
    except KanameError as e:
        print(f"kaname: error: {e}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(data))
    else:
        print_tables(data)
        drafts_bench.print_table(data["drafts"])
    if data["greedy_mismatches"]:
        print(f"kaname bench: {data['greedy_mismatches']} greedy mismatches between kaname and "
              "plain llguidance", file=sys.stderr)
        return 1
    if not data["drafts"]["greedy_identical"]:
        print("kaname bench: greedy output with drafts differs from decoding one token per "
              "model call", file=sys.stderr)
        return 1
    return 0
