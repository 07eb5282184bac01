"""`kaname bench e2e`: kaname against its peers end to end, on the same model, in one process.

The embedded Gemma 3 270M (llama.cpp, CPU), the same prompts and JSON Schemas (the four cases of
`kaname bench engine` and its three extraction cases, whose answers are mostly copied from the
prompt), the same prompt token ids, greedy decoding everywhere; engines:

- `kaname`: `Engine.generate` with the schema, verified drafts on (the default);
- `kaname_ceiling`: the same with drafts that are the answer itself (the tokens of an untimed
  generation one token a call): no drafter can propose better, so this is the ceiling of
  verified drafts on this runtime;
- `kaname_full_rows`: the same with llama.cpp's rows, each computed in full in its call (no
  rows from the hidden state, of a few allowed tokens or read lazily:
  `LlamaCppRuntime(few_rows=False)`);
- `kaname_forced`, `kaname_none`: the same with forced tokens committed unverified (kaname
  before verified drafts), and with neither (one token per model call: the output the others
  are compared to, `drafts` in the report);
- `llamacpp_grammar`: llama-cpp-python's own grammar sampling (`LlamaGrammar.from_json_schema`,
  `Llama.create_completion(grammar=...)`);
- `xgrammar`, `outlines`: xgrammar's `GrammarMatcher` / outlines-core's `Guide` masking the
  logits of the same high-level `Llama` through a `logits_processor` (only if installed;
  otherwise listed as unavailable with the reason);
- `unconstrained`: the same `Llama`, no constraint (the peers' baseline), and
  `kaname_unconstrained`: kaname's decode loop with no constraint (kaname's baseline: the two
  drivers are not equally fast, and a ratio should not credit the constraint with that).

Each engine is warmed up once; then, run by run and prompt by prompt, every engine generates
once, the engine order rotating, so drift on a shared machine hits all alike. Figures are
medians over runs. How each figure is measured is in the JSON's `method` (and docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import E2E_ENGINES as ENGINES
from . import E2E_MAX_TOKENS, E2E_QUICK_MAX_TOKENS, E2E_QUICK_RUNS, E2E_RUNS
from .common import CASES, EXTRACTION, first_line, machine, version_of

PEERS = ("llamacpp_grammar", "xgrammar", "outlines")
# kaname's constrained modes: verified drafts (the default), forced tokens unverified, neither
KANAME = ("kaname", "kaname_ceiling", "kaname_full_rows", "kaname_forced", "kaname_none")
CONSTRAINED = (*KANAME, *PEERS)
BASELINE = {**dict.fromkeys(KANAME, "kaname_unconstrained"),
            **dict.fromkeys(PEERS, "unconstrained")}
TARGETS = {"overhead_lowest": "kaname's overhead_us_per_token below every other constrained "
                              "engine's",
           "tps_ratio_vs_llamacpp_grammar_min": 10.0, "tps_ratio_vs_outlines_min": 2.0,
           "kaname_valid_pct": 100.0}


@dataclass(frozen=True)
class Config:
    case_names: tuple[str, ...]
    max_tokens: int
    runs: int


FULL = Config(tuple(c.name for c in (*CASES, *EXTRACTION)), max_tokens=E2E_MAX_TOKENS,
              runs=E2E_RUNS)
QUICK = Config(("company",), max_tokens=E2E_QUICK_MAX_TOKENS, runs=E2E_QUICK_RUNS)

# ---------------------------------------------------------------------------------------------
# Pure helpers


def median(xs: Sequence[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def div(a: float, b: float) -> float | None:
    return a / b if b else None


def paired_ratio(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Median over runs of a[i] / b[i] (runs where either is missing or b is 0 left out)."""
    return median([x / y if x is not None and y else None for x, y in zip(a, b, strict=True)])


