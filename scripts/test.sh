#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, lint and type check first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests
.venv/bin/mypy  # over src/, as configured in pyproject.toml
# pytest exits 5 when it collected no test: that fails this script like any other error.
exec .venv/bin/python -m pytest "$@"
