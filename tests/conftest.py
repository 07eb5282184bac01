"""Shared fixtures: the Gemma vocabulary, random runtimes, the JSONSchemaBench sample."""

from __future__ import annotations

import gzip
import json
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from kaname.runtimes.llamacpp import Vocab, default_vocab
from kaname.runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KANAME_DATA", ROOT.parent / "shared" / "data"))
MASKBENCH = DATA / "jsonschemabench" / "maskbench.jsonl.gz"
PER_SUBSET = 25  # x 14 subsets (fewer where a subset is small) -> >= 300 schemas


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
def schema_sample() -> list[dict[str, Any]]:
    """A fixed-seed sample of JSONSchemaBench, stratified over every subset."""
    if not MASKBENCH.is_file():
        pytest.skip(f"JSONSchemaBench data not found at {MASKBENCH} (set KANAME_DATA)")
    by_subset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with gzip.open(MASKBENCH, "rt") as f:
        for line in f:
            row = json.loads(line)
            by_subset[row["subset"]].append(row)
    rng = random.Random(20261129)
    sample: list[dict[str, Any]] = []
    for subset in sorted(by_subset):
        rows = by_subset[subset]
        sample += rng.sample(rows, min(PER_SUBSET, len(rows)))
    return sample


@pytest.fixture(scope="session")
def compiled_sample(gemma, schema_sample):
    """The sample compiled strictly with default guards: ([(row, compiled)], errors by keyword)."""
    from collections import Counter

    from kaname.errors import ConstraintError
    from kaname.grammar import GrammarCompiler, JsonSchema

    compiler = GrammarCompiler(gemma.tokenizer)
    compiled, errors = [], Counter()
    for row in schema_sample:
        try:
            compiled.append((row, compiler.compile(JsonSchema(row["schema"], strict=True))))
        except ConstraintError as e:
            errors[getattr(e, "keyword", None) or type(e).__name__] += 1
    return compiled, errors
