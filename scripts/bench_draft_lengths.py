"""What a rule for draft lengths could gain, replayed on the embedded model's greedy answers.

Greedy verification keeps a draft token exactly where it equals the model's own greedy token
there, so a generation with any drafter and any rule for how much of its drafts to check is
known, call by call, from the greedy answer alone. This script takes the answers of the seven
`kaname bench e2e` prompts (one token a call, as `kaname_none`), replays `Drafter`'s proposals
against them under each rule, and prices every verification call with what a call of that many
tokens costs on this machine up to the final hidden state (measured here, median of 15). A row
of logits is read once per token of the answer whatever the rule (rows past a rejected draft
token are never read), so rows are left out of the sum; the figures are the model's time only,
relative to the drafts as shipped. The replay's draft tokens proposed and kept match
`kaname bench e2e`'s `draft_tokens` and `draft_accepted` per prompt (÷ its runs).

    .venv/bin/python scripts/bench_draft_lengths.py

Run it alone (2 cores: the call costs are timed).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import llguidance as llg
import numpy as np

from kaname.bench.common import CASES, EXTRACTION
from kaname.decoding.drafts import Draft, Drafter, DraftSource, KnownAnswer
from kaname.engine import Engine
from kaname.grammar import CompiledConstraint
from kaname.grammar.matcher import Matcher

MAX_TOKENS = 256


@dataclass
class Context:
    """What a rule may look at: the answer so far, the tokenizer, whether the last draft was
    cut short by the model; `answer` only for the oracle, which is a bound, not a rule."""

    out: list[int]
    tok: llg.LLTokenizer
    last_rejected: bool
    answer: list[int]


Rule = Callable[[Draft, Context], Draft]


def _word_byte(b: bytes) -> bool:
    return b[:1].isalnum()


def _mid_word(d: Draft, c: Context) -> bool:
    """A forced draft that goes on with a word the model has started (`t` → `echnical`)."""
    return bool(d.forced and d.tokens and _word_byte(c.tok.decode_bytes([c.out[-1]])[-1:])
                and _word_byte(c.tok.decode_bytes([d.tokens[0]])))


def shipped(d: Draft, c: Context) -> Draft:
    return d


def no_drafts(d: Draft, c: Context) -> Draft:
    return Draft([], 0)


def mid_word_probe(d: Draft, c: Context) -> Draft:
    return Draft(d.tokens, d.forced, True) if _mid_word(d, c) else d


def after_reject_probe(d: Draft, c: Context) -> Draft:
    return Draft(d.tokens, d.forced, True) if c.last_rejected and d.tokens else d


def cut_at_word(d: Draft, c: Context) -> Draft:
    """A forced draft up to the first token that starts a word (a key or a value the model
    may spell its own way), its first token aside."""
    if not d.forced:
        return d
    keep, prev = [], c.tok.decode_bytes([c.out[-1]])
    for i, t in enumerate(d.tokens):
        b = c.tok.decode_bytes([t])
        if i and _word_byte(b) and not _word_byte(prev[-1:]):
            break
        keep.append(t)
        prev = b
    return Draft(keep, min(d.forced, len(keep)), d.probe)


def oracle_length(d: Draft, c: Context) -> Draft:
    """The draft cut where the model will reject it: no rule for lengths can do better."""
    n = _kept(d.tokens, c.answer, len(c.out))
    return Draft(d.tokens[:n], min(n, d.forced))


# name: (what it is, Drafter's word_rests, the rule)
RULES: dict[str, tuple[str, bool, Rule]] = {
    "shipped": ("drafts as shipped (Drafter)", False, shipped),
    "no_drafts": ("one token a call", False, no_drafts),
    "word_rests": ("forced drafts that go on with a word the model began too (word_rests=True, "
                   "the default before)", True, shipped),
    "word_rests_probe": ("those, their first token checked alone first", True, mid_word_probe),
    "after_reject_probe": ("after a rejection, the next draft's first token alone first", False,
                           after_reject_probe),
    "cut_at_word": ("forced drafts end before a token that starts a word", False, cut_at_word),
    "oracle_length": ("bound: drafts cut exactly where the model rejects them", False,
                      oracle_length),
}


def _kept(draft: Sequence[int], answer: Sequence[int], at: int) -> int:
    n = 0
    while n < len(draft) and at + n < len(answer) and draft[n] == answer[at + n]:
        n += 1
    return n


@dataclass
class Replayed:
    ms: float
    calls: int
    proposed: int
    kept: int


def replay(answer: list[int], compiled: CompiledConstraint, source: DraftSource, rule: Rule,
           tok: llg.LLTokenizer, costs: dict[int, float], exact_batch: int) -> Replayed:
    """The calls a verified generation makes when the model's greedy answer is `answer`, as
    `decoding.loop` makes them (a draft checked in calls of `exact_batch` tokens until its
    first rejected token; a probe's first call holds one draft token)."""
    m: Matcher = compiled.new_matcher()
    out = answer[:1]  # the first token comes with the prompt's call, the same for every rule
    assert m.accept_tokens(out)
    source.commit(out)
    r = Replayed(0.0, 0, 0, 0)
    rejected = False
    while len(out) < len(answer):
        d = rule(source.propose(m, MAX_TOKENS - len(out)),
                 Context(out, tok, rejected, answer))
        kept = _kept(d.tokens, answer, len(out))
        seq, done, first = 1 + len(d.tokens), 0, True
        while True:  # the row at index `kept` of [token, *draft] decides
            size = min(2 if d.probe and first else exact_batch, seq - done)
            r.ms += costs[size]
            r.calls += 1
            first = False
            if done + size > kept or done + size >= seq:
                break
            done += size
        r.proposed += len(d.tokens)
        r.kept += kept
        rejected = kept < len(d.tokens)
        new = d.tokens[:kept] + answer[len(out) + kept:len(out) + kept + 1]
        assert m.accept_tokens(new)
        source.commit(new)
        out = out + new
    return r


def call_costs(engine: Engine, most: int, reps: int = 15) -> dict[int, float]:
    """ms a call of 1 to `most` tokens takes up to the final hidden state (rows of a few ids,
    not read), median of `reps`."""
    rt = engine.runtime
    rt.start(rt.tokenize(CASES[0].prompt))
    toks = rt.tokenize(' {"name": "Acme Robotics", "founded_year": 1998}')[:most]
    few = np.array([5, 6, 7])
    times: dict[int, list[float]] = {n: [] for n in range(1, most + 1)}
    for _ in range(reps):
        for n in times:
            t0 = time.perf_counter()
            rt.evaluate(toks[:n], list(range(n)), [few] * n)
            times[n].append((time.perf_counter() - t0) * 1e3)
            rt.rollback(n)
    return {n: statistics.median(v) for n, v in times.items()}


def main() -> None:
    engine = Engine.default()
    tok = engine.runtime.tokenizer
    load = os.getloadavg()[0]
    exact = engine.runtime.exact_batch or 8
    costs = call_costs(engine, exact)
    print(f"call costs up to the hidden state, ms (1-{exact} tokens): "
          + " / ".join(f"{costs[n]:.1f}" for n in sorted(costs)))
    cases = (*CASES, *EXTRACTION)
    answers: dict[str, list[int]] = {}
    compiled: dict[str, CompiledConstraint] = {}
    prompts: dict[str, list[int]] = {}
    for case in cases:
        compiled[case.name] = engine.compile(case.schema)
        prompts[case.name] = engine.runtime.tokenize(case.prompt)
        tokens = engine.generate(prompts[case.name], compiled[case.name],
                                 max_tokens=MAX_TOKENS, drafting="off").tokens
        assert tokens is not None  # a local model's generation has its tokens
        answers[case.name] = tokens
    results: dict[str, dict[str, Replayed]] = {}
    for name, (_, word_rests, rule) in RULES.items():
        results[name] = {c.name: replay(answers[c.name], compiled[c.name],
                                        Drafter(tok, prompts[c.name], word_rests=word_rests),
                                        rule, tok, costs, exact) for c in cases}
    results["ceiling"] = {c.name: replay(answers[c.name], compiled[c.name],
                                         KnownAnswer(tok, answers[c.name]), shipped, tok, costs,
                                         exact) for c in cases}
    base = results["shipped"]
    names = [c.name for c in cases]
    print(f"model time of each rule ÷ drafts as shipped, per prompt and over all ({len(names)} "
          f"prompts, greedy answers of {', '.join(str(len(answers[n])) for n in names)} "
          "tokens)")
    print(f"{'rule':20} " + " ".join(f"{n[:10]:>10}" for n in names)
          + f" {'all':>7} {'kept/proposed':>14} {'calls':>6}")
    for label, per in results.items():
        total = sum(p.ms for p in per.values()) / sum(p.ms for p in base.values())
        print(f"{label:20} " + " ".join(f"{per[n].ms / base[n].ms:10.3f}" for n in names)
              + f" {total:7.3f} {sum(p.kept for p in per.values()):>6}/"
              f"{sum(p.proposed for p in per.values()):<7} "
              f"{sum(p.calls for p in per.values()):>6}")
    print("rules: " + "; ".join(f"{k}: {v[0]}" for k, v in RULES.items())
          + "; ceiling: the answer itself as the draft (KnownAnswer)")
    print("kept/proposed as shipped, per prompt: " + ", ".join(
        f"{n} {base[n].kept}/{base[n].proposed}" for n in names))
    print(f"1-min load {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
