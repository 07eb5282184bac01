"""`kaname bench schemas`: kaname and its peers on JSONSchemaBench (MaskBench method).

Every engine gets the same vocabulary and the same schemas in one run. For each schema and
engine: compile it (timed, with a timeout), then walk every test instance token by token: the
instance is serialised with `json.dumps(data, ensure_ascii=False)` (separators ", " and ": ",
which kaname's default guards fix), tokenized once in this process, and each token is timed as
mask computation + commit. A valid instance must be accepted token by token (and the end
allowed), an invalid one rejected somewhere. A schema *passes* an engine when it compiled and
every one of its instances was judged right.

Each engine runs in its own spawned worker process (`peers_engines.worker_main`): the parent
kills and restarts a worker that runs past a timeout, and a crash costs one schema. Schemas go
to the engines one at a time, the engine order rotating per schema, so no two engines run at
once and drift on a shared machine hits them all alike.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import SCHEMAS_DATA as DEFAULT_DATA
from . import SCHEMAS_ENGINES as ENGINES
from . import SCHEMAS_SEED as SEED
from .common import machine, percentile

TARGETS = ("passing >= every peer", "invalid_accepted == 0", "mask p99 <= every peer")

# ---------------------------------------------------------------------------------------------
# Data


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """MaskBench rows (`{"id", "subset", "schema", "tests": [...]}`), gzip or plain JSONL."""
    path = Path(path)
    with path.open("rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener: Any = gzip.open if gz else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON: {e}") from e
            if not isinstance(row, dict) or "schema" not in row:
                raise ValueError(f"{path}:{n}: expected an object with 'schema' and 'tests'")
            row.setdefault("subset", "default")
            row.setdefault("id", f"{row['subset']}/{n}")
            row.setdefault("tests", [])
            rows.append(row)
    return rows


def quotas(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """Split `n` as evenly as possible over the subsets, none above its size; what a small
    subset cannot take goes to the others (subsets in name order take the remainders)."""
    left = {k: v for k, v in sizes.items() if v > 0}
    out = dict.fromkeys(sizes, 0)
    budget = min(n, sum(left.values()))
    while budget > 0 and left:
        names = sorted(left)
        share, extra = divmod(budget, len(names))
        for i, name in enumerate(names):
            take = min(share + (1 if i < extra else 0), left[name])
            out[name] += take
            left[name] -= take
            budget -= take
        left = {k: v for k, v in left.items() if v > 0}
    return out


def sample_rows(rows: Sequence[dict[str, Any]], limit: int | None, subsets: Iterable[str] = (),
                seed: int = SEED) -> list[dict[str, Any]]:
    """The rows of the chosen subsets (all when none), and with `limit` a seeded sample
    stratified by subset (`quotas`); the result is ordered by subset, then file order."""
    wanted = set(subsets)
    by_subset: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        if not wanted or row["subset"] in wanted:
            by_subset[row["subset"]].append(i)
    unknown = wanted - set(by_subset)
    if unknown:
        known = sorted({r["subset"] for r in rows})
        raise ValueError(f"no such subset: {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(known)})")
    if limit is None:
        picked = [i for name in sorted(by_subset) for i in by_subset[name]]
    else:
        rng = random.Random(seed)
        q = quotas({k: len(v) for k, v in by_subset.items()}, limit)
        picked = [i for name in sorted(by_subset)
                  for i in sorted(rng.sample(by_subset[name], q[name]))]
    return [rows[i] for i in picked]


def instance_text(data: Any) -> str:
    """The MaskBench serialisation of a test instance."""
    return json.dumps(data, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Statistics and counting (pure)


def time_stats(ns: Sequence[int], unit_ns: float, prefix: str,
               mean: bool = True) -> dict[str, float | None]:
    """{prefix_mean, prefix_p50, prefix_p99} of durations in ns, in units of `unit_ns`
    (1e3: µs, 1e6: ms); None when there are no durations."""
    keys = (["mean"] if mean else []) + ["p50", "p99"]
    if not len(ns):
        return {f"{prefix}_{k}": None for k in keys}
    try:
        import numpy as np

        arr = np.asarray(ns, dtype=np.float64) / unit_ns
        vals = {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)),
                "p99": float(np.percentile(arr, 99))}
    except ImportError:  # pragma: no cover - numpy is a dependency
        xs = [n / unit_ns for n in ns]
        vals = {"mean": statistics.fmean(xs), "p50": percentile(xs, 50),
                "p99": percentile(xs, 99)}
    return {f"{prefix}_{k}": vals[k] for k in keys}


@dataclass
class Outcome:
    """One engine on one schema."""

    status: str  # compiled | compile_error | compile_timeout | check_timeout | crash
    reason: str = ""
    compile_ns: int | None = None
    valid: tuple[bool, ...] = ()  # per test instance
    accepted: tuple[bool, ...] = ()  # per test instance, when it was checked
    steps_ns: Sequence[int] = ()
    walk_errors: int = 0

    @property
    def compiled(self) -> bool:
        return self.compile_ns is not None

    def counts(self) -> dict[str, int]:
        return judge(self.valid, self.accepted)

    @property
    def passing(self) -> bool:
        """Compiled, checked, and every instance judged right."""
        if self.status != "compiled":
            return False
        c = self.counts()
        return c["valid_rejected"] == 0 and c["invalid_accepted"] == 0


def judge(valid: Sequence[bool], accepted: Sequence[bool]) -> dict[str, int]:
    """Count instances by (valid?, accepted?); `accepted` may be shorter than `valid` (a walk
    that did not finish): those instances are not counted."""
    c = dict.fromkeys(("valid_accepted", "valid_rejected", "invalid_accepted",
                       "invalid_rejected"), 0)
    for v, a in zip(valid, accepted, strict=False):
        c[("valid_" if v else "invalid_") + ("accepted" if a else "rejected")] += 1
    return c


COUNT_KEYS = ("schemas", "compiled", "passing", "passing_untested", "valid_accepted",
              "valid_rejected",
              "invalid_accepted", "invalid_rejected", "compile_errors", "compile_timeouts",
              "check_timeouts", "crashes", "walk_errors")


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Counts and timings over one engine's outcomes (all schemas, or one subset's)."""
    out: dict[str, Any] = dict.fromkeys(COUNT_KEYS, 0)
    out["schemas"] = len(outcomes)
    steps: list[int] = []
    compile_ns: list[int] = []
    for o in outcomes:
        if o.compiled:
            out["compiled"] += 1
            compile_ns.append(o.compile_ns)  # type: ignore[arg-type]
        out["passing"] += o.passing
        out["passing_untested"] += o.passing and not o.valid  # compiled, no instance to judge
        for k, v in o.counts().items():
            out[k] += v
        out["compile_errors"] += o.status == "compile_error"
        out["compile_timeouts"] += o.status == "compile_timeout"
        out["check_timeouts"] += o.status == "check_timeout"
        out["crashes"] += o.status == "crash"
        out["walk_errors"] += o.walk_errors
        steps.extend(o.steps_ns)
    out["mask_steps"] = len(steps)
    out.update(time_stats(steps, 1e3, "mask_us"))
    out.update(time_stats(compile_ns, 1e6, "compile_ms", mean=False))
    return out


