"""Drafts of a started word's rest, or none: `Drafter()` against `Drafter(word_rests=True)`
(the rule before), in one process on the embedded model, alternating which goes first, over the
seven `kaname bench e2e` prompts, greedy, max_tokens 256. Each generation starts from the
prompt held in the KV cache but its last token, as the bench's. Prints tokens/s per prompt
(median of runs), the ratio per run (median over prompts), and whether every output is the
same.

    .venv/bin/python scripts/bench_word_rests.py [RUNS]

Run it alone (2 cores: llama.cpp's threads spin-wait).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from kaname.bench.common import CASES, EXTRACTION
from kaname.decoding.drafts import Drafter
from kaname.engine import Engine

RULES = {"no_word_rests": False, "word_rests": True}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    engine = Engine.default()
    tok = engine.runtime.tokenizer
    cases = (*CASES, *EXTRACTION)
    compiled = {c.name: engine.compile(c.schema) for c in cases}
    prompts = {c.name: engine.runtime.tokenize(c.prompt) for c in cases}
    tps: dict[str, dict[str, list[float]]] = {r: {c.name: [] for c in cases} for r in RULES}
    texts: dict[str, set[str]] = {c.name: set() for c in cases}
    load = os.getloadavg()[0]
    for run in range(runs + 1):  # run 0 warms up
        for j, case in enumerate(cases):
            order = list(RULES) if (run + j) % 2 == 0 else list(RULES)[::-1]
            for rule in order:
                prompt = prompts[case.name]
                engine.runtime.start([*prompt, prompt[-1]])
                drafter = Drafter(tok, prompt, word_rests=RULES[rule])
                t0 = time.perf_counter()
                r = engine.generate(list(prompt), compiled[case.name], max_tokens=256,
                                    drafter=drafter)
                seconds = time.perf_counter() - t0
                texts[case.name].add(r.text)
                if run:
                    tps[rule][case.name].append(r.usage.completion_tokens / seconds)
    new, old = tps["no_word_rests"], tps["word_rests"]
    for case in cases:
        a, b = statistics.median(new[case.name]), statistics.median(old[case.name])
        print(f"{case.name:18} no_word_rests {a:6.1f}  word_rests {b:6.1f}  ratio {a / b:.3f}")
    per_run = [statistics.median(new[c.name][i] / old[c.name][i] for c in cases)
               for i in range(runs)]
    print("no_word_rests ÷ word_rests per run (median over prompts): "
          + ", ".join(f"{x:.3f}" for x in per_run) + f"; median {statistics.median(per_run):.3f}")
    print(f"every output the same under both: {all(len(t) == 1 for t in texts.values())}")
    print(f"1-min load {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
