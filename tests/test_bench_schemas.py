"""`kaname bench schemas`: the counting and statistics helpers against hand-computed cases, the
engine adapters on one small schema, and a smoke run of the command on a few schemas.

No peer needs to be installed: peer adapters are tested where their package is present, and the
smoke run hides xgrammar behind a package that fails to import, to check that an engine that
cannot load is reported (status and reason), not dropped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kaname.bench import schemas as sb
from kaname.bench.peers_engines import Unavailable, probe

# ---------------------------------------------------------------------------------------------
# Statistics and counting


def test_percentile_matches_numpy_interpolation():
    assert sb.percentile([1, 2, 3, 4], 50) == 2.5
    assert sb.percentile([4, 1, 3, 2], 99) == pytest.approx(3.97)
    assert sb.percentile([7], 99) == 7
    with pytest.raises(ValueError):
        sb.percentile([], 50)
    with pytest.raises(ValueError):
        sb.percentile([1], 101)


def test_time_stats_units_and_empty():
    # 1, 2, 3, 4 µs given in ns: mean 2.5, p50 2.5, p99 3 + 0.97
    assert sb.time_stats([1000, 2000, 3000, 4000], 1e3, "mask_us") == pytest.approx(
        {"mask_us_mean": 2.5, "mask_us_p50": 2.5, "mask_us_p99": 3.97})
    assert sb.time_stats([2_000_000, 4_000_000], 1e6, "compile_ms", mean=False) == \
        pytest.approx({"compile_ms_p50": 3.0, "compile_ms_p99": 3.98})
    assert sb.time_stats([], 1e3, "mask_us") == {"mask_us_mean": None, "mask_us_p50": None,
                                                 "mask_us_p99": None}


def test_judge_counts_each_quadrant_and_ignores_unchecked():
    valid = (True, True, False, False, True)
    accepted = (True, False, True, False)  # the fifth instance was never walked
    assert sb.judge(valid, accepted) == {"valid_accepted": 1, "valid_rejected": 1,
                                         "invalid_accepted": 1, "invalid_rejected": 1}


def test_passing_needs_a_checked_compile_and_every_instance_right():
    right = sb.Outcome("compiled", compile_ns=5, valid=(True, False), accepted=(True, False))
    assert right.passing
    assert sb.Outcome("compiled", compile_ns=5).passing  # no instances: vacuously right
    assert not sb.Outcome("compiled", compile_ns=5, valid=(True,), accepted=(False,)).passing
    assert not sb.Outcome("compiled", compile_ns=5, valid=(False,), accepted=(True,)).passing
    assert not sb.Outcome("compile_error", "no").passing
    timed_out = sb.Outcome("check_timeout", compile_ns=5, valid=(True,))
    assert timed_out.compiled and not timed_out.passing


def test_summarize_hand_computed():
    outs = [
        sb.Outcome("compiled", compile_ns=2_000_000, valid=(True, False), accepted=(True, False),
                   steps_ns=[1000, 3000]),
        sb.Outcome("compiled", compile_ns=4_000_000, valid=(True, False), accepted=(False, True),
                   steps_ns=[2000], walk_errors=1),
        sb.Outcome("compile_error", "Unimplemented keys: [\"not\"]", valid=(True,)),
        sb.Outcome("compile_timeout", "compile took over 20 s"),
    ]
    s = sb.summarize(outs)
    assert {k: s[k] for k in sb.COUNT_KEYS} == {
        "schemas": 4, "compiled": 2, "passing": 1, "passing_untested": 0,
        "valid_accepted": 1, "valid_rejected": 1,
        "invalid_accepted": 1, "invalid_rejected": 1, "compile_errors": 1,
        "compile_timeouts": 1, "check_timeouts": 0, "crashes": 0, "walk_errors": 1}
    assert s["mask_steps"] == 3
    assert s["mask_us_mean"] == pytest.approx(2.0)
    assert s["mask_us_p50"] == pytest.approx(2.0)
    assert s["mask_us_p99"] == pytest.approx(2.98)
    assert s["compile_ms_p50"] == pytest.approx(3.0)
    assert s["compile_ms_p99"] == pytest.approx(3.98)


def test_summarize_counts_untested_passes_apart():
    outs = [sb.Outcome("compiled", compile_ns=1), sb.Outcome("compile_error", "x"),
            sb.Outcome("compiled", compile_ns=1, valid=(True,), accepted=(True,))]
    s = sb.summarize(outs)
    assert (s["passing"], s["passing_untested"]) == (2, 1)


@pytest.mark.parametrize("reason,key", [
    ("UnsupportedSchemaError: unsupported JSON Schema keyword 'not' at '/allOf/1/not' cannot "
     "be enforced (all: /allOf/1/not, /not); remove it or set strict=false",
     "UnsupportedSchemaError: unsupported JSON Schema keyword 'not' cannot be enforced"),
    ("RuntimeError: [22:19:15] /project/cpp/json_schema_converter.cc:5088: minItems is greater "
     "than maxItems", "RuntimeError: minItems is greater than maxItems"),
    ('ValueError: Unsupported JSON Schema structure {"format":"date-time"}',
     "ValueError: Unsupported JSON Schema structure {…}"),
    ("AssertionError: Unrecognized schema: {'required': ['banner']}",
     "AssertionError: Unrecognized schema: {…}"),
    ('ValueError: Unimplemented keys: ["not"]', 'ValueError: Unimplemented keys: ["not"]'),
    ("", ""),
])
def test_reason_key_groups_one_cause(reason, key):
    assert sb.reason_key(reason) == key


def test_targets():
    def eng(passing, invalid, p99, status="ok"):
        return {"status": status, "passing": passing, "invalid_accepted": invalid,
                "mask_us_p99": p99}

    met = sb.targets({"kaname": eng(10, 0, 50.0), "llguidance": eng(10, 0, 60.0),
                      "xgrammar": eng(9, 2, 50.0), "outlines": eng(None, None, None,
                                                                   "unavailable")})
    assert met == {"passing": True, "invalid_accepted": True, "mask_p99": True}
    missed = sb.targets({"kaname": eng(9, 1, 70.0), "xgrammar": eng(10, 0, 60.0)})
    assert missed == {"passing": False, "invalid_accepted": False, "mask_p99": False}
    assert sb.targets({"xgrammar": eng(1, 0, 1.0)}) == {
        "passing": None, "invalid_accepted": None, "mask_p99": None}


# ---------------------------------------------------------------------------------------------
# Sampling


def test_quotas_even_split_with_small_subsets_giving_way():
    assert sb.quotas({"a": 10, "b": 2, "c": 10}, 12) == {"a": 5, "b": 2, "c": 5}
    assert sb.quotas({"a": 10, "b": 2, "c": 10}, 7) == {"a": 3, "b": 2, "c": 2}
    assert sb.quotas({"a": 10, "b": 2, "c": 10}, 100) == {"a": 10, "b": 2, "c": 10}
    assert sb.quotas({"a": 3, "b": 0}, 2) == {"a": 2, "b": 0}
    assert sum(sb.quotas({"a": 5, "b": 5, "c": 5}, 10).values()) == 10


def test_sample_rows_seeded_stratified_and_filtered():
    rows = [{"id": f"{s}{i}", "subset": s, "schema": {}, "tests": []}
            for s, n in (("x", 20), ("y", 3), ("z", 20)) for i in range(n)]
    a = sb.sample_rows(rows, 9, seed=1)
    assert a == sb.sample_rows(rows, 9, seed=1)
    assert [r["subset"] for r in a].count("y") == 3
    assert len(a) == 9 and {r["subset"] for r in a} == {"x", "y", "z"}
    assert [r["id"] for r in sb.sample_rows(rows, None, ["y"])] == ["y0", "y1", "y2"]
    with pytest.raises(ValueError, match="no such subset"):
        sb.sample_rows(rows, None, ["nope"])


def test_read_rows_gzip_and_plain(tmp_path):
    import gzip

    line = json.dumps({"id": "a", "subset": "s", "schema": {"type": "integer"},
                       "tests": [{"valid": True, "data": 1}]})
    (tmp_path / "d.jsonl").write_text(line + "\n\n")
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as f:
        f.write(line + "\n")
    assert sb.read_rows(tmp_path / "d.jsonl") == sb.read_rows(tmp_path / "d.jsonl.gz")
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        sb.read_rows(tmp_path / "bad.jsonl")


def test_report_and_plot_from_outcomes(tmp_path):
    rows = [{"id": "a", "subset": "s1", "schema": {}, "tests": [{"valid": True, "data": 1}]},
            {"id": "b", "subset": "s2", "schema": {}, "tests": []}]
    cfg = sb.Config(data=tmp_path / "x.jsonl", engines=("kaname", "outlines"))
    ok, gone = sb.Worker("kaname", "gemma", {}), sb.Worker("outlines", "gemma", {})
    ok.status, ok.info = "ok", {"version": "0", "method": "m"}
    gone.status, gone.reason = "unavailable", "not installed"
    result = sb.RunResult(cfg, rows, {"kaname": ok, "outlines": gone}, outcomes={
        "kaname": [sb.Outcome("compiled", compile_ns=3_000_000, valid=(True,), accepted=(True,),
                              steps_ns=[1000, 2000, 40_000]),
                   sb.Outcome("compile_error", "Unimplemented keys: [\"not\"]")],
        "outlines": []})
    data = sb.report(result)
    assert data["engines"]["kaname"]["passing"] == 1
    assert data["engines"]["kaname"]["top_compile_errors"] == {'Unimplemented keys: ["not"]': 1}
    assert data["engines"]["outlines"]["status"] == "unavailable"
    assert data["subsets"]["s2"]["engines"]["kaname"]["compiled"] == 0
    assert data["targets"] == {"passing": True, "invalid_accepted": True, "mask_p99": True}
    png = tmp_path / "p.png"
    sb.plot(result, data, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sb.print_tables(data)  # renders every status without raising


# ---------------------------------------------------------------------------------------------
# Adapters, in process, on the Gemma vocabulary

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "n": {"type": "integer", "minimum": 1}},
          "required": ["name", "n"], "additionalProperties": False}
VALID = [{"name": "Zoë", "n": 3}]
INVALID = [{"name": "x"}, {"name": "x", "n": "3"}, {"name": 5, "n": 3}, [1]]


@pytest.fixture(scope="module")
def gemma_vocabulary():
    from kaname.bench.peers_engines import load_vocabulary

    return load_vocabulary("gemma")


@pytest.mark.parametrize("engine", ["kaname", "llguidance", "xgrammar", "outlines",
                                    "llamacpp"])
def test_adapter_accepts_valid_and_rejects_invalid(engine, gemma_vocabulary):
    from kaname.bench.peers_engines import make_adapter, run_schema

    try:
        probe(engine, "gemma")
    except Unavailable as e:
        # only xgrammar may be missing: it needs torch, so it is in the bench extra, not the
        # test extra; a missing peer must then be reported with its reason
        assert engine == "xgrammar", f"{engine} should be installed by .[test]: {e}"
        assert "xgrammar" in str(e)
        return
    adapter = make_adapter(engine, gemma_vocabulary, {"llamacpp_samples": 2})
    tests = [gemma_vocabulary.tokenize(sb.instance_text(d)) for d in VALID + INVALID]
    sent = []
    msg = run_schema(adapter, json.dumps(SCHEMA), tests, sent.append)
    assert sent[0][0] == "compiled" and sent[0][1] > 0
    assert msg[0] == "checked"
    accepted = [a for a, _ in msg[1]]
    assert accepted == [True] + [False] * len(INVALID)
    assert all(e is None for _, e in msg[1])
    steps = msg[2]
    assert steps and all(ns > 0 for ns in steps)
    if engine == "llamacpp":
        assert len(steps) <= 2  # timed only on the planned steps


def test_probe_reports_unknown_and_vocabulary_mismatch():
    with pytest.raises(Unavailable, match="unknown engine"):
        probe("nosuch", "gemma")
    with pytest.raises(Unavailable, match="GGUF"):
        probe("llamacpp", "deepseek")


# ---------------------------------------------------------------------------------------------
# The command


def _data(path: Path) -> Path:
    rows = [
        {"id": "obj", "subset": "alpha", "schema": SCHEMA,
         "tests": [{"description": "ok", "valid": True, "data": VALID[0]}]
         + [{"description": "bad", "valid": False, "data": d} for d in INVALID]},
        {"id": "enum", "subset": "alpha", "schema": {"enum": ["a", "b", 3]},
         "tests": [{"description": "ok", "valid": True, "data": "b"},
                   {"description": "bad", "valid": False, "data": "c"}]},
        {"id": "arr", "subset": "beta",
         "schema": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
         "tests": [{"description": "ok", "valid": True, "data": [1.5, -2]},
                   {"description": "long", "valid": False, "data": [1, 2, 3]},
                   {"description": "str", "valid": False, "data": ["1"]}]},
        {"id": "not", "subset": "beta", "schema": {"not": {"pattern": "^a"}},
         "tests": [{"description": "ok", "valid": True, "data": 1}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _kaname(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # xgrammar is hidden behind a package that fails to import, installed or not
    fake = tmp_path / "fake"
    (fake / "xgrammar").mkdir(parents=True, exist_ok=True)
    (fake / "xgrammar" / "__init__.py").write_text(
        "raise ImportError('simulated: xgrammar is broken here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "kaname.cli", "bench", "schemas", *args],
                          capture_output=True, text=True, env=env, timeout=240)


def test_cli_smoke_json_shape_and_unavailable_engine(tmp_path):
    data = _data(tmp_path / "mini.jsonl")
    r = _kaname(["--data", str(data), "--engines", "kaname,xgrammar", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"engines", "subsets", "targets", "config", "machine", "run"}
    assert list(out["engines"]) == ["kaname", "xgrammar"]
    fields = ("mask_us_mean", "mask_us_p50", "mask_us_p99", "compile_ms_p50",
              "compile_ms_p99", "compiled", "passing", "valid_rejected", "invalid_accepted")
    for name, e in out["engines"].items():
        assert set(fields) <= set(e), name
    k = out["engines"]["kaname"]
    assert k["status"] == "ok"
    assert k["invalid_accepted"] == 0
    assert k["schemas"] == 4 and k["compiled"] == 3  # `not: pattern`: refused
    assert k["passing"] == 3 and k["valid_rejected"] == 0
    assert k["mask_us_p50"] > 0 and k["mask_us_p99"] >= k["mask_us_p50"]
    x = out["engines"]["xgrammar"]
    # the fake package's own error, or, where torch is absent (CI), the missing torch
    assert x["status"] == "unavailable"
    assert "simulated" in x["reason"] or "torch cannot be imported" in x["reason"]
    assert x["passing"] is None and x["mask_us_p99"] is None
    assert set(out["subsets"]) == {"alpha", "beta"}
    assert out["subsets"]["alpha"]["schemas"] == 2
    assert out["subsets"]["beta"]["engines"]["kaname"]["passing"] == 1
    assert out["subsets"]["beta"]["engines"]["xgrammar"] is None
    assert out["targets"]["invalid_accepted"] is True
    assert out["config"]["instances"] == 11


def test_cli_rejects_unknown_engine(tmp_path):
    data = _data(tmp_path / "mini.jsonl")
    r = _kaname(["--data", str(data), "--engines", "kaname,nosuch"], tmp_path)
    assert r.returncode == 2
    assert "nosuch" in r.stderr and r.stderr.count("\n") == 1


# --- the JSON-Schema-Test-Suite reader (schema_suite.py) -------------------------------------


def _suite(root: Path) -> Path:
    """A two-draft miniature of the suite's layout, with an optional/ file to be left out."""
    cases = {
        "tests/draft7/minLength.json": [{"description": "min", "schema": {"minLength": 2},
                                          "tests": [{"description": "ok", "data": "ab",
                                                     "valid": True},
                                                    {"description": "short", "data": "a",
                                                     "valid": False}]}],
        "tests/draft2020-12/not.json": [{"description": "not", "schema": {"not": {
            "type": "string"}}, "tests": [{"description": "int", "data": 1, "valid": True}]},
            {"description": "boolean", "schema": True, "tests": [
                {"description": "any", "data": None, "valid": True}]}],
        "tests/draft2020-12/optional/format/email.json": [{"description": "x", "schema": {},
                                                           "tests": []}],
    }
    for name, content in cases.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(content))
    return root


