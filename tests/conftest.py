"""Shared fixtures: the Gemma vocabulary, random runtimes, the JSONSchemaBench sample."""

from __future__ import annotations

import gzip
import json
import os
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from kaname.runtimes.llamacpp import Vocab, default_vocab
from kaname.runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KANAME_DATA", ROOT.parent / "shared" / "data"))
MASKBENCH = DATA / "jsonschemabench" / "maskbench.jsonl.gz"
# The small sample vendored in the repository (tests/data/README.md), used where MASKBENCH is
# absent so that a fresh clone runs the strongest tests too.
VENDORED = ROOT / "tests" / "data" / "jsonschemabench-sample.jsonl.gz"
PER_SUBSET = 25  # x 14 subsets (fewer where a subset is small) -> >= 300 schemas


def read_rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def load_shared_sample() -> tuple[str, list[dict[str, Any]]] | None:
    """("shared-350", rows): a fixed-seed sample of the full set at MASKBENCH, stratified over
    every subset; None where MASKBENCH is absent."""
    if not MASKBENCH.is_file():
        return None
    by_subset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in read_rows(MASKBENCH):
        by_subset[row["subset"]].append(row)
    rng = random.Random(20261129)
    sample: list[dict[str, Any]] = []
    for subset in sorted(by_subset):
        rows = by_subset[subset]
        sample += rng.sample(rows, min(PER_SUBSET, len(rows)))
    return f"shared-{len(sample)}", sample


def load_vendored_sample() -> tuple[str, list[dict[str, Any]]]:
    """("vendored-N", rows): the sample in the repository, always present."""
    rows = read_rows(VENDORED)
    return f"vendored-{len(rows)}", rows


def load_schema_sample() -> tuple[str, list[dict[str, Any]]]:
    """(name, rows): the shared sample where ../shared/data is present, else the vendored one."""
    return load_shared_sample() or load_vendored_sample()


def compile_sample(tokenizer, rows):
    """Compile strictly with default guards: ([(row, compiled)], errors by keyword)."""
    from kaname.errors import ConstraintError
    from kaname.grammar import GrammarCompiler, JsonSchema

    compiler = GrammarCompiler(tokenizer)
    compiled, errors = [], Counter()
    for row in rows:
        try:
            compiled.append((row, compiler.compile(JsonSchema(row["schema"], strict=True))))
        except ConstraintError as e:
            errors[getattr(e, "keyword", None) or type(e).__name__] += 1
    return compiled, errors


@pytest.fixture(scope="session")
def gemma() -> Vocab:
    return default_vocab()


@pytest.fixture(scope="session")
def random_runtime(gemma: Vocab) -> RandomLogitsRuntime:
    return RandomLogitsRuntime(gemma.tokenizer, eos_token_ids=gemma.eos_token_ids,
                               bos_token_id=gemma.bos_token_id)


@pytest.fixture(scope="session")
def adversarial_runtime(gemma: Vocab) -> AdversarialRuntime:
    return AdversarialRuntime(gemma.tokenizer, eos_token_ids=gemma.eos_token_ids,
                              bos_token_id=gemma.bos_token_id)


@pytest.fixture(scope="session")
def _loaded_sample() -> tuple[str, list[dict[str, Any]]]:
    return load_schema_sample()


@pytest.fixture(scope="session")
def sample_name(_loaded_sample) -> str:
    """Which sample the session uses: "shared-350" or "vendored-N"."""
    return _loaded_sample[0]


@pytest.fixture(scope="session")
def schema_sample(_loaded_sample) -> list[dict[str, Any]]:
    """A fixed-seed sample of JSONSchemaBench, stratified over every subset (never skips)."""
    return _loaded_sample[1]


@pytest.fixture(scope="session")
def compiled_sample(gemma, schema_sample):
    """The sample compiled strictly with default guards: ([(row, compiled)], errors by keyword)."""
    return compile_sample(gemma.tokenizer, schema_sample)


def pytest_report_header(config) -> str:
    where = MASKBENCH if MASKBENCH.is_file() else VENDORED
    return f"kaname: JSONSchemaBench sample from {where}"