def paired_diff(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Median over runs of a[i] - b[i]."""
    return median([x - y if x is not None and y is not None else None
                   for x, y in zip(a, b, strict=True)])


def valid_output(text: str, schema: dict[str, Any], finish_reason: str) -> bool:
    """jsonschema (formats checked) on the output; a cut-off output is invalid."""
    from ..grammar.dialect import dialect_of

    if finish_reason != "stop":
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    cls = dialect_of(schema)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value))


@dataclass
class Record:
    """One timed generation of one engine on one prompt in one run."""

    engine: str
    case: str
    run: int
    tokens: int
    seconds: float
    ttft_s: float | None
    finish_reason: str
    valid: bool
    sample_ns: int
    constraint_ns: int | None
    forced: int = 0
    text: str = ""
    error: str | None = None
    drafted: int = 0
    accepted: int = 0


def per_run(records: Sequence[Record], runs: int) -> dict[str, list[float | None]]:
    """Per run (index = run), over its prompts: tokens/s = total tokens / total seconds, and
    per-token µs (wall, sampling step, constraint) = total time / total tokens. Runs that ended
    in an error count for validity only."""
    out: dict[str, list[float | None]] = {k: [] for k in
                                          ("tps", "wall_us", "sample_us", "constraint_us")}
    for i in range(runs):
        rs = [r for r in records if r.run == i and r.error is None]
        tokens = sum(r.tokens for r in rs)
        seconds = sum(r.seconds for r in rs)
        out["tps"].append(div(tokens, seconds))
        out["wall_us"].append(div(seconds * 1e6, tokens))
        out["sample_us"].append(div(sum(r.sample_ns for r in rs) / 1e3, tokens))
        direct = [r.constraint_ns for r in rs]
        out["constraint_us"].append(
            div(sum(direct) / 1e3, tokens)  # type: ignore[arg-type]
            if direct and all(d is not None for d in direct) else None)
    return out


def ratios(tps: dict[str, list[float | None]], of: str = "kaname") -> dict[str, float | None]:
    """`of`'s tokens/s ÷ each other engine's: the median of the per-run ratios."""
    if of not in tps:
        return {}
    return {name: paired_ratio(tps[of], series) for name, series in tps.items() if name != of}


def overheads(series: dict[str, dict[str, list[float | None]]]
              ) -> dict[str, tuple[float | None, str]]:
    """Constraint overhead in µs per generated token, and how it was obtained: measured
    directly where the constraint can be timed on its own (kaname's decode loop, the logits
    processors), else the sampling step's time minus that of the same driver unconstrained
    (paired per run)."""
    out: dict[str, tuple[float | None, str]] = {}
    for name, s in series.items():
        if name not in CONSTRAINED:
            continue
        if any(v is not None for v in s["constraint_us"]):
            out[name] = (median(s["constraint_us"]), "direct")
        elif BASELINE[name] in series:
            out[name] = (paired_diff(s["sample_us"], series[BASELINE[name]]["sample_us"]),
                         f"sample_step_minus_{BASELINE[name]}")
        else:
            out[name] = (None, f"not measured: {BASELINE[name]} was not run")
    return out


def targets_met(engines: dict[str, dict[str, Any]], rat: dict[str, float | None]
                ) -> dict[str, bool | None]:
    k = engines.get("kaname", {})
    k_over = k.get("overhead_us_per_token")
    others = [e["overhead_us_per_token"] for n, e in engines.items()
              if n in PEERS and e.get("available")
              and e.get("overhead_us_per_token") is not None]
    lowest = (k_over < min(others)) if k_over is not None and others else None

    def at_least(peer: str, bound: float) -> bool | None:
        r = rat.get(peer)
        return None if r is None else r >= bound

    return {
        "overhead_lowest": lowest,
        "tps_ratio_vs_llamacpp_grammar": at_least(
            "llamacpp_grammar", TARGETS["tps_ratio_vs_llamacpp_grammar_min"]),  # type: ignore[arg-type]
        "tps_ratio_vs_outlines": at_least("outlines", TARGETS["tps_ratio_vs_outlines_min"]),  # type: ignore[arg-type]
        "kaname_valid_pct": (None if k.get("valid_pct") is None
                             else k["valid_pct"] >= TARGETS["kaname_valid_pct"]),
    }


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def summarize(records: Sequence[Record], runs: int, names: Sequence[str],
              unavailable: dict[str, str], versions: dict[str, str]) -> dict[str, Any]:
    """The `engines` / `ratios` / `overheads` part of the report."""
    by_engine = {n: [r for r in records if r.engine == n] for n in names if n not in unavailable}
    series = {n: per_run(rs, runs) for n, rs in by_engine.items()}
    over = overheads(series)
    engines: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in unavailable:
            engines[name] = {"available": False, "reason": unavailable[name]}
            continue
        rs, s = by_engine[name], series[name]
        base = BASELINE.get(name)
        overhead, how = over.get(name, (None, "unconstrained"))
        totals = [sum(r.tokens for r in rs if r.run == i) for i in range(runs)]
        e: dict[str, Any] = {
            "available": True,
            "version": versions.get(name, ""),
            "tokens_per_s": _round(median(s["tps"])),
            "valid_pct": _round(100.0 * sum(r.valid for r in rs) / len(rs)) if rs else None,
            "ttft_ms": _round(median([r.ttft_s * 1e3 if r.ttft_s is not None else None
                                      for r in rs])),
            "overhead_us_per_token": _round(overhead, 1),
            "overhead_method": how,
            "overhead_wall_us_per_token": (
                _round(paired_diff(s["wall_us"], series[base]["wall_us"]), 1)
                if base in series else None),
            "sample_us_per_token": _round(median(s["sample_us"]), 1),
            "wall_us_per_token": _round(median(s["wall_us"]), 1),
            "tokens_per_run": median(totals),
            "finish_reasons": dict(Counter(r.finish_reason for r in rs)),
            "errors": sorted({r.error for r in rs if r.error}),
            "per_run_tokens_per_s": [_round(x) for x in s["tps"]],
            "cases": _cases(rs),
        }
        if name in KANAME:
            total = sum(r.tokens for r in rs)
            e["forced_pct"] = _round(100.0 * sum(r.forced for r in rs) / total) if total else None
        engines[name] = e
    tps = {n: s["tps"] for n, s in series.items()}
    return {"engines": engines, "ratios": {k: _round(v, 3) for k, v in ratios(tps).items()},
            "drafts": drafts(records, runs)}


def drafts(records: Sequence[Record], runs: int) -> dict[str, Any] | None:
    """Verified drafts against kaname's other modes, per prompt and over all: tokens/s with
    drafts (`kaname`), with the answer itself as drafts (`kaname_ceiling`), forced tokens
    only, neither, and unconstrained; the acceptance rate (and the ceiling's kept / proposed
    draft tokens per prompt); whether the greedy output of every verified mode is the output
    with neither on every prompt and run (a prompt that one of them failed counts as not
    identical); on the extraction prompts, drafts ÷ unconstrained tokens/s, and
    on the others drafts ÷ forced (paired per run, then the median); the same for the
    ceiling. None without both `kaname` and `kaname_none`."""
    def of(engine: str) -> list[Record]:
        return [r for r in records if r.engine == engine]

    if not of("kaname") or not of("kaname_none"):
        return None
    texts = {(r.engine, r.case, r.run): r.text if r.error is None else None for r in records}

    def identical(case: str, engine: str = "kaname") -> bool:
        pairs = [(texts.get((engine, case, i)), texts.get(("kaname_none", case, i)))
                 for i in range(runs)]
        return all(a is not None and a == b for a, b in pairs)

    modes = {"drafts": "kaname", "ceiling": "kaname_ceiling", "full_rows": "kaname_full_rows",
             "forced": "kaname_forced", "none": "kaname_none",
             "unconstrained": "kaname_unconstrained"}
    verified = [e for e in ("kaname", "kaname_ceiling", "kaname_full_rows") if of(e)]
    ceiling = of("kaname_ceiling")
    cases: dict[str, dict[str, Any]] = {}
    for case in dict.fromkeys(r.case for r in of("kaname")):
        mine = [r for r in of("kaname") if r.case == case]
        known = [r for r in ceiling if r.case == case]
        cases[case] = {
            "extraction": case in _EXTRACTION,
            "tokens_per_s": {m: _round(median([div(r.tokens, r.seconds) for r in of(e)
                                               if r.case == case and r.error is None]))
                             for m, e in modes.items() if of(e)},
            "draft_tokens": sum(r.drafted for r in mine),
            "draft_accepted": sum(r.accepted for r in mine),
            **({"ceiling_kept": [sum(r.accepted for r in known), sum(r.drafted for r in known)]}
               if ceiling else {}),
            "greedy_identical": all(identical(case, e) for e in verified),
            **({"force_changes_answer": not identical(case, "kaname_forced")}
               if of("kaname_forced") else {}),
        }
    proposed = sum(r.drafted for r in of("kaname"))
    extraction = [c for c in cases if cases[c]["extraction"]]
    existing = [c for c in cases if not cases[c]["extraction"]]

    ok = {(r.engine, r.case, r.run) for r in records if r.error is None}

    def ratio(a: str, b: str, among: Sequence[str]) -> float | None:
        """a ÷ b tokens/s over the prompts `among`, per run over the prompts both engines
        completed in it (so that both divide the same work), then the median over runs."""
        if not among or not of(a) or not of(b):
            return None
        def tps(engine: str) -> list[float | None]:
            return per_run([r for r in of(engine) if r.case in among
                            and (a, r.case, r.run) in ok and (b, r.case, r.run) in ok],
                           runs)["tps"]
        return _round(paired_ratio(tps(a), tps(b)), 3)

    return {
        "greedy_identical": all(c["greedy_identical"] for c in cases.values()),
        "acceptance_rate": _round(sum(r.accepted for r in of("kaname")) / proposed, 3)
        if proposed else None,
        "extraction_tps_ratio": ratio("kaname", "kaname_unconstrained", extraction),
        # the other bar: the engine cases no slower than forced tokens unverified
        "forced_tps_ratio": ratio("kaname", "kaname_forced", existing),
        # the same with a drafter that proposes the answer itself: what no drafter can beat
        **({"ceiling": {
            "extraction_tps_ratio": ratio("kaname_ceiling", "kaname_unconstrained", extraction),
            "forced_tps_ratio": ratio("kaname_ceiling", "kaname_forced", existing),
            "drafts_share": ratio("kaname", "kaname_ceiling", [*existing, *extraction]),
        }} if of("kaname_ceiling") else {}),
        "cases": cases,
    }


_EXTRACTION = frozenset(c.name for c in EXTRACTION)


def _cases(rs: Sequence[Record]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for case in dict.fromkeys(r.case for r in rs):
        cr = [r for r in rs if r.case == case]
        last = cr[-1]
        out[case] = {
            "tokens_per_s": _round(median([div(r.tokens, r.seconds) for r in cr
                                           if r.error is None])),
            "ttft_ms": _round(median([r.ttft_s * 1e3 if r.ttft_s is not None else None
                                      for r in cr])),
            "valid": [r.valid for r in cr],
            "completion_tokens": last.tokens,
            "finish_reason": last.finish_reason,
            "text": last.text,
            **({"error": last.error} if last.error else {}),
        }
    return out


# ---------------------------------------------------------------------------------------------
# Running


def parse_engines(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--engines a,b c` -> ("a", "b", "c"), in ENGINES order; unknown names are an error."""
    if not values:
        return ENGINES
    asked = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [a for a in asked if a not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(unknown)}; expected some of "
                         f"{', '.join(ENGINES)}")
    return tuple(n for n in ENGINES if n in asked)


