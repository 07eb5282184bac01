"""MaskBench-style correctness on the sample's test instances, ratcheted against a baseline.

Each instance is serialised with `json.dumps(data, ensure_ascii=False)` (separators ", " and
": ", kaname's default layout), tokenized with the Gemma tokenizer and walked through the
matcher: valid instances must be accepted, invalid ones rejected. Counts are compared with
tests/baselines/maskbench.json, which holds one entry per sample ("shared-350" where
../shared/data is present, "vendored-N" otherwise; see conftest.py). A regression fails; an
improvement passes with a warning. The test never writes the baseline: recording new figures
is an explicit step, `python scripts/update_baselines.py` (then commit the file).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

BASELINE = Path(__file__).parent / "baselines" / "maskbench.json"
UPDATE_COMMAND = "python scripts/update_baselines.py"


def accepts(tokenizer, compiled, text: str) -> bool:
    m = compiled.new_matcher()
    return m.accept_tokens(tokenizer.tokenize_str(text)) and m.is_accepting()


def maskbench_counts(tokenizer, schema_sample, compiled) -> tuple[dict[str, int], list]:
    """The figures the baseline records, and the invalid instances accepted."""
    counts = {"schemas": len(schema_sample), "compiled": len(compiled), "valid_accepted": 0,
              "valid_rejected": 0, "invalid_accepted": 0, "invalid_rejected": 0}
    invalid_accepted = []
    for row, c in compiled:
        for test in row["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False)
            ok = accepts(tokenizer, c, text)
            key = ("valid_" if test["valid"] else "invalid_") + ("accepted" if ok else "rejected")
            counts[key] += 1
            if ok and not test["valid"]:
                invalid_accepted.append((row["id"], test["description"], text[:200]))
    return counts, invalid_accepted


def read_baselines() -> dict[str, dict[str, Any]]:
    return json.loads(BASELINE.read_text()) if BASELINE.is_file() else {}


def compare(base: dict[str, int], counts: dict[str, int]) -> tuple[str | None, dict]:
    """(why the sample does not match, or None; regressions as {key: (baseline, now)})."""
    if counts["schemas"] != base["schemas"]:
        return f"the sample changed ({base['schemas']} -> {counts['schemas']} schemas)", {}
    regressions = {k: (base[k], counts[k]) for k in ("valid_rejected", "invalid_accepted")
                   if counts[k] > base[k]}
    if counts["compiled"] < base["compiled"]:
        regressions["compiled"] = (base["compiled"], counts["compiled"])
    return None, regressions


def test_maskbench_ratchet(gemma, sample_name, schema_sample, compiled_sample):
    compiled, errors = compiled_sample
    counts, invalid_accepted = maskbench_counts(gemma.tokenizer, schema_sample, compiled)
    print(f"\nmaskbench counts ({sample_name}):", counts, "compile errors:", dict(errors))
    print("invalid instances accepted:", invalid_accepted)
    assert counts["valid_accepted"] > 0 and counts["invalid_rejected"] > 0
    base = read_baselines().get(sample_name)
    assert base is not None, (
        f"no baseline for sample {sample_name!r} in {BASELINE}: record it with "
        f"`{UPDATE_COMMAND}` (now: {counts})")
    mismatch, regressions = compare(base, counts)
    assert mismatch is None, f"{mismatch}: regenerate the baseline with `{UPDATE_COMMAND}`"
    assert not regressions, f"regressions on {sample_name} (baseline, now): {regressions}"
    if counts != base:
        changed = {k: (base.get(k), v) for k, v in counts.items() if base.get(k) != v}
        warnings.warn(f"maskbench improved on {sample_name} (baseline, now): {changed}; record "
                      f"it with `{UPDATE_COMMAND}` and commit {BASELINE.name}", stacklevel=1)


def test_no_valid_instance_rejected_that_llguidance_accepts(gemma, compiled_sample):
    """Every valid instance kaname rejects is rejected by llguidance too, on its widest
    reading of the same schema (lenient: unknown keywords skipped; oneOf read as anyOf; the
    same separators): the rejection comes from llguidance's departures (key order, formats it
    enforces), never from kaname's rewrites or guards."""
    import llguidance as llg

    options = {"lenient": True, "coerce_one_of": True, "key_separator": ": ",
               "item_separator": ", ", "whitespace_flexible": False}
    ours: list[str] = []
    for row, c in compiled_sample[0]:
        wide = None
        for test in row["tests"]:
            if not test["valid"]:
                continue
            ids = gemma.tokenizer.tokenize_str(json.dumps(test["data"], ensure_ascii=False))
            m = c.new_matcher()
            if m.accept_tokens(ids) and m.is_accepting():
                continue
            if wide is None:
                wide = llg.LLMatcher.grammar_from_json_schema(
                    row["schema"], overrides={"x-guidance": options})
            lm = llg.LLMatcher(gemma.tokenizer, wide)
            if lm.consume_tokens(ids) and lm.is_accepting():
                ours.append(f"{row['id']}: {test['description']}")
    assert not ours, ours