def targets(engines: Mapping[str, Mapping[str, Any]], ours: str = "kaname"
            ) -> dict[str, Any]:
    """The issue's targets for `ours` against every peer that ran: None when not measurable."""
    me = engines.get(ours)
    if not me or me.get("status") != "ok":
        return {"passing": None, "invalid_accepted": None, "mask_p99": None}
    peers = {k: v for k, v in engines.items() if k != ours and v.get("status") == "ok"}
    p99s = {k: v["mask_us_p99"] for k, v in peers.items() if v.get("mask_us_p99") is not None}
    return {
        "passing": all(me["passing"] >= v["passing"] for v in peers.values()),
        "invalid_accepted": me["invalid_accepted"] == 0,
        "mask_p99": (None if me.get("mask_us_p99") is None else
                     all(me["mask_us_p99"] <= p for p in p99s.values())),
    }


_LOG_PREFIX = re.compile(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ")  # xgrammar: [hh:mm:ss] file:line:
_POINTER = re.compile(r" at '[^']*'| \(all: [^)]*\)|(?<= cannot be enforced)( \(at .*)")
_INLINE_JSON = re.compile(r"([:\s])\{.*$")


def reason_key(reason: str) -> str:
    """A compile error grouped for counting: its first line without the places and the schema
    fragments it quotes, so one cause in many places counts as one."""
    line = reason.splitlines()[0] if reason else ""
    line = _LOG_PREFIX.sub("", line)
    line = _POINTER.sub("", line)
    line = _INLINE_JSON.sub(r"\1{…}", line)
    line = line.split(";")[0].split(": remove it")[0]
    return line[:100]


# ---------------------------------------------------------------------------------------------
# Workers


class Worker:
    """One engine's worker process, restarted after a timeout or a crash."""

    def __init__(self, engine: str, tokenizer: str, options: dict[str, Any]):
        self.engine, self.tokenizer, self.options = engine, tokenizer, options
        self.proc: Any = None
        self.conn: Any = None
        self.status = "starting"  # ok | unavailable | failed
        self.reason = ""
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self.dead = False  # a restart failed: no more tries

    def start(self) -> None:
        from . import peers_engines

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=peers_engines.worker_main, daemon=True,
                                args=(child, self.engine, self.tokenizer, self.options),
                                name=f"kaname-bench-{self.engine}")
        self.proc.start()
        child.close()
        self.conn = parent

    def wait_ready(self, timeout: float) -> None:
        msg = self._recv(timeout)
        if msg is None:
            self.kill()
            self.status, self.reason = "failed", f"did not load within {timeout:.0f} s"
        elif msg == "eof":
            self.kill()
            self.status, self.reason = "failed", "worker died while loading"
        elif msg[0] == "ready":
            self.status, self.info = "ok", msg[1]
        else:
            self.kill()
            self.status, self.reason = msg[0], msg[1]

    def _recv(self, timeout: float) -> Any:
        try:
            if not self.conn.poll(timeout):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            return "eof"

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5)
            self.proc = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def stop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
        if self.proc is not None:
            self.proc.join(5)
        self.kill()

    def run(self, schema_text: str, tests: Sequence[Sequence[int]], compile_timeout: float,
            check_timeout: float, load_timeout: float) -> Outcome:
        if self.dead:
            return Outcome("crash", f"worker could not be restarted: {self.reason}")
        if self.proc is None:  # killed after a timeout or a crash: a fresh one
            self.restarts += 1
            self.start()
            self.wait_ready(load_timeout)
            if self.status != "ok":
                self.dead = True
                return Outcome("crash", f"worker could not be restarted: {self.reason}")
        try:
            self.conn.send(("schema", schema_text, [list(t) for t in tests]))
        except OSError:
            self.kill()
            return Outcome("crash", "worker gone")
        msg = self._recv(compile_timeout)
        if msg is None:
            self.kill()
            return Outcome("compile_timeout", f"compile took over {compile_timeout:g} s")
        if msg == "eof":
            self.kill()
            return Outcome("crash", "worker died while compiling")
        if msg[0] == "compile_error":
            return Outcome("compile_error", msg[1])
        compile_ns = msg[1]
        msg = self._recv(check_timeout)
        if msg is None or msg == "eof":
            self.kill()
            status = "check_timeout" if msg is None else "crash"
            return Outcome(status, "walking the instances " + (
                f"took over {check_timeout:g} s" if msg is None else "killed the worker"),
                compile_ns=compile_ns)
        _, results, steps = msg
        return Outcome("compiled", compile_ns=compile_ns,
                       accepted=tuple(bool(a) for a, _ in results), steps_ns=steps,
                       walk_errors=sum(1 for _, e in results if e))


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Config:
    data: Path
    engines: tuple[str, ...] = ENGINES
    tokenizer: str = "gemma"
    limit: int | None = None
    subsets: tuple[str, ...] = ()
    compile_timeout: float = 20.0
    check_timeout: float = 120.0
    load_timeout: float = 300.0
    llamacpp_samples: int = 4
    seed: int = SEED
    # the JSON-Schema-Test-Suite (schema_suite.py) instead of `data`
    suite: Path | None = None