def rotate(names: Sequence[str], k: int) -> list[str]:
    if not names:
        return []
    k %= len(names)
    return [*names[k:], *names[:k]]


def _timed(driver: Any, prepared: Any, case: Any, prompt: list[int], max_tokens: int,
           run: int) -> Record:
    driver.prime(prompt)
    gc.collect()
    gc.disable()  # a collection inside a timed generation is noise, whoever it hits
    try:
        if isinstance(prepared, _Refused):
            raise ValueError(prepared.reason)
        g = driver.generate(prepared, case, prompt, max_tokens)
    except Exception as e:
        return Record(driver.name, case.name, run, 0, 0.0, None, "error", False, 0, None,
                      error=first_line(e))
    finally:
        gc.enable()
    valid = g.error is None and valid_output(g.text, case.schema, g.finish_reason)
    return Record(driver.name, case.name, run, g.tokens, g.seconds, g.ttft_s, g.finish_reason,
                  valid, g.sample_ns, g.constraint_ns, g.forced, g.text, g.error, g.drafted,
                  g.accepted)


@dataclass
class _Refused:
    reason: str


def run(config: Config, names: Sequence[str], *, threads: int | None = None,
        quick: bool = False) -> dict[str, Any]:
    from ..runtimes.llamacpp import default_vocab
    from .e2e_engines import load_drivers, threads_default

    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    threads = threads or threads_default()
    by_name = {c.name: c for c in (*CASES, *EXTRACTION)}
    cases = [by_name[n] for n in config.case_names]
    vocab = default_vocab()
    prompts = {c.name: vocab.tokenize(c.prompt) for c in cases}
    print("kaname bench e2e: loading the engines…", file=sys.stderr)
    drivers, unavailable = load_drivers(names, threads)
    order = [n for n in names if n in drivers]
    prepared: dict[tuple[str, str], Any] = {}
    for name in order:
        for case in cases:
            try:
                prepared[name, case.name] = drivers[name].prepare(case)
            except Exception as e:
                prepared[name, case.name] = _Refused(f"the schema was refused: {first_line(e)}")
    for name in order:  # what a driver needs to know before any timed run (the ceiling's answers)
        ready = getattr(drivers[name], "before_timing", None)
        if ready is None:
            continue
        for case in cases:
            if isinstance(prepared[name, case.name], _Refused):
                continue
            try:
                ready(prepared[name, case.name], case, prompts[case.name], config.max_tokens)
            except Exception as e:
                prepared[name, case.name] = _Refused(f"no answer to draft: {first_line(e)}")
    print(f"kaname bench e2e: warm-up ({', '.join(order)})…", file=sys.stderr)
    for name in order:
        _timed(drivers[name], prepared[name, cases[0].name], cases[0], prompts[cases[0].name],
               config.max_tokens, -1)
    records: list[Record] = []
    t_start = time.perf_counter()
    for i in range(config.runs):
        print(f"kaname bench e2e: run {i + 1}/{config.runs}…", file=sys.stderr)
        load = os.getloadavg()[0]
        for j, case in enumerate(cases):
            for name in rotate(order, i + j):
                records.append(_timed(drivers[name], prepared[name, case.name], case,
                                      prompts[case.name], config.max_tokens, i))
        # One line per run, so a reader can tell a disturbed run from the others.
        tps = {n: per_run([r for r in records if r.engine == n and r.run == i], i + 1)["tps"][i]
               for n in order}
        print(f"kaname bench e2e: run {i + 1}: " + ", ".join(
            f"{n} {_fmt(v)} tok/s" for n, v in tps.items()) + f" (1-min load {load:.2f} before)",
            file=sys.stderr)
    elapsed = time.perf_counter() - t_start
    versions = {n: d.version for n, d in drivers.items()}
    data: dict[str, Any] = {"benchmark": "e2e", "mode": "quick" if quick else "full"}
    data |= summarize(records, config.runs, names, unavailable, versions)
    data["targets"] = TARGETS
    data["targets_met"] = targets_met(data["engines"], data["ratios"])
    data["method"] = _method({n: d.method for n, d in drivers.items()})
    data["config"] = {
        "cases": list(config.case_names), "max_tokens": config.max_tokens, "runs": config.runs,
        "threads": threads, "model": "Gemma 3 270M Q4_K_M (llama.cpp, CPU)",
        "sampling": "greedy (temperature 0)",
        "prompt_tokens": {n: len(p) for n, p in prompts.items()},
        "llama_cpp_python": version_of("llama-cpp-python"),
        "llguidance": version_of("llguidance"),
    }
    data["machine"] = machine()
    data["run"] = {"started_utc": started, "timed_seconds": round(elapsed, 1),
                   "loadavg_1m": {"before": load_before, "after": os.getloadavg()[0]}}
    return data


