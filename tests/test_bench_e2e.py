"""`kaname bench e2e`: its helpers against hand-computed numbers, the peers' logits processors
on the real vocabulary, and a quick run through the CLI."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from kaname.bench import e2e
from kaname.bench.e2e import Record
from kaname.cli import main as cli_main

# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_median_ignores_missing_values() -> None:
    assert e2e.median([3.0, 1.0, 2.0]) == 2.0
    assert e2e.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert e2e.median([None, 4.0, None, 2.0]) == 3.0
    assert e2e.median([]) is None
    assert e2e.median([None]) is None


def test_paired_ratio_and_diff_hand_computed() -> None:
    # per run: 10/5 = 2, 20/4 = 5, run 3 has no baseline -> median(2, 5) = 3.5
    assert e2e.paired_ratio([10.0, 20.0, 30.0], [5.0, 4.0, None]) == 3.5
    assert e2e.paired_ratio([1.0], [0.0]) is None
    # per run: 60, -10 -> 25
    assert e2e.paired_diff([100.0, 50.0], [40.0, 60.0]) == 25.0
    assert e2e.paired_diff([1.0], [None]) is None


def _rec(engine: str, run: int, tokens: int, seconds: float, *, sample_ns: int = 0,
         constraint_ns: int | None = None, valid: bool = True, error: str | None = None,
         case: str = "company", ttft_s: float | None = 0.1, forced: int = 0,
         text: str = "{}", drafted: int = 0, accepted: int = 0) -> Record:
    return Record(engine, case, run, tokens, seconds, ttft_s, "stop" if error is None else "error",
                  valid, sample_ns, constraint_ns, forced, text=text, error=error,
                  drafted=drafted, accepted=accepted)


def test_per_run_hand_computed() -> None:
    records = [
        _rec("kaname", 0, 10, 2.0, sample_ns=1_000, constraint_ns=500),
        _rec("kaname", 0, 30, 2.0, sample_ns=3_000, constraint_ns=1_500, case="invoice"),
        _rec("kaname", 1, 20, 1.0, sample_ns=2_000, constraint_ns=2_000),
        _rec("kaname", 1, 0, 0.0, valid=False, error="boom", case="invoice"),
    ]
    s = e2e.per_run(records, 2)
    # run 0: 40 tokens in 4 s; run 1: the error counts for nothing but validity
    assert s["tps"] == [10.0, 20.0]
    assert s["wall_us"] == [pytest.approx(100_000.0), pytest.approx(50_000.0)]
    assert s["sample_us"] == [pytest.approx(0.1), pytest.approx(0.1)]  # 4,000 ns / 40 tok
    assert s["constraint_us"] == [pytest.approx(0.05), pytest.approx(0.1)]
    # no direct constraint time: None; a run without records: None everywhere
    s = e2e.per_run([_rec("unconstrained", 0, 8, 2.0, sample_ns=800)], 2)
    assert s["tps"] == [4.0, None]
    assert s["constraint_us"] == [None, None]


def test_ratios_and_overheads_hand_computed() -> None:
    tps = {"kaname": [60.0, 40.0], "outlines": [30.0, 40.0], "llamacpp_grammar": [6.0, 5.0]}
    # outlines: per run 2.0 and 1.0 -> 1.5; llamacpp_grammar: 10 and 8 -> 9
    assert e2e.ratios(tps) == {"outlines": 1.5, "llamacpp_grammar": 9.0}
    assert e2e.ratios({"outlines": [1.0]}) == {}

    def series(sample: list[float | None], direct: list[float | None]) -> dict:
        return {"tps": [1.0, 1.0], "wall_us": [1.0, 1.0], "sample_us": sample,
                "constraint_us": direct}

    over = e2e.overheads({
        "kaname": series([300.0, 100.0], [150.0, 250.0]),
        "llamacpp_grammar": series([300.0, 500.0], [None, None]),
        "unconstrained": series([100.0, 100.0], [None, None]),
    })
    assert over["kaname"] == (200.0, "direct")
    # (300 - 100, 500 - 100) -> median 300
    assert over["llamacpp_grammar"] == (300.0, "sample_step_minus_unconstrained")
    assert "unconstrained" not in over
    over = e2e.overheads({"llamacpp_grammar": series([3.0, 5.0], [None, None])})
    assert over["llamacpp_grammar"][0] is None
    assert "not measured" in over["llamacpp_grammar"][1]


def test_targets_met() -> None:
    engines = {
        "kaname": {"available": True, "overhead_us_per_token": 200.0, "valid_pct": 100.0},
        "llamacpp_grammar": {"available": True, "overhead_us_per_token": 50_000.0},
        "outlines": {"available": True, "overhead_us_per_token": 150.0},
        "xgrammar": {"available": False, "reason": "not installed"},
    }
    met = e2e.targets_met(engines, {"llamacpp_grammar": 12.0, "outlines": 1.9})
    assert met == {"overhead_lowest": False, "tps_ratio_vs_llamacpp_grammar": True,
                   "tps_ratio_vs_outlines": False, "kaname_valid_pct": True}
    engines["outlines"]["overhead_us_per_token"] = 250.0
    engines["kaname"]["valid_pct"] = 75.0
    met = e2e.targets_met(engines, {})
    assert met == {"overhead_lowest": True, "tps_ratio_vs_llamacpp_grammar": None,
                   "tps_ratio_vs_outlines": None, "kaname_valid_pct": False}


def test_summarize_shape_hand_computed() -> None:
    records = [
        _rec("kaname", 0, 40, 1.0, sample_ns=8_000_000, constraint_ns=8_000_000, forced=10,
             ttft_s=0.02),
        _rec("kaname", 1, 40, 0.5, sample_ns=4_000_000, constraint_ns=4_000_000, forced=10,
             ttft_s=0.04),
        _rec("kaname_unconstrained", 0, 50, 2.0, ttft_s=0.03),
        _rec("kaname_unconstrained", 1, 50, 2.0, valid=False, ttft_s=0.03),
    ]
    out = e2e.summarize(records, 2, ("kaname", "xgrammar", "kaname_unconstrained"),
                        {"xgrammar": "xgrammar cannot be imported"}, {"kaname": "1.0"})
    k = out["engines"]["kaname"]
    assert k["tokens_per_s"] == 60.0  # median(40, 80)
    assert k["valid_pct"] == 100.0
    assert k["ttft_ms"] == 30.0  # median(20, 40)
    assert k["overhead_us_per_token"] == 150.0  # median(200, 100)
    assert k["overhead_method"] == "direct"
    # wall per token: (25,000, 12,500) - (40,000, 40,000) -> median(-15,000, -27,500)
    assert k["overhead_wall_us_per_token"] == -21_250.0
    assert k["forced_pct"] == 25.0
    assert k["cases"]["company"]["valid"] == [True, True]
    u = out["engines"]["kaname_unconstrained"]
    assert u["valid_pct"] == 50.0 and u["overhead_us_per_token"] is None
    assert out["engines"]["xgrammar"] == {"available": False,
                                          "reason": "xgrammar cannot be imported"}
    # kaname 40, 80 tok/s vs 25, 25 -> 1.6, 3.2 -> 2.4
    assert out["ratios"] == {"kaname_unconstrained": 2.4}


def test_drafts_hand_computed() -> None:
    ex = "extract_record"
    records = [
        # company: drafts and neither agree in both runs; forcing changed run 1's answer
        _rec("kaname", 0, 40, 1.0, text="A", drafted=10, accepted=6),
        _rec("kaname", 1, 40, 0.5, text="A", drafted=10, accepted=6),
        _rec("kaname_none", 0, 40, 2.0, text="A"),
        _rec("kaname_none", 1, 40, 2.0, text="A"),
        _rec("kaname_forced", 0, 40, 0.4, text="A"),
        _rec("kaname_forced", 1, 40, 0.4, text="B"),
        _rec("kaname_unconstrained", 0, 50, 1.0),
        _rec("kaname_unconstrained", 1, 50, 1.0),
        # an extraction prompt: run 1 failed with drafts, so it is not identical
        _rec("kaname", 0, 30, 0.5, case=ex, text="C", drafted=20, accepted=18),
        _rec("kaname", 1, 0, 0.0, case=ex, error="boom"),
        _rec("kaname_none", 0, 30, 1.0, case=ex, text="C"),
        _rec("kaname_none", 1, 30, 1.0, case=ex, text="C"),
        _rec("kaname_unconstrained", 0, 30, 0.75, case=ex),
        _rec("kaname_unconstrained", 1, 30, 1.5, case=ex),
    ]
    d = e2e.drafts(records, 2)
    assert d is not None
    company, extract = d["cases"]["company"], d["cases"][ex]
    assert company["greedy_identical"] is True and company["force_changes_answer"] is True
    assert extract["greedy_identical"] is False and d["greedy_identical"] is False
    assert company["extraction"] is False and extract["extraction"] is True
    # median tok/s per prompt: drafts (40, 80), neither (20, 20), forced (100, 100)
    assert company["tokens_per_s"] == {"drafts": 60.0, "forced": 100.0, "none": 20.0,
                                       "unconstrained": 50.0}
    assert (company["draft_accepted"], company["draft_tokens"]) == (12, 20)
    assert d["acceptance_rate"] == 0.75  # (6 + 6 + 18) / (10 + 10 + 20)
    # extraction: run 0 drafts 60 tok/s vs 40 unconstrained; run 1 has no drafts figure
    assert d["extraction_tps_ratio"] == 1.5
    # the engine prompt: drafts 40, 80 tok/s vs forced 100, 100 -> 0.4, 0.8 -> 0.6
    assert d["forced_tps_ratio"] == 0.6
    assert "ceiling" not in d  # not run
    # without the reference mode there is nothing to compare
    assert e2e.drafts([r for r in records if r.engine != "kaname_none"], 2) is None
    # drafts with full rows must give the same answer too
    full = [_rec("kaname_full_rows", 0, 40, 2.0, text="A"),
            _rec("kaname_full_rows", 1, 40, 2.0, text="Z")]
    d = e2e.drafts(records + full, 2)
    assert d is not None and d["cases"]["company"]["greedy_identical"] is False
    assert d["cases"]["company"]["tokens_per_s"]["full_rows"] == 20.0
    # the ceiling: company 200 tok/s both runs, extraction 100 then 50
    ceiling = [_rec("kaname_ceiling", 0, 40, 0.2, text="A"),
               _rec("kaname_ceiling", 1, 40, 0.2, text="A"),
               _rec("kaname_ceiling", 0, 30, 0.3, case=ex, text="C"),
               _rec("kaname_ceiling", 1, 30, 0.6, case=ex, text="C")]
    d = e2e.drafts(records + ceiling, 2)
    assert d is not None and d["cases"]["company"]["greedy_identical"] is True
    assert d["cases"]["company"]["tokens_per_s"]["ceiling"] == 200.0
    # extraction 100 ÷ 40, 50 ÷ 20 -> 2.5; company 200 ÷ 100 twice -> 2.0; drafts ÷ ceiling
    # per run over the prompts both completed: run 0 70 / 1.5 ÷ 70 / 0.5 = 1/3, run 1
    # (drafts' extraction failed: company alone) 40 / 0.5 ÷ 40 / 0.2 = 0.4 -> 0.367
    assert d["ceiling"] == {"extraction_tps_ratio": 2.5, "forced_tps_ratio": 2.0,
                            "drafts_share": 0.367}
    wrong = [ceiling[0], _rec("kaname_ceiling", 1, 40, 0.2, text="Z")]
    d = e2e.drafts(records + wrong, 2)  # every verified mode must give the answer
    assert d is not None and d["cases"]["company"]["greedy_identical"] is False


def test_valid_output() -> None:
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
              "required": ["d"]}
    assert e2e.valid_output('{"d": "2024-03-15"}', schema, "stop")
    assert not e2e.valid_output('{"d": "2024-03-15"}', schema, "length")  # cut off
    assert not e2e.valid_output('{"d": "2024-13-45"}', schema, "stop")  # format checked
    assert not e2e.valid_output('{"d": "2024-03-15"', schema, "stop")
    assert not e2e.valid_output("{}", schema, "stop")


def test_parse_engines_and_rotate() -> None:
    assert e2e.parse_engines(None) == e2e.ENGINES
    assert e2e.parse_engines(["outlines,kaname", "unconstrained"]) == (
        "kaname", "outlines", "unconstrained")
    with pytest.raises(ValueError, match="bogus"):
        e2e.parse_engines(["kaname,bogus"])
    assert e2e.rotate(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert e2e.rotate([], 3) == []


def test_cli_rejects_unknown_engine(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["bench", "e2e", "--engines", "nope"])
    assert exc.value.code == 2
    assert "nope" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The peers' logits processors, teacher-forced on the Gemma vocabulary (no model)

COMPANY_TEXT = '{"name": "Acme", "founded_year": 1998, "location": "Osaka", "employees": 1200}'


def _drive(processor, tokenizer, eos, text: str) -> None:
    """Feed `text`'s tokens the way llama-cpp-python does (input ids so far, the logits as a
    strided view of its candidates array); every token must stay allowed, the mask must bite,
    and the end must be allowed after the last token."""
    n = int(tokenizer.vocab_size)
    dt = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
    rec = np.zeros(n, dtype=dt).view(np.recarray)
    rng = np.random.default_rng(0)
    ids = [2, 100]  # a "prompt": BOS and any token
    targets = list(tokenizer.tokenize_str(text))
    for step, target in enumerate([*targets, None]):
        rec.logit[:] = rng.standard_normal(n).astype(np.float32)
        rec.logit[:] = processor(np.array(ids, dtype=np.intc), rec.logit)  # as llama-cpp-python
        allowed = np.isfinite(rec.logit)
        if step == 0:
            assert allowed.sum() < 100, "the first mask should allow little more than '{'"
        if target is None:
            assert any(allowed[e] for e in eos), "the end must be allowed after the object"
        else:
            assert allowed[target], f"token {target} at step {step} was masked"
            ids.append(target)
    assert processor.error is None
    assert processor.ns > 0


@pytest.mark.model
def test_xgrammar_processor_on_strided_logits(gemma) -> None:
    pytest.importorskip("xgrammar")
    from kaname.bench.common import CASES, PeerVocabulary
    from kaname.bench.e2e_engines import XGrammarDriver

    driver = XGrammarDriver(None, PeerVocabulary(gemma.tokenizer, gemma.eos_token_ids))
    compiled = driver.prepare(CASES[0])
    _drive(driver.processor(compiled), gemma.tokenizer, gemma.eos_token_ids, COMPANY_TEXT)


@pytest.mark.model
def test_outlines_processor_on_strided_logits(gemma) -> None:
    pytest.importorskip("outlines_core")
    pytest.importorskip("numba")
    from kaname.bench.common import CASES, PeerVocabulary
    from kaname.bench.e2e_engines import OutlinesDriver

    driver = OutlinesDriver(None, PeerVocabulary(gemma.tokenizer, gemma.eos_token_ids))
    index = driver.prepare(CASES[0])
    _drive(driver.processor(index), gemma.tokenizer, gemma.eos_token_ids, COMPANY_TEXT)


# ---------------------------------------------------------------------------------------------
# A quick run through the CLI


@pytest.mark.model
def test_bench_e2e_quick_json(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    # outlines made unimportable: it must be listed as unavailable, with the reason
    monkeypatch.setitem(sys.modules, "outlines_core", None)
    rc = cli_main(["bench", "e2e", "--quick", "--json", "--max-tokens", "48"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "e2e" and data["mode"] == "quick"
    assert set(data) >= {"engines", "ratios", "method", "targets", "targets_met", "config"}
    assert list(data["engines"]) == list(e2e.ENGINES)
    out = data["engines"]["outlines"]
    assert out["available"] is False
    assert "outlines" in out["reason"] and "pip install" in out["reason"]
    assert "outlines" not in data["ratios"]
    k = data["engines"]["kaname"]
    assert k["available"] and k["valid_pct"] == 100.0
    for name, e in data["engines"].items():
        if not e["available"]:
            continue
        assert e["tokens_per_s"] > 0, name
        assert e["ttft_ms"] > 0, name
        assert not e["errors"], (name, e["errors"])
        if name in e2e.CONSTRAINED:
            assert e["overhead_us_per_token"] is not None, name
    assert k["overhead_method"] == "direct"
    if data["engines"]["llamacpp_grammar"]["available"]:
        assert data["engines"]["llamacpp_grammar"]["overhead_method"] == \
            "sample_step_minus_unconstrained"
        assert data["ratios"]["llamacpp_grammar"] > 0
    assert data["config"]["runs"] == 1 and data["config"]["cases"] == ["company"]
    # kaname's modes ran, and drafts (with rows of a few tokens or full rows) left the greedy
    # answer as one token a call gives it
    d = data["drafts"]
    assert d["greedy_identical"] is True and d["cases"]["company"]["greedy_identical"] is True
    assert set(d["cases"]["company"]["tokens_per_s"]) == {"drafts", "ceiling", "full_rows",
                                                          "forced", "none", "unconstrained"}
    # the answer as drafts is kept whole
    kept, proposed = d["cases"]["company"]["ceiling_kept"]
    assert 0 < kept == proposed
    assert d["ceiling"]["drafts_share"] > 0 and d["forced_tps_ratio"] > 0
    assert d["extraction_tps_ratio"] is None  # the quick run has no extraction prompt
    assert 0 <= d["acceptance_rate"] <= 1
    assert set(data["method"]["engines"]) == {n for n, e in data["engines"].items()
                                              if e["available"]}
