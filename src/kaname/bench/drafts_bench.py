"""Verified drafts in `kaname bench engine`: tokens/s with drafts (forced tokens and prompt
n-grams, each checked by the model), with forced tokens committed unverified (kaname's path
before drafts), with neither (one token per model call), and unconstrained (no grammar, no
drafts: `decode` without a matcher, one token per call, as a peer decodes); the acceptance
rate; whether greedy outputs are identical across the constrained modes; and the ceiling the
runtime allows: what a call of `exact_batch` tokens with logits at each costs against a call
of one (drafts can at best turn the latter's tokens/s into the former's).

Besides the engine cases (`common.CASES`), the extraction cases (`common.EXTRACTION`), whose
output is mostly copied from a longer prompt: where prompt lookup pays.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from ..decoding import SamplingParams, decode
from ..engine import Engine
from .common import CASES, EXTRACTION, Case

MODES = ("verify", "force", "off", "unconstrained")


@dataclass
class DraftCase:
    name: str
    extraction: bool
    seconds: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    proposed: int = 0
    accepted: int = 0
    forced: int = 0


def run_case(engine: Engine, case: Case, extraction: bool, repetitions: int,
             max_tokens: int) -> DraftCase:
    compiled = engine.compile(case.schema)
    prompt = engine.runtime.tokenize(case.prompt)
    engine.runtime.start(prompt)  # the prompt in the KV cache for every timed run alike
    out = DraftCase(case.name, extraction)
    for rep in range(repetitions):
        order = MODES if rep % 2 == 0 else MODES[::-1]  # drift hits every mode alike
        for mode in order:
            gc.collect()
            t0 = time.perf_counter()
            if mode == "unconstrained":
                # not `generate(prompt, None)`: that is free text under a grammar, drafted
                g = decode(engine.runtime, prompt, None, SamplingParams(),
                           max_tokens=max_tokens)
            else:
                g = engine.generate(prompt, compiled, max_tokens=max_tokens,
                                    drafting=mode)  # type: ignore[arg-type]
            seconds = time.perf_counter() - t0
            out.seconds.setdefault(mode, []).append(seconds)
            out.tokens.setdefault(mode, []).append(g.usage.completion_tokens)
            out.texts[mode] = g.text
            if mode == "verify" and rep == 0:
                out.proposed, out.accepted = g.usage.draft_tokens, g.usage.draft_accepted
                out.forced = g.usage.forced_tokens
    return out


def _tps(c: DraftCase, mode: str, rep: int | None = None) -> float:
    idx = range(len(c.seconds[mode])) if rep is None else [rep]
    seconds = sum(c.seconds[mode][i] for i in idx)
    return sum(c.tokens[mode][i] for i in idx) / seconds if seconds else 0.0


def call_costs(engine: Engine, prompt: str, repetitions: int = 9) -> dict[str, Any]:
    """Median ms of one runtime call of n = 1..exact_batch tokens after `prompt`, with logits
    at every position (how a draft is checked) and at the last only; the ceiling is the
    tokens/s of full checked calls over that of one-token calls. A runtime whose rows do not
    depend on the call (`exact_batch` None) is measured up to 8 tokens."""
    rt = engine.runtime
    widest = rt.exact_batch or 8
    tokens = rt.tokenize(prompt)
    rt.start(tokens)
    draft = tokens[1: 1 + widest]  # any tokens: the cost does not depend on them
    every: dict[int, float] = {}
    last: dict[int, float] = {}
    for n in range(1, widest + 1):
        for at, out in ((list(range(n)), every), ([n - 1], last)):
            times = []
            for _ in range(repetitions):
                t0 = time.perf_counter()
                rows = rt.evaluate(draft[:n], at)
                for k in range(len(at)):  # every row read (a runtime may compute it only then)
                    rows[k]
                times.append(time.perf_counter() - t0)
                rt.rollback(n)
            out[n] = statistics.median(times) * 1000
    n = widest
    return {"exact_batch": n,
            "ms_logits_every": {str(k): round(v, 2) for k, v in every.items()},
            "ms_logits_last": {str(k): round(v, 2) for k, v in last.items()},
            "ceiling_vs_one_token": round(n * every[1] / every[n], 2)}


def measure(engine: Engine, *, repetitions: int, max_tokens: int,
            cases: tuple[Case, ...] = CASES) -> dict[str, Any]:
    costs = call_costs(engine, EXTRACTION[0].prompt)
    results = [run_case(engine, c, False, repetitions, max_tokens) for c in cases]
    results += [run_case(engine, c, True, repetitions, max_tokens) for c in EXTRACTION]
    extraction = [c for c in results if c.extraction]
    ratios = []
    for rep in range(repetitions):  # paired per repetition, then the median
        drafted = sum(c.tokens["verify"][rep] for c in extraction) / \
            sum(c.seconds["verify"][rep] for c in extraction)
        free = sum(c.tokens["unconstrained"][rep] for c in extraction) / \
            sum(c.seconds["unconstrained"][rep] for c in extraction)
        ratios.append(drafted / free)
    proposed = sum(c.proposed for c in results)
    return {
        "greedy_identical": all(c.texts["verify"] == c.texts["off"] for c in results),
        "extraction_tps_ratio": statistics.median(ratios),
        "acceptance_rate": sum(c.accepted for c in results) / proposed if proposed else 0.0,
        "call_costs": costs,
        "cases": [{
            "name": c.name, "extraction": c.extraction,
            "tokens_per_s": {m: round(statistics.median(
                _tps(c, m, r) for r in range(repetitions)), 1) for m in MODES},
            "completion_tokens": c.tokens["verify"][0],
            "draft_tokens": c.proposed, "draft_accepted": c.accepted,
            "forced_tokens": c.forced,
            "greedy_identical": c.texts["verify"] == c.texts["off"],
            "force_changes_answer": c.texts["force"] != c.texts["off"],
            "text": c.texts["verify"],
        } for c in results],
        "config": {"repetitions": repetitions, "max_tokens": max_tokens, "sampling": "greedy"},
    }


def print_table(data: dict[str, Any]) -> None:
    print("\nVerified drafts (greedy; tokens/s, median of runs)")
    print(f"{'case':18} {'drafts':>8} {'forced':>8} {'none':>8} {'unconstr':>9} "
          f"{'accepted':>10} {'identical':>9}")
    for c in data["cases"]:
        t = c["tokens_per_s"]
        acc = f"{c['draft_accepted']}/{c['draft_tokens']}"
        print(f"{c['name']:18} {t['verify']:8.1f} {t['force']:8.1f} {t['off']:8.1f} "
              f"{t['unconstrained']:9.1f} {acc:>10} {c['greedy_identical']!s:>9}")
    print(f"greedy identical on every case: {data['greedy_identical']}; acceptance rate "
          f"{data['acceptance_rate']:.2f}; extraction: drafts / unconstrained tokens/s "
          f"{data['extraction_tps_ratio']:.2f}x")
    c = data["call_costs"]
    n = c["exact_batch"]
    print(f"ceiling: a call of 1 token {c['ms_logits_every']['1']:.1f} ms; of {n} "
          f"(the most an exact check takes) {c['ms_logits_every'][str(n)]:.1f} ms with logits "
          f"at each, {c['ms_logits_last'][str(n)]:.1f} ms at the last only: drafts can at "
          f"best give {c['ceiling_vs_one_token']:.2f}x the tokens/s of one token a call")