def _method(engines: dict[str, str]) -> dict[str, Any]:
    return {
        "tokens_per_s": "generated tokens / wall time of the whole generation call (kaname: "
                        "Engine.generate; peers: Llama.create_completion), summed over the "
                        "prompts of a run; median over runs. Every engine finds the prompt in "
                        "its KV cache but for the last token, which it evaluates in the call.",
        "valid_pct": "share of all timed generations whose text passes jsonschema (formats "
                     "checked) against the case's schema; a cut-off output (finish_reason "
                     "length) is invalid",
        "ttft_ms": "call start -> first token available (kaname: the first on_tokens callback; "
                   "peers: the end of the first Llama.sample); median over every generation",
        "overhead_us_per_token": "time spent in the constraint / generated tokens, median over "
                                 "runs; `overhead_method` says how: `direct` = timed inside the "
                                 "constraint (kaname's decode loop constraint_ns, which includes "
                                 "its argmax; the logits processors of xgrammar / outlines); "
                                 "`sample_step_minus_unconstrained` = the engine's Llama.sample "
                                 "time per token minus the unconstrained engine's, paired per "
                                 "run (llama.cpp's grammar sampler cannot be timed on its own)",
        "overhead_wall_us_per_token": "wall time per generated token minus the same driver's "
                                      "unconstrained wall time per token (kaname - "
                                      "kaname_unconstrained; peers - unconstrained), paired per "
                                      "run; negative when forced tokens save model steps",
        "sample_us_per_token": "the whole sampling step (logits -> token) per generated token: "
                               "kaname's constraint_ns (its argmax included); peers' Llama.sample "
                               "(candidates array, processors, grammar, greedy, accept)",
        "ratios": "kaname tokens/s ÷ each engine's tokens/s: median of the per-run ratios",
        "drafts": "kaname's constrained modes on the same prompts: drafts (kaname), "
                  "drafts that are the answer itself (kaname_ceiling), forced tokens "
                  "unverified (kaname_forced), neither (kaname_none), and "
                  "kaname_unconstrained; greedy_identical: the text of every verified mode "
                  "equals kaname_none's on every prompt and run; acceptance_rate: draft tokens "
                  "kept / proposed over every kaname generation; extraction_tps_ratio: "
                  "kaname ÷ kaname_unconstrained tokens/s over the extraction prompts, "
                  "paired per run, median; forced_tps_ratio: kaname ÷ kaname_forced over the "
                  "other prompts, likewise; ceiling: the same two for kaname_ceiling, and "
                  "drafts_share = kaname ÷ kaname_ceiling over every prompt",
        "order": "each engine is warmed up once on the first prompt; then per run and prompt "
                 "every engine generates once, the engine order rotating by run and prompt",
        "engines": engines,
    }