def test_suite_rows_from_a_directory_and_a_tarball(tmp_path):
    import tarfile

    from kaname.bench.schema_suite import DRAFTS, read_suite

    root = _suite(tmp_path / "JSON-Schema-Test-Suite")
    rows = read_suite(root)
    assert [r["id"] for r in rows] == ["draft2020-12/not.json#0", "draft2020-12/not.json#1",
                                       "draft7/minLength.json#0"]
    assert rows[0]["schema"] == {"$schema": DRAFTS["draft2020-12"], "not": {"type": "string"}}
    assert rows[1]["schema"] is True  # a boolean schema stays one
    assert rows[2]["subset"] == "draft7" and rows[2]["schema"]["$schema"] == DRAFTS["draft7"]
    assert [t["valid"] for t in rows[2]["tests"]] == [True, False]
    sdist = tmp_path / "jsonschema-0.tar.gz"  # the sdist's layout: json/tests/<draft>/
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(root / "tests", arcname="jsonschema-0/json/tests")
    assert read_suite(sdist) == rows
    assert [r["id"] for r in read_suite(sdist, ["draft7"])] == ["draft7/minLength.json#0"]


def test_suite_errors_are_clear(tmp_path):
    from kaname.bench.schema_suite import read_suite

    root = _suite(tmp_path / "s")
    with pytest.raises(ValueError, match="no such draft: draft3"):
        read_suite(root, ["draft3"])
    with pytest.raises(ValueError, match="no tests/ directory"):
        read_suite(tmp_path / "s" / "tests" / "draft7")
    with pytest.raises(ValueError, match="no such file or directory"):
        read_suite(tmp_path / "missing")
    (tmp_path / "junk.tar").write_text("not a tar")
    with pytest.raises(ValueError, match="neither a directory nor a tar archive"):
        read_suite(tmp_path / "junk.tar")


def test_cli_runs_the_suite(tmp_path):
    root = _suite(tmp_path / "suite")
    r = _kaname(["--suite", str(root), "--engines", "kaname", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"]["suite"] == str(root) and out["config"]["data"] is None
    assert set(out["subsets"]) == {"draft7", "draft2020-12"}
    k = out["engines"]["kaname"]
    # `not: {type: string}` is rewritten to the other types: all three schemas compile
    assert (k["schemas"], k["compiled"], k["passing"], k["invalid_accepted"]) == (3, 3, 3, 0)
    r = _kaname(["--suite", str(root), "--data", str(root), "--engines", "kaname"], tmp_path)
    assert r.returncode != 0 and "give one" in r.stderr