@dataclass
class RunResult:
    config: Config
    rows: list[dict[str, Any]]
    workers: dict[str, Worker]
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)  # engine -> per row
    wall: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # s per engine
    seconds: float = 0.0
    started: str = ""
    loadavg: tuple[float, float] = (0.0, 0.0)


def source_rows(config: Config) -> list[dict[str, Any]]:
    """The rows to sample from: the test suite's cases (one subset per draft) with
    `suite`, else the MaskBench file."""
    if config.suite is not None:
        from .schema_suite import read_suite

        return read_suite(config.suite)
    return read_rows(config.data)


def _progress(msg: str) -> None:
    print(f"kaname bench schemas: {msg}", file=sys.stderr, flush=True)


def run(config: Config, progress: bool = True) -> RunResult:
    from .peers_engines import load_vocabulary

    t_start = time.monotonic()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    rows = sample_rows(source_rows(config), config.limit, config.subsets, config.seed)
    options = {"llamacpp_samples": config.llamacpp_samples}
    workers = {e: Worker(e, config.tokenizer, options) for e in config.engines}
    for w in workers.values():  # load in parallel while this process tokenizes
        w.start()
    vocab = load_vocabulary(config.tokenizer)
    tests = [[vocab.tokenize(instance_text(t["data"])) for t in row["tests"]] for row in rows]
    for w in workers.values():
        w.wait_ready(config.load_timeout)
        if progress:
            _progress(f"{w.engine}: {w.status}" + (f" ({w.reason})" if w.reason else ""))
    result = RunResult(config, rows, workers, {e: [] for e in config.engines},
                       started=started)
    live = [e for e in config.engines if workers[e].status == "ok"]
    t_loop = time.monotonic()
    try:
        for i, (row, toks) in enumerate(zip(rows, tests, strict=True)):
            text = json.dumps(row["schema"], ensure_ascii=False)
            valid = tuple(bool(t["valid"]) for t in row["tests"])
            order = live[i % len(live):] + live[:i % len(live)] if live else []
            for e in order:
                t0 = time.monotonic()
                o = workers[e].run(text, toks, config.compile_timeout, config.check_timeout,
                                   config.load_timeout)
                result.wall[e] += time.monotonic() - t0
                o.valid = valid
                result.outcomes[e].append(o)
            if progress and (i + 1) % 25 == 0:
                _progress(f"{i + 1}/{len(rows)} schemas, {time.monotonic() - t_loop:.0f} s")
    finally:
        for w in workers.values():
            w.stop()
    result.seconds = time.monotonic() - t_start
    result.loadavg = (load_before, os.getloadavg()[0])
    return result


