"""MaskBench-style correctness on the sample's test instances, ratcheted against a baseline.

Each instance is serialised with `json.dumps(data, ensure_ascii=False)` (separators ", " and
": ", kaname's default layout), tokenized with the Gemma tokenizer and walked through the
matcher: valid instances must be accepted, invalid ones rejected. Counts are compared with
tests/baselines/maskbench.json: a regression fails; an improvement rewrites the baseline (commit
it).
"""

from __future__ import annotations

import json
from pathlib import Path

BASELINE = Path(__file__).parent / "baselines" / "maskbench.json"


def accepts(tokenizer, compiled, text: str) -> bool:
    m = compiled.new_matcher()
    return m.consume_tokens(tokenizer.tokenize_str(text)) and m.is_accepting()


def test_maskbench_ratchet(gemma, schema_sample, compiled_sample):
    compiled, errors = compiled_sample
    counts = {"schemas": len(schema_sample), "compiled": len(compiled), "valid_accepted": 0,
              "valid_rejected": 0, "invalid_accepted": 0, "invalid_rejected": 0}
    invalid_accepted = []
    for row, c in compiled:
        for test in row["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False)
            ok = accepts(gemma.tokenizer, c, text)
            key = ("valid_" if test["valid"] else "invalid_") + ("accepted" if ok else "rejected")
            counts[key] += 1
            if ok and not test["valid"]:
                invalid_accepted.append((row["id"], test["description"], text[:200]))
    print("\nmaskbench counts:", counts, "compile errors:", dict(errors))
    print("invalid instances accepted:", invalid_accepted)
    assert counts["valid_accepted"] > 0 and counts["invalid_rejected"] > 0
    if not BASELINE.is_file():
        BASELINE.write_text(json.dumps(counts, indent=2) + "\n")
        return
    base = json.loads(BASELINE.read_text())
    assert counts["schemas"] == base["schemas"], "the sample changed: regenerate the baseline"
    regressions = {k: (base[k], counts[k]) for k in ("valid_rejected", "invalid_accepted")
                   if counts[k] > base[k]}
    if counts["compiled"] < base["compiled"]:
        regressions["compiled"] = (base["compiled"], counts["compiled"])
    assert not regressions, f"regressions (baseline, now): {regressions}"
    if counts != base:
        BASELINE.write_text(json.dumps(counts, indent=2) + "\n")
        print("improvement: baseline updated, commit tests/baselines/maskbench.json")
