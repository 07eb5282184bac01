"""`kaname bench prefill --quick --json` runs end to end (two servers on the embedded model, the
busy batch, the llama-cpp-python peer) and its figures hang together. The figures themselves
are measured alone, not here (docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from serverproc import ROOT

pytestmark = pytest.mark.model


def test_bench_prefill_quick_json():
    p = subprocess.run([sys.executable, "-m", "kaname.cli", "bench", "prefill", "--quick",
                        "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    peer = r["llama_cpp_python"]
    for part in ("alone", "busy_batch"):
        x = r[part]
        assert x["prompt_tokens"] > 100 and x["next_turn_prompt_tokens"] > x["prompt_tokens"]
        assert x["cold_s"] > 0 and x["retry_s"] > 0 and x["next_turn_s"] > 0
        assert x["retry_of_cold"] == pytest.approx(x["retry_s"] / x["cold_s"], abs=1e-3)
    assert r["busy_batch"]["other_sequences"] == 7
    assert peer["tokens"] == r["alone"]["prompt_tokens"] and peer["seconds"] > 0
    assert r["ratios"]["cold_of_llama_cpp"] == pytest.approx(
        r["alone"]["cold_s"] / peer["seconds"], rel=1e-2)
    assert set(r["targets_met"]) == {"cold_within_1.3x_llama_cpp",
                                     "retry_and_next_turn_within_15pct"}
    assert len(r["run"]["loadavg_1m"]) == 2