def report(result: RunResult) -> dict[str, Any]:
    """The run as one JSON-able object (see docs/benchmarks.md)."""
    cfg = result.config
    engines: dict[str, Any] = {}
    subsets: dict[str, dict[str, Any]] = {}
    names = sorted({r["subset"] for r in result.rows})
    for e in cfg.engines:
        w = result.workers[e]
        entry: dict[str, Any] = {"status": w.status, "reason": w.reason or None,
                                 "version": w.info.get("version"),
                                 "method": w.info.get("method")}
        outs = result.outcomes.get(e, [])
        if w.status == "ok" or outs:
            entry["status"] = "ok"
            entry.update(summarize(outs))
            entry["worker_restarts"] = w.restarts
            entry["wall_s"] = round(result.wall.get(e, 0.0), 1)
            errors = Counter(reason_key(o.reason) for o in outs
                             if o.status in ("compile_error", "crash"))
            entry["top_compile_errors"] = dict(errors.most_common(8))
        else:
            entry.update({k: None for k in (
                "mask_us_mean", "mask_us_p50", "mask_us_p99", "compile_ms_p50",
                "compile_ms_p99", "compiled", "passing", "valid_rejected",
                "invalid_accepted")})
        engines[e] = entry
    for s in names:
        idx = [i for i, r in enumerate(result.rows) if r["subset"] == s]
        subsets[s] = {"schemas": len(idx), "engines": {}}
        for e in cfg.engines:
            outs = result.outcomes.get(e, [])
            if engines[e]["status"] != "ok":
                subsets[s]["engines"][e] = None
                continue
            sub = summarize([outs[i] for i in idx])
            subsets[s]["engines"][e] = {k: sub[k] for k in (
                "compiled", "passing", "passing_untested", "valid_rejected", "invalid_accepted",
                "compile_timeouts",
                "mask_us_mean", "mask_us_p50", "mask_us_p99", "compile_ms_p50",
                "compile_ms_p99")}
    return {
        "engines": engines,
        "subsets": subsets,
        "targets": targets(engines),
        "config": {
            "data": None if cfg.suite else str(cfg.data),
            "suite": str(cfg.suite) if cfg.suite else None,
            "tokenizer": cfg.tokenizer, "limit": cfg.limit,
            "subsets": list(cfg.subsets) or None, "schemas": len(result.rows),
            "instances": sum(len(r["tests"]) for r in result.rows),
            "seed": cfg.seed, "compile_timeout_s": cfg.compile_timeout,
            "check_timeout_s": cfg.check_timeout, "llamacpp_samples": cfg.llamacpp_samples,
            "serialisation": "json.dumps(data, ensure_ascii=False)",
        },
        "machine": machine(),
        "run": {"started_utc": result.started, "seconds": round(result.seconds, 1),
                "loadavg_1m": {"before": result.loadavg[0], "after": result.loadavg[1]}},
    }


