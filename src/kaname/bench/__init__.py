"""Benchmarks: commands that print figures, peers measured in the same process.

This package module holds only what `kaname`'s argument parser needs (engine names, defaults),
standard library only, so that registering the `bench` subcommands imports no benchmark
module. The suites, and what they share (`common`), are imported when a suite runs.
"""

from __future__ import annotations

from pathlib import Path

# `kaname bench schemas`
SCHEMAS_ENGINES = ("kaname", "llguidance", "xgrammar", "outlines", "llamacpp")
SCHEMAS_TOKENIZERS = ("gemma", "deepseek")
SCHEMAS_DATA = Path("..") / "shared" / "data" / "jsonschemabench" / "maskbench.jsonl.gz"
SCHEMAS_SEED = 20261129

# `kaname bench e2e`
E2E_ENGINES = ("kaname", "kaname_ceiling", "kaname_full_rows", "kaname_forced", "kaname_none",
               "llamacpp_grammar", "xgrammar", "outlines", "unconstrained",
               "kaname_unconstrained")
E2E_MAX_TOKENS, E2E_RUNS = 256, 3  # a full run
E2E_QUICK_MAX_TOKENS, E2E_QUICK_RUNS = 64, 1  # --quick

# `kaname bench serve`
SERVE_CLIENTS = (1, 2, 4, 8, 16)
SERVE_DURATION_S = 30.0  # per level; a level on the embedded model takes ~30-45 s
SERVE_MAX_TOKENS = 96  # every answer of the workload ends well within it
SERVE_TIMEOUT_S = 300.0
SERVE_SEED = 20260523  # of the request mix
