"""Write tests/data/jsonschemabench-sample.jsonl.gz: the small JSONSchemaBench sample vendored
for tests that must run without ../shared/data (a fresh clone, CI).

    python scripts/vendor_test_data.py [--data ../shared/data/jsonschemabench/maskbench.jsonl.gz]

Deterministic: a fixed seed, subsets in sorted order, rows in file order, gzip without a name
or time stamp. Each row keeps `id`, `subset`, `schema` and `tests` (the `meta` field is dropped;
no test reads it). After regenerating, record the vendored baseline with
`python scripts/update_baselines.py` (see tests/data/README.md).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "jsonschemabench" / "maskbench.jsonl.gz"
OUT = ROOT / "tests" / "data" / "jsonschemabench-sample.jsonl.gz"
SEED = 20261201
PER_SUBSET = 7
# Draw more where a subset is large and its schemas small, so that the sample keeps enough
# compilable schemas of <= 4000 characters for tests/test_adversarial.py (60) and tool schemas
# for the format contract tests, while the file stays small.
EXTRA = {"Github_easy": 5, "Github_medium": 3, "Github_trivial": 3, "Glaiveai2K": 5}
KEEP = ("id", "subset", "schema", "tests")


def draw(source: Path) -> list[dict]:
    by_subset: dict[str, list[dict]] = defaultdict(list)
    with gzip.open(source, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            by_subset[row["subset"]].append({k: row[k] for k in KEEP})
    rng = random.Random(SEED)
    sample: list[dict] = []
    for subset in sorted(by_subset):
        rows = by_subset[subset]
        k = min(PER_SUBSET + EXTRA.get(subset, 0), len(rows))
        picked = sorted(rng.sample(range(len(rows)), k))  # file order within a subset
        sample += [rows[i] for i in picked]
    return sample


def write(sample: list[dict], out: Path) -> None:
    # key order is kept as in the source: property order in a schema matters to the grammar
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sample)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SOURCE, help="maskbench.jsonl.gz")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.data.is_file():
        ap.error(f"{args.data} not found")
    sample = draw(args.data)
    write(sample, args.out)
    counts: dict[str, int] = defaultdict(int)
    for r in sample:
        counts[r["subset"]] += 1
    print(f"wrote {args.out}: {len(sample)} schemas, "
          f"{sum(len(r['tests']) for r in sample)} test instances, "
          f"{args.out.stat().st_size} bytes; per subset: {dict(counts)}")


if __name__ == "__main__":
    main()