# ---------------------------------------------------------------------------------------------
# Output


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    # Wide when not on a terminal (a file, a pipe), so the tables do not wrap.
    console = Console() if sys.stdout.isatty() else Console(width=150)
    cfg = data["config"]
    source = "JSON-Schema-Test-Suite" if cfg.get("suite") else "JSONSchemaBench"
    t = Table(title=f"{source}, {cfg['schemas']} schemas, {cfg['instances']} instances, "
                    f"{cfg['tokenizer']} vocabulary")
    cols = ("engine", "status", "compiled", "passing", "untested", "valid rej.", "invalid acc.",
            "timeouts", "compile ms p50", "p99", "mask µs mean", "p50", "p99")
    for c in cols:
        t.add_column(c, justify="left" if c in ("engine", "status") else "right")
    for name, e in data["engines"].items():
        if e["status"] != "ok":
            t.add_row(name, e["status"], *["-"] * (len(cols) - 2))
            continue
        t.add_row(name, "ok", _f(e["compiled"]), _f(e["passing"]), _f(e["passing_untested"]),
                  _f(e["valid_rejected"]),
                  _f(e["invalid_accepted"]),
                  _f(e["compile_timeouts"] + e["check_timeouts"]),
                  _f(e["compile_ms_p50"], 2), _f(e["compile_ms_p99"], 1),
                  _f(e["mask_us_mean"]), _f(e["mask_us_p50"]), _f(e["mask_us_p99"]))
    console.print(t)

    names = [n for n, e in data["engines"].items() if e["status"] == "ok"]
    if names:
        s = Table(title="per subset: passing / compiled, mask µs p99")
        s.add_column("subset")
        s.add_column("schemas", justify="right")
        for n in names:
            s.add_column(n, justify="right")
        for subset, v in data["subsets"].items():
            cells = []
            for n in names:
                x = v["engines"][n]
                cells.append(f"{x['passing']}/{x['compiled']}, {_f(x['mask_us_p99'], 0)}")
            s.add_row(subset, str(v["schemas"]), *cells)
        console.print(s)

    tg = data["targets"]
    words = {True: "met", False: "NOT met", None: "not measured"}
    console.print("targets for kaname: " + "; ".join(
        f"{label}: {words[tg[k]]}" for label, k in zip(
            TARGETS, ("passing", "invalid_accepted", "mask_p99"), strict=True)))
    for name, e in data["engines"].items():
        if e["status"] != "ok":
            console.print(f"{name}: {e['status']}: {e['reason']}")
        elif e.get("top_compile_errors"):
            top = ", ".join(f"{k} ({v})" for k, v in list(e["top_compile_errors"].items())[:4])
            console.print(f"[dim]{name} compile errors: {top}[/dim]")
    console.print(f"machine: {data['machine']}; run {data['run']['seconds']} s, load "
                  f"{data['run']['loadavg_1m']['before']:.1f} -> "
                  f"{data['run']['loadavg_1m']['after']:.1f}")