# ---------------------------------------------------------------------------------------------
# Output


def _fmt(x: Any, spec: str = ",.1f") -> str:
    return "—" if x is None else format(x, spec)


def print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a file or a pipe: wide enough for every column
        console = Console(width=150)
    cfg = data["config"]
    t = Table(title=f"end to end, Gemma 3 270M on llama.cpp ({cfg['threads']} threads), greedy: "
                    f"{len(cfg['cases'])} prompt(s), max_tokens {cfg['max_tokens']}, median of "
                    f"{cfg['runs']} run(s)")
    t.add_column("engine")
    for col in ("tok/s", "kaname ÷", "valid %", "TTFT ms", "overhead µs/tok", "how",
                "Δwall µs/tok", "tokens/run"):
        t.add_column(col, justify="left" if col == "how" else "right")
    rat = data["ratios"]
    for name, e in data["engines"].items():
        if not e["available"]:
            t.add_row(name, "unavailable", "", "", "", "", e["reason"][:60], "", "")
            continue
        how = {"direct": "direct"}.get(e["overhead_method"],
                                       "Δsample" if e["overhead_method"].startswith("sample")
                                       else e["overhead_method"][:20])
        t.add_row(name, _fmt(e["tokens_per_s"]),
                  "" if name == "kaname" else _fmt(rat.get(name), ".2f") + "×",
                  _fmt(e["valid_pct"], ".0f"), _fmt(e["ttft_ms"]),
                  _fmt(e["overhead_us_per_token"]), how if name in CONSTRAINED else "",
                  _fmt(e["overhead_wall_us_per_token"], ",.0f"), _fmt(e["tokens_per_run"], ".0f"),
                  style="bold" if name == "kaname" else None)
    console.print(t)

    avail = [n for n, e in data["engines"].items() if e["available"]]
    c = Table(title="per prompt: median tok/s, valid runs / runs, tokens (last run)")
    c.add_column("prompt")
    for n in avail:
        c.add_column(n, justify="right")
    cases = data["config"]["cases"]
    for case in cases:
        cells = []
        for n in avail:
            x = data["engines"][n]["cases"].get(case)
            if x is None:
                cells.append("")
                continue
            cells.append(f"{_fmt(x['tokens_per_s'])} · {sum(x['valid'])}/{len(x['valid'])} · "
                         f"{x['completion_tokens']}")
        c.add_row(case, *cells)
    console.print(c)
    if data.get("drafts"):
        _print_drafts(console, data["drafts"])

    tg, met = data["targets"], data["targets_met"]

    def word(v: bool | None) -> str:
        return "n/a" if v is None else ("met" if v else "NOT met")

    console.print(
        f"targets: kaname overhead lowest: {word(met['overhead_lowest'])}; tok/s ≥ "
        f"{tg['tps_ratio_vs_llamacpp_grammar_min']:g}× llamacpp_grammar: "
        f"{word(met['tps_ratio_vs_llamacpp_grammar'])}; ≥ {tg['tps_ratio_vs_outlines_min']:g}× "
        f"outlines: {word(met['tps_ratio_vs_outlines'])}; kaname valid 100%: "
        f"{word(met['kaname_valid_pct'])}")
    for n, e in data["engines"].items():
        if not e["available"]:
            console.print(f"{n}: unavailable: {e['reason']}")
        elif e["errors"]:
            console.print(f"{n}: errors: {'; '.join(e['errors'])}")
    r = data["run"]
    console.print(f"machine: {data['machine']}; 1-min load {r['loadavg_1m']['before']:.2f} "
                  f"before, {r['loadavg_1m']['after']:.2f} after; timed part "
                  f"{r['timed_seconds']} s")


