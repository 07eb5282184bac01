#!/usr/bin/env bash
# Create .venv and install kaname with what serving needs (scripts/test.sh adds the test
# tools). Idempotent.
# llama-cpp-python builds from source (minutes on 2 cores; pip caches the wheel afterwards):
# examples, tests, tools and the server of llama.cpp are not built, nor the multimodal library
# (mtmd, LLAVA_BUILD), which kaname does not load.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