def plot(result: RunResult, data: dict[str, Any], path: str | Path) -> None:
    """Two panels: the CDF of per-token mask time and of compile time, per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, outs in result.outcomes.items():
        if data["engines"][name]["status"] != "ok":
            continue
        steps = np.concatenate([np.asarray(o.steps_ns, dtype=np.float64) for o in outs]
                               or [np.zeros(0)]) / 1e3
        comp = np.array([o.compile_ns for o in outs if o.compiled], dtype=np.float64) / 1e6
        for ax, xs, label in ((ax1, steps, name), (ax2, comp, name)):
            if len(xs) == 0:
                continue
            q = np.linspace(0, 1, min(len(xs), 2000))
            ax.plot(np.quantile(xs, q), q, label=f"{label} (n={len(xs)})")
    ax1.set(xscale="log", xlabel="mask + commit per token (µs)", ylabel="share of tokens",
            title="per-token mask time")
    ax2.set(xscale="log", xlabel="compile time (ms)", ylabel="share of compiled schemas",
            title="compile time")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    cfg = data["config"]
    fig.suptitle(f"JSONSchemaBench: {cfg['schemas']} schemas, {cfg['tokenizer']} vocabulary "
                 "(llamacpp: full-vocabulary apply on sampled steps)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Command line


def config_from_args(args: argparse.Namespace) -> Config:
    engines = tuple(dict.fromkeys(e.strip() for e in args.engines.split(",") if e.strip()))
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        raise ValueError(f"--engines: unknown engine(s) {', '.join(bad) or '(none given)'}; "
                         f"choose from {', '.join(ENGINES)}")
    data = Path(args.data) if args.data else DEFAULT_DATA
    suite = Path(args.suite) if getattr(args, "suite", None) else None
    if suite is not None and args.data:
        raise ValueError("--suite and --data: give one")
    if suite is None and not data.is_file():
        raise ValueError(f"--data: no such file: {data}" if args.data else
                         f"--data: give the MaskBench file (not found at {DEFAULT_DATA})")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    if args.timeout <= 0 or args.check_timeout <= 0:
        raise ValueError("timeouts must be > 0")
    if args.llamacpp_samples < 1:
        raise ValueError("--llamacpp-samples must be >= 1")
    subsets = tuple(s.strip() for arg in args.subset for s in arg.split(",") if s.strip())
    return Config(data=data, engines=engines, tokenizer=args.tokenizer, limit=args.limit,
                  subsets=subsets, compile_timeout=args.timeout,
                  check_timeout=args.check_timeout, llamacpp_samples=args.llamacpp_samples,
                  seed=args.seed, suite=suite)


def main(args: argparse.Namespace) -> int:
    """Run the benchmark; status 0 whatever the figures (targets are reported, not enforced)."""
    config = config_from_args(args)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as e:
            raise ValueError("--plot needs matplotlib (pip install 'kaname[bench]')") from e
    result = run(config)
    data = report(result)
    if args.plot:
        plot(result, data, args.plot)
        data["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print_tables(data)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0