def _print_drafts(console: Any, d: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title="kaname's modes per prompt: median tok/s; draft tokens kept / proposed; "
                    "every verified mode's output = output with neither (every run)")
    t.add_column("prompt")
    for col in ("drafts", "ceiling", "full rows", "forced", "none", "unconstrained", "kept",
                "identical", "forcing changes it"):
        t.add_column(col, justify="right")
    for case, c in d["cases"].items():
        tps = c["tokens_per_s"]
        t.add_row(case + (" (extraction)" if c["extraction"] else ""),
                  *(_fmt(tps.get(m)) for m in ("drafts", "ceiling", "full_rows", "forced",
                                               "none", "unconstrained")),
                  f"{c['draft_accepted']}/{c['draft_tokens']}", str(c["greedy_identical"]),
                  str(c.get("force_changes_answer", "—")))
    console.print(t)
    console.print(f"greedy identical on every prompt: {d['greedy_identical']}; acceptance rate "
                  f"{_fmt(d['acceptance_rate'], '.2f')}; extraction: drafts ÷ unconstrained "
                  f"tok/s {_fmt(d['extraction_tps_ratio'], '.2f')}; engine prompts: drafts ÷ "
                  f"forced {_fmt(d['forced_tps_ratio'], '.2f')}")
    if "ceiling" in d:
        c = d["ceiling"]
        console.print(f"ceiling (drafts that are the answer itself): extraction ÷ unconstrained "
                      f"{_fmt(c['extraction_tps_ratio'], '.2f')}, engine prompts ÷ forced "
                      f"{_fmt(c['forced_tps_ratio'], '.2f')}; drafts reach "
                      f"{_fmt(c['drafts_share'], '.2f')} of it")


# ---------------------------------------------------------------------------------------------
# CLI


def main(args: argparse.Namespace) -> int:
    base = QUICK if args.quick else FULL
    runs = base.runs if args.runs is None else args.runs
    max_tokens = base.max_tokens if args.max_tokens is None else args.max_tokens
    if runs < 1:
        raise ValueError("--runs must be >= 1")
    if max_tokens < 1:
        raise ValueError("--max-tokens must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be >= 1")
    names = parse_engines(args.engines)
    data = run(Config(base.case_names, max_tokens, runs), names, threads=args.threads,
               quick=args.quick)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print_tables(data)
    return 0
