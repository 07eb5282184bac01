"""`kaname bench engine`: the JSON it prints, its helpers (and the benchmarks' shared ones, in
`kaname.bench.common`), and greedy agreement of both paths."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from kaname.bench import common
from kaname.bench import engine_bench as eb
from kaname.bench import sampling_bench as sb
from kaname.grammar import GrammarCompiler
from kaname.runtimes.llamacpp import Vocab
from kaname.runtimes.random_logits import RandomLogitsRuntime

# ---------------------------------------------------------------------------------------------
# Pure helpers, against hand-computed values


def test_percentile_hand_computed() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4; rank of q is 3 * q / 100
    assert common.percentile(xs, 0) == 1.0
    assert common.percentile(xs, 50) == pytest.approx(2.5)  # rank 1.5
    assert common.percentile(xs, 99) == pytest.approx(3.97)  # rank 2.97: 3 + 0.97 * (4 - 3)
    assert common.percentile(xs, 100) == 4.0
    assert common.percentile([7.0], 99) == 7.0


def test_percentile_matches_numpy() -> None:
    xs = list(np.random.default_rng(0).exponential(size=101))
    for q in (1, 50, 90, 99):
        assert common.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        common.percentile([], 50)
    with pytest.raises(ValueError):
        common.percentile([1.0], 101)


_FAKE_BYTES = {0: b"<pad>", 1: b"<eos>", 2: b"a", 3: b"bc", 4: b"a"}


class _FakeTokenizer:
    """Five tokens: 0 and 1 special (1 is EOS), 2 and 4 both spell "a"."""

    vocab_size = 5

    def is_special_token(self, i: int) -> bool:
        return i in (0, 1)

    def decode_bytes(self, ids: list[int]) -> bytes:
        return b"".join(_FAKE_BYTES[i] for i in ids)


def test_peer_vocabulary_blanks_special_tokens() -> None:
    vocab = common.PeerVocabulary(_FakeTokenizer(), [1])
    assert vocab.n_vocab == 5 and vocab.eos == (1,)
    assert vocab.pieces() == [b"", b"", b"a", b"bc", b"a"]
    assert vocab.pieces() is vocab.pieces()  # computed once
    assert vocab.token_ids_by_bytes() == {b"a": [2, 4], b"bc": [3]}


def test_peer_vocabulary_leaves_out_eos_in_outlines_table() -> None:
    vocab = common.PeerVocabulary(_FakeTokenizer(), [3])  # an EOS that is not special
    assert vocab.pieces()[3] == b"bc"  # xgrammar is given its bytes (EOS via stop_token_ids)
    assert vocab.token_ids_by_bytes() == {b"a": [2, 4]}


def test_summarize_us_converts_ns() -> None:
    s = eb.summarize_us([1000, 2000, 3000, 4000])
    assert s == pytest.approx({"p50": 2.5, "p99": 3.97, "mean": 2.5})


def test_ratio_and_share_edge_cases() -> None:
    assert eb.ratio(1.0, 4.0) == 0.25
    assert eb.ratio(1.0, 0.0) == math.inf
    assert eb.share(3, 4) == 0.75
    assert eb.share(3, 0) == 0.0


def _step(kind: str, pick: int, commit: int, mask: int, apply: int, *,
          mismatch: bool = False) -> eb.Step:
    return eb.Step(kind, tokens=2, kaname_pick_ns=pick, kaname_commit_ns=commit,
                   plain_mask_ns=mask, plain_apply_ns=apply, plain_argmax_ns=0,
                   plain_commit_ns=0, mismatch=mismatch)


def test_report_aggregates_hand_computed() -> None:
    # kaname: 100 ns and 300 ns per step (mean 200); plain: 1000 ns both (mean 1000)
    steps = [_step("lazy_hit", 60, 40, 200, 800), _step("full_mask", 250, 50, 500, 500,
                                                        mismatch=True)]
    # rep 0: constrained 10 tok / 1 s, unconstrained 10 tok / 2 s -> ratio 2
    # rep 1: constrained 12 tok / 2 s, unconstrained 12 tok / 3 s -> ratio 1.5
    c = [eb.Run(10, 1.0, forced=4, lazy_hits=5, full_masks=1),
         eb.Run(12, 2.0, forced=6, lazy_hits=5, full_masks=1)]
    u = [eb.Run(10, 2.0), eb.Run(12, 3.0)]
    result = eb.CaseResult("x", steps, c, u)
    data = eb.report([result], eb.Config((), max_tokens=10, repetitions=2), quick=True)
    assert data["overhead_ratio_vs_llguidance"] == pytest.approx(0.2)
    assert data["per_token_us"]["kaname"]["mean"] == pytest.approx(0.2)
    assert data["constrained_over_unconstrained_tps"] == pytest.approx(1.75)  # median(2, 1.5)
    assert data["tokens_per_s"]["constrained"] == pytest.approx(8.0)  # median(10, 6)
    assert data["forced_share"] == pytest.approx(10 / 22)
    assert data["lazy_hit_share"] == pytest.approx(10 / 12)
    assert data["greedy_mismatches"] == 1
    paths = data["kaname_paths"]
    assert paths["lazy_hit"]["time_share"] == pytest.approx(0.25)
    assert paths["full_mask"]["mean_us"] == pytest.approx(0.3)
    assert data["phase_shares"]["plain_llguidance"]["apply_bitmask"] == pytest.approx(0.65)
    json.dumps(data)  # JSON-ready as is


# ---------------------------------------------------------------------------------------------
# `kaname bench sampling` (also the "sampling" key of `kaname bench engine`)


def test_sampling_ratios_and_targets_hand_computed() -> None:
    medians = {"greedy": 1.0, "temperature": 1.5, "top_p": 1.8, "top_k": 1.5, "min_p": 2.0}
    ratios = sb._ratios(medians)
    assert ratios == pytest.approx({"temperature_over_greedy": 1.5, "top_p_over_temperature": 1.2,
                                    "top_k_over_temperature": 1.0,
                                    "min_p_over_temperature": 4 / 3})
    assert sb.targets_met(ratios) == {"temperature_over_greedy": True,
                                      "top_p_over_temperature": True,  # 1.2 <= 1.2
                                      "top_k_over_temperature": True,
                                      "min_p_over_temperature": False}
    assert not sb.targets_met({**ratios, "temperature_over_greedy": 2.01})[
        "temperature_over_greedy"]
    del medians["min_p"]  # a mode the server ignores is not measured there
    assert "min_p_over_temperature" not in sb._ratios(medians)


def test_sampling_turns_rotate_every_mode() -> None:
    turns = list(sb._turns(len(sb.MODES)))
    assert [rep for rep, _ in turns] == list(range(len(sb.MODES)))
    assert all(sorted(order) == sorted(sb.MODES) for _, order in turns)
    assert sorted(order[0] for _, order in turns) == sorted(sb.MODES)  # each goes first once


@pytest.mark.model
def test_bench_sampling_quick_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kaname.cli", "bench", "sampling", "--quick", "--json"],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    part = data["in_process"]
    assert part["config"]["n_vocab"] == 262_144
    for key in ("pick_and_commit_us_p50", "step_us_p50"):
        assert set(part[key]) == set(sb.MODES)
        assert all(_finite_positive(v) for v in part[key].values()), key
    step = part["step_us_p50"]
    assert part["ratios_step"]["top_p_over_temperature"] == pytest.approx(
        step["top_p"] / step["temperature"])
    ignored = data["server"]["modes_ignored_by_the_server"]
    assert ignored == []  # every mode's field is read by the server: every mode is timed
    for endpoint in ("chat", "completions"):
        server = data["server"][endpoint]
        assert set(server["ms_per_token_p50"]) == set(sb.MODES) - set(ignored)
        assert all(_finite_positive(v) for v in server["ms_per_token_p50"].values())
        assert all(_finite_positive(v) for v in server["cpu_ms_per_token_p50"].values())
        assert min(server["completion_tokens"]) > 0
        assert set(data["targets_met"][endpoint]) == set(server["ratios"])
    assert data["targets"] == {"temperature_over_greedy_max": 2.0,
                               "truncation_over_temperature_max": 1.2}


# ---------------------------------------------------------------------------------------------
# Both paths agree on every greedy step (random logits: many full-mask steps, no model needed)


@pytest.mark.model
def test_trace_paths_agree_on_random_logits(gemma: Vocab) -> None:
    runtime = RandomLogitsRuntime(gemma.tokenizer, seed=7, eos_token_ids=gemma.eos_token_ids,
                                  bos_token_id=gemma.bos_token_id)
    compiled = GrammarCompiler(gemma.tokenizer).compile(common.COMPANY)
    steps = eb.trace_steps(runtime, compiled, [2], max_tokens=60)
    assert steps
    assert sum(s.mismatch for s in steps) == 0
    assert any(s.kind == "full_mask" for s in steps)  # the masked path was exercised


# ---------------------------------------------------------------------------------------------
# The command end to end on the embedded model


def _finite_positive(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


@pytest.mark.model
def test_bench_engine_quick_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kaname.cli", "bench", "engine", "--quick", "--json"],
        capture_output=True, text=True, timeout=900, check=False)
    data = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    assert isinstance(data, dict)
    for key in ("overhead_ratio_vs_llguidance", "constrained_over_unconstrained_tps"):
        assert _finite_positive(data[key]), key
    for path in ("kaname", "plain_llguidance"):
        for q in ("p50", "p99", "mean"):
            assert _finite_positive(data["per_token_us"][path][q]), (path, q)
    for mode in ("constrained", "unconstrained"):
        assert _finite_positive(data["tokens_per_s"][mode]), mode
    assert 0 < data["forced_share"] < 1
    assert 0 < data["lazy_hit_share"] <= 1
    assert data["targets"] == {"overhead_ratio_max": 0.5, "tps_ratio_min": 1.0}
    assert isinstance(data["machine"], str) and data["machine"]
    assert data["greedy_mismatches"] == 0
    sampling = data["sampling"]["step_us_p50"]  # (c): the sampling modes on the random model
    assert set(sampling) == set(sb.MODES) and all(map(_finite_positive, sampling.values()))
    drafts = data["drafts"]  # keys read by checks outside the tests
    assert drafts["greedy_identical"] is True
    assert 0 < drafts["acceptance_rate"] <= 1
    assert _finite_positive(drafts["extraction_tps_ratio"])
    costs = drafts["call_costs"]  # the ceiling: calls of 1..exact_batch tokens
    n = costs["exact_batch"]
    assert n >= 1 and set(costs["ms_logits_every"]) == {str(k) for k in range(1, n + 1)}
    assert all(map(_finite_positive, [*costs["ms_logits_every"].values(),
                                      *costs["ms_logits_last"].values()]))
    assert costs["ceiling_vs_one_token"] == pytest.approx(
        n * costs["ms_logits_every"]["1"] / costs["ms_logits_every"][str(n)], rel=0.02)
    assert {c["name"] for c in drafts["cases"]} >= {"extract_record", "extract_entities",
                                                     "extract_ja"}
    assert proc.returncode == 0, proc.stderr
