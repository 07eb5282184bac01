"""Recompute tests/baselines/maskbench.json for the sample(s) available and write it.

    python scripts/update_baselines.py [--sample shared|vendored|all] [--accept-regressions]

tests/test_maskbench.py never writes the baseline: it fails on a regression and warns on an
improvement, naming this command. The vendored sample (tests/data/) is always available; the
shared one ("shared-350") only where ../shared/data is (or KANAME_DATA points at it). A figure
that got worse is not recorded unless --accept-regressions is given. Commit the file afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import compile_sample, load_shared_sample, load_vendored_sample  # noqa: E402
from test_maskbench import BASELINE, compare, maskbench_counts, read_baselines  # noqa: E402

from kaname.runtimes.llamacpp import default_vocab  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", choices=("shared", "vendored", "all"), default="all",
                    help="which sample to recompute (default: every one available)")
    ap.add_argument("--accept-regressions", action="store_true",
                    help="record figures that are worse than the baseline")
    args = ap.parse_args()
    samples = []
    if args.sample in ("shared", "all"):
        shared = load_shared_sample()
        if shared is None and args.sample == "shared":
            ap.error("the shared sample is not available (../shared/data or KANAME_DATA)")
        if shared is None:
            print("shared sample not available: skipped", file=sys.stderr)
        else:
            samples.append(shared)
    if args.sample in ("vendored", "all"):
        samples.append(load_vendored_sample())
    tokenizer = default_vocab().tokenizer
    baselines = read_baselines()
    refused = []
    for name, rows in samples:
        compiled, _ = compile_sample(tokenizer, rows)
        counts, _ = maskbench_counts(tokenizer, rows, compiled)
        old = baselines.get(name)
        if old is not None:
            mismatch, regressions = compare(old, counts)
            if regressions and not args.accept_regressions:
                refused.append(name)
                print(f"{name}: regressions (baseline, now) {regressions}: not recorded "
                      "(--accept-regressions records them)", file=sys.stderr)
                continue
            if mismatch:
                print(f"{name}: {mismatch}", file=sys.stderr)
        print(f"{name}: {old} -> {counts}" if old != counts else f"{name}: unchanged {counts}")
        baselines[name] = counts
    BASELINE.parent.mkdir(parents=True, exist_ok=True)
    BASELINE.write_text(json.dumps(dict(sorted(baselines.items())), indent=2) + "\n")
    print(f"wrote {BASELINE.relative_to(ROOT)}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
