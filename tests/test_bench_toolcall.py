"""`kaname bench toolcall`: K2VV scoring (pure functions, hand-computed cases) and the runner end
to end against a fake OpenAI endpoint served from this process."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kaname.bench import toolcall as tc
from kaname.cli import main

DATA = Path(os.environ.get("KANAME_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
K2VV = DATA / "k2vv"

SEARCH_PARAMS = {"type": "object",
                 "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
                 "required": ["queries"]}
TOOLS = [{"type": "function", "function": {"name": "search", "description": "web search",
                                            "parameters": SEARCH_PARAMS}}]


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": f"functions.{name}:0", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def completion(finish: str, tool_calls: Any = None, content: str = "") -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content,
                                     "tool_calls": tool_calls}}]}


# ---------------------------------------------------------------------------------------------
# Scoring: one tool call.


def check(arguments: Any, name: str = "search", tools: Any = None) -> tuple[str, str] | None:
    return tc.check_tool_call(call(name, arguments), tc.tool_schemas(TOOLS if tools is None
                                                                      else tools))


def test_valid_call_passes() -> None:
    assert check('{"queries": ["a", "b"]}') is None
    assert check({"queries": []}) is None  # already-parsed arguments, as K2VV accepts


def test_unknown_tool() -> None:
    cat, detail = check('{"queries": []}', name="browse")
    assert cat == "unknown_tool" and "browse" in detail and "search" in detail


@pytest.mark.parametrize("args", ['{"queries": [', "", "queries: [a]", "{'queries': []}"])
def test_arguments_not_json(args: str) -> None:
    assert check(args)[0] == "unparsable_arguments"


@pytest.mark.parametrize("args", ["[]", '"text"', "3", "null"])
def test_arguments_json_but_not_an_object(args: str) -> None:
    assert check(args)[0] == "schema_violation"


def test_schema_violation_names_the_place() -> None:
    cat, detail = check('{"queries": ["a", 3]}')
    assert cat == "schema_violation" and "/queries/1" in detail
    assert check("{}")[0] == "schema_violation"  # required property missing


@pytest.mark.parametrize("tool", [{"name": "noop"}, {"name": "noop", "parameters": {}},
                                  {"name": "noop", "parameters": None}])
def test_empty_or_absent_parameters_take_any_object(tool: dict[str, Any]) -> None:
    tools = [{"type": "function", "function": tool}]
    assert check("{}", name="noop", tools=tools) is None
    assert check('{"anything": [1, {"x": null}]}', name="noop", tools=tools) is None
    assert check("[1]", name="noop", tools=tools)[0] == "schema_violation"
    assert check("not json", name="noop", tools=tools)[0] == "unparsable_arguments"


def test_malformed_calls_and_invalid_schema() -> None:
    schemas = tc.tool_schemas(TOOLS)
    assert tc.check_tool_call({"type": "function"}, schemas)[0] == "malformed_tool_call"
    assert tc.check_tool_call("search", schemas)[0] == "malformed_tool_call"
    assert check(None)[0] == "malformed_tool_call"
    assert check(["queries"])[0] == "malformed_tool_call"
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]
    assert check("{}", name="f", tools=bad)[0] == "invalid_tool_schema"


def test_first_definition_of_a_tool_name_wins_and_junk_tools_are_skipped() -> None:
    tools = ["junk", {"function": {"parameters": {}}}, *TOOLS,
             {"type": "function", "function": {"name": "search", "parameters": {}}}]
    assert check("{}", tools=tools)[0] == "schema_violation"


# ---------------------------------------------------------------------------------------------
# Scoring: one response, the summary, trigger F1.


@pytest.mark.parametrize("calls", [None, []])
def test_tool_calls_finish_without_calls_fails(calls: Any) -> None:
    s = tc.score_response(completion("tool_calls", calls), TOOLS)
    assert s["tool_calls_valid"] is False and s["failure"]["category"] == "no_tool_calls"
    message_less = {"choices": [{"finish_reason": "tool_calls"}]}
    assert tc.score_response(message_less, TOOLS)["failure"]["category"] == "no_tool_calls"


def test_the_first_failing_call_names_the_category() -> None:
    calls = [call("search", '{"queries": []}'), call("nope", "{}"), call("search", "{")]
    f = tc.score_response(completion("tool_calls", calls), TOOLS)["failure"]
    assert (f["category"], f["call_index"]) == ("unknown_tool", 1)
    assert [(c["index"], c["category"]) for c in f["calls"]] == [
        (1, "unknown_tool"), (2, "unparsable_arguments")]


def test_only_tool_calls_finishes_are_validated() -> None:
    s = tc.score_response(completion("stop", [call("nope", "{")]), TOOLS)
    assert s == {"finish_reason": "stop", "tool_calls_valid": None, "failure": None}
    assert tc.score_response({"choices": []}, TOOLS)["finish_reason"] is None


def test_trigger_scores_by_hand() -> None:
    run = {1: "tool_calls", 2: "tool_calls", 3: "stop", 4: "tool_calls", 5: None, 6: "length",
           7: "stop"}
    ref = {1: "tool_calls", 2: "stop", 3: "tool_calls", 4: "tool_calls", 5: "tool_calls",
           6: "stop"}
    t = tc.trigger_scores(run, ref)  # TP {1,4}  FP {2}  FN {3,5}  TN {6}; 7 not in ref
    assert (t["tp"], t["fp"], t["fn"], t["tn"], t["compared"]) == (2, 1, 2, 1, 6)
    assert t["not_in_reference"] == [7]
    assert t["precision"] == pytest.approx(2 / 3) and t["recall"] == pytest.approx(1 / 2)
    assert t["f1"] == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))  # 4/7


def test_trigger_scores_zero_divisions_are_zero() -> None:
    none = tc.trigger_scores({1: "stop", 2: None}, {1: "stop", 2: "length"})
    assert (none["precision"], none["recall"], none["f1"], none["tn"]) == (0.0, 0.0, 0.0, 2)
    only_fp = tc.trigger_scores({1: "tool_calls"}, {1: "stop"})
    assert (only_fp["precision"], only_fp["recall"], only_fp["f1"]) == (0.0, 0.0, 0.0)
    only_fn = tc.trigger_scores({1: "stop"}, {1: "tool_calls"})
    assert (only_fn["precision"], only_fn["recall"], only_fn["f1"]) == (0.0, 0.0, 0.0)
    empty = tc.trigger_scores({}, {})
    assert (empty["compared"], empty["f1"]) == (0, 0.0)


def test_summary_with_no_tool_calls_reports_null_accuracy() -> None:
    recs = [tc.result_record(1, TOOLS, completion("stop")),
            tc.result_record(2, TOOLS, None, {"kind": "timeout", "message": "slow"})]
    s = tc.summarize(recs)
    assert s["schema_accuracy"] is None and s["tool_call_responses"] == 0
    assert s["trigger_f1"] is None and s["trigger"] is None
    assert (s["requests"], s["completed"], s["errors"]) == (2, 1, 1)
    assert s["error_kinds"]["timeout"] == 1 and s["finish_reasons"] == {"stop": 1}
    assert "No response finished with tool_calls" in tc.render_report(s, recs)
    assert "schema accuracy: n/a" in tc.summary_text(s)
    json.dumps(s)


def test_summary_by_hand() -> None:
    recs = [tc.result_record(1, TOOLS, completion("tool_calls", [call("search", "{}")])),
            tc.result_record(2, TOOLS, completion("tool_calls", [call("search",
                                                                      '{"queries":[]}')])),
            tc.result_record(3, TOOLS, completion("tool_calls", [])),
            tc.result_record(4, TOOLS, completion("length")),
            tc.result_record(5, TOOLS, None, {"kind": "http_error", "message": "HTTP 502",
                                              "status_code": 502})]
    ref = {1: "tool_calls", 2: "stop", 3: "tool_calls", 4: "tool_calls", 5: "tool_calls"}
    s = tc.summarize(recs, ref)
    assert (s["tool_call_responses"], s["valid_tool_call_responses"]) == (3, 1)
    assert s["schema_accuracy"] == pytest.approx(1 / 3)
    assert s["failures"] == {"unparsable_arguments": 0, "unknown_tool": 0,
                             "schema_violation": 1, "no_tool_calls": 1,
                             "malformed_tool_call": 0, "invalid_tool_schema": 0}
    t = s["trigger"]  # TP {1,3}  FP {2}  FN {4,5}
    assert (t["tp"], t["fp"], t["fn"], t["tn"]) == (2, 1, 2, 0)
    assert s["trigger_precision"] == pytest.approx(2 / 3)
    assert s["trigger_recall"] == pytest.approx(1 / 2)
    assert s["trigger_f1"] == pytest.approx(4 / 7)
    assert (t["errors_counted_negative"], t["errors_reference_positive"]) == (1, 1)
    report = tc.render_report(s, recs, ref)
    assert "| 1 | schema_violation | 0 |" in report and "| 3 | no_tool_calls |" in report
    assert "| 5 | http_error | HTTP 502 |" in report
    assert "(FP): [2]" in report and "(FN): [4, 5]" in report


# ---------------------------------------------------------------------------------------------
# The runner against a fake endpoint.

SLOW_S = 2.0
TIMEOUT_S = 0.5


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.bodies: dict[str, dict[str, Any]] = {}
        self.headers_seen: dict[str, dict[str, str]] = {}
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client gave up on the slow case: a broken pipe is expected

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + \
        b"data: [DONE]\n\n"


STREAMED = sse([
    {"id": "s", "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "functions.search:0", "type": "function",
         "function": {"name": "search", "arguments": '{"que'}}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": 'ries": ["x"]}'}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
])


class Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != "/v1/chat/completions":
            self.send(404, b'{"error": "not found"}')
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        case = body["messages"][-1]["content"].removeprefix("case:")
        with self.server.lock:
            self.server.bodies[case] = body
            self.server.headers_seen[case] = dict(self.headers)
            self.server.hits[case] = hit = self.server.hits.get(case, 0) + 1
        valid = completion("tool_calls", [call("search", '{"queries": ["q"]}')])
        if case == "slow":
            time.sleep(SLOW_S)
            self.send(200, json.dumps(valid).encode())
        elif case == "error500":
            self.send(500, b'{"error": {"message": "boom"}}')
        elif case == "flaky" and hit == 1:
            self.send(503, b"busy")
        elif case == "badjson":
            self.send(200, b"<html>not json</html>", "text/html")
        elif case == "nochoices":
            self.send(200, b'{"error": {"message": "quota"}}')
        elif case == "stream" and body.get("stream"):
            self.send(200, STREAMED, "text/event-stream")
        else:
            resp = {"valid": valid, "flaky": valid, "stream": valid,
                    "unknown": completion("tool_calls", [call("browse", '{"url": "x"}')]),
                    "badargs": completion("tool_calls", [call("search", '{"queries": [')]),
                    "violation": completion("tool_calls", [call("search", '{"q": 1}')]),
                    "nocalls": completion("tool_calls", []),
                    "stop": completion("stop", content="hello")}[case]
            self.send(200, json.dumps(resp).encode())


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


# data_index: case, the reference's finish reason (None: no line in the reference)
CASES = {1: ("valid", "tool_calls"), 2: ("unknown", "tool_calls"), 3: ("badargs", "stop"),
         4: ("violation", "tool_calls"), 5: ("nocalls", "stop"), 6: ("stop", "tool_calls"),
         7: ("error500", "tool_calls"), 8: ("slow", "stop"), 9: ("badjson", None),
         10: ("stream", "tool_calls")}


def write_data(tmp: Path, cases: dict[int, tuple[str, str | None]]) -> tuple[Path, Path]:
    data, ref = tmp / "requests.jsonl", tmp / "reference.jsonl"
    with data.open("w") as f, ref.open("w") as g:
        for i in sorted(cases):
            case, ref_finish = cases[i]
            req = {"model": "moonshot", "max_tokens": 16000, "temperature": 0.6,
                   "stream": case == "stream", "tools": TOOLS,
                   "messages": [{"role": "_input", "content": "be brief"},
                                {"role": "user", "content": f"case:{case}"}]}
            f.write(json.dumps(req) + "\n")
            if ref_finish is not None:
                g.write(json.dumps({"data_index": i, "finish_reason": ref_finish,
                                    "response": completion(ref_finish)}) + "\n")
    return data, ref


def test_cli_run_against_a_fake_endpoint(server: FakeOpenAI, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    data, ref = write_data(tmp_path, CASES)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    rc = main(["bench", "toolcall", "--endpoint", server.url, "--api-key", "sk-test",
               "--model", "kimi-k2", "--max-tokens", "64", "--data", str(data),
               "--reference", str(ref), "--concurrency", "4", "--timeout", str(TIMEOUT_S),
               "--out", str(out), "--no-progress"])
    assert rc == 0
    assert time.perf_counter() - t0 < SLOW_S + 3  # the slow request did not hold the run

    s = json.loads((out / "summary.json").read_text())
    assert (s["requests"], s["completed"], s["errors"]) == (10, 7, 3)
    assert {k: v for k, v in s["error_kinds"].items() if v} == {
        "http_error": 1, "timeout": 1, "bad_json": 1}
    assert s["finish_reasons"] == {"stop": 1, "tool_calls": 6}
    # tool_calls responses: 1 valid, 2 unknown, 3 badargs, 4 violation, 5 nocalls, 10 stream
    assert (s["tool_call_responses"], s["valid_tool_call_responses"]) == (6, 2)
    assert s["schema_accuracy"] == pytest.approx(2 / 6)
    assert s["failures"] == {"unparsable_arguments": 1, "unknown_tool": 1,
                             "schema_violation": 1, "no_tool_calls": 1,
                             "malformed_tool_call": 0, "invalid_tool_schema": 0}
    # run positives {1,2,3,4,5,10}; reference positives {1,2,4,6,7,10}; 9 not in reference
    t = s["trigger"]
    assert (t["tp"], t["fp"], t["fn"], t["tn"], t["compared"]) == (4, 2, 2, 1, 9)
    assert t["not_in_reference"] == [9]
    assert (t["errors_counted_negative"], t["errors_reference_positive"]) == (2, 1)
    assert s["trigger_precision"] == pytest.approx(4 / 6)
    assert s["trigger_recall"] == pytest.approx(4 / 6)
    assert s["trigger_f1"] == pytest.approx(4 / 6)

    # what the endpoint received: K2VV's preparation plus the overrides
    b = server.bodies["valid"]
    assert b["model"] == "kimi-k2" and b["max_tokens"] == 64 and b["temperature"] == 0.6
    assert [m["role"] for m in b["messages"]] == ["system", "user"] and b["tools"] == TOOLS
    assert server.headers_seen["valid"]["Authorization"] == "Bearer sk-test"
    assert len(server.bodies) == 10

    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["data_index"] for r in lines] == list(range(1, 11))
    by = {r["data_index"]: r for r in lines}
    assert by[7]["status"] == "failed" and by[7]["error"]["status_code"] == 500
    assert "boom" in by[7]["response"]["error"] and by[7]["finish_reason"] is None
    assert by[8]["error"]["kind"] == "timeout"
    assert by[10]["response"]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "search", "arguments": '{"queries": ["x"]}'}
    assert by[2]["failure"]["category"] == "unknown_tool" and by[1]["tool_calls_valid"] is True

    report = (out / "report.md").read_text()
    for row in ("| 2 | unknown_tool |", "| 3 | unparsable_arguments |",
                "| 4 | schema_violation |", "| 5 | no_tool_calls |", "| 7 | http_error |",
                "| 8 | timeout |", "| 9 | bad_json |", "(FP): [3, 5]", "(FN): [6, 7]"):
        assert row in report, row
    stdout = capsys.readouterr().out
    assert "schema accuracy: 33.33% (2/6" in stdout and "F1 66.67%" in stdout

    # a run serves as a reference for another; re-scoring its results reproduces it
    rc = main(["bench", "toolcall", "--data", str(data), "--results", str(out / "results.jsonl"),
               "--reference", str(out / "results.jsonl"), "--out", str(tmp_path / "re")])
    assert rc == 0
    s2 = json.loads((tmp_path / "re" / "summary.json").read_text())
    for key in ("requests", "errors", "error_kinds", "finish_reasons", "tool_call_responses",
                "valid_tool_call_responses", "schema_accuracy", "failures"):
        assert s2[key] == s[key], key
    assert (s2["trigger_f1"], s2["trigger"]["tp"], s2["trigger"]["tn"]) == (1.0, 6, 4)


def test_limit_retries_stream_off_and_no_choices(server: FakeOpenAI, tmp_path: Path) -> None:
    cases = {1: ("flaky", "tool_calls"), 2: ("nochoices", "stop"), 3: ("stream", "stop"),
             4: ("valid", "stop")}
    data, _ = write_data(tmp_path, cases)
    args = ["bench", "toolcall", "--endpoint", server.url + "/", "--data", str(data),
            "--limit", "2", "--timeout", "5"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0  # with the progress bar
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert (s["requests"], s["errors"]) == (2, 2)  # --limit 2; the 503 not retried
    assert s["error_kinds"]["http_error"] == 1 and s["error_kinds"]["bad_response"] == 1
    assert s["trigger_f1"] is None and s["schema_accuracy"] is None
    assert set(server.bodies) == {"flaky", "nochoices"}

    server.hits.clear()
    assert main([*args, "--retries", "1", "--no-progress", "--out", str(tmp_path / "b")]) == 0
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (s["errors"], s["tool_call_responses"], s["schema_accuracy"]) == (1, 1, 1.0)
    assert server.hits["flaky"] == 2
    rec = json.loads((tmp_path / "b" / "results.jsonl").read_text().splitlines()[0])
    assert rec["attempts"] == 2

    # --stream: as the request says (SSE read back), or off (a plain request)
    data3, _ = write_data(tmp_path, {1: ("stream", None)})
    plain = tmp_path / "plain.jsonl"  # the same request, not asking to stream
    plain.write_text(data3.read_text().replace('"stream": true', '"stream": false'))
    for flag, streamed, data_file in (("request", True, data3), ("off", None, data3),
                                      ("on", True, plain), ("request", False, plain)):
        assert main(["bench", "toolcall", "--endpoint", server.url, "--data", str(data_file),
                     "--stream", flag, "--no-progress", "--out", str(tmp_path / flag)]) == 0
        assert server.bodies["stream"].get("stream") is streamed, flag
        s = json.loads((tmp_path / flag / "summary.json").read_text())
        assert (s["errors"], s["valid_tool_call_responses"]) == (0, 1), flag
        msg = json.loads((tmp_path / flag / "results.jsonl").read_text())["response"]
        args = msg["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        assert args == ('{"queries": ["x"]}' if streamed else '{"queries": ["q"]}'), flag


def test_connection_refused_is_recorded(tmp_path: Path) -> None:
    srv = FakeOpenAI()  # bound, never served, then closed: nothing listens on the port
    url = srv.url
    srv.server_close()
    data, _ = write_data(tmp_path, {1: ("valid", None)})
    assert main(["bench", "toolcall", "--endpoint", url, "--data", str(data), "--no-progress",
                 "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (s["errors"], s["error_kinds"]["connection_error"]) == (1, 1)


@pytest.mark.parametrize("extra, words", [
    ([], "exactly one of --endpoint"),
    (["--endpoint", "localhost:8000"], "http://"),
    (["--endpoint", "http://x", "--concurrency", "0"], "--concurrency"),
    (["--endpoint", "http://x", "--timeout", "0"], "--timeout"),
])
def test_bad_input_exits_2_with_one_line(extra: list[str], words: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    data, _ = write_data(tmp_path, {1: ("valid", None)})
    with pytest.raises(SystemExit) as e:
        main(["bench", "toolcall", "--data", str(data), "--out", str(tmp_path / "o"), *extra])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_bad_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n\n{oops\n')
    for data, words in ((tmp_path / "missing.jsonl", "no such file"), (bad, "line 3")):
        with pytest.raises(SystemExit) as e:
            main(["bench", "toolcall", "--endpoint", "http://127.0.0.1:9", "--data", str(data),
                  "--out", str(tmp_path / "o")])
        assert e.value.code == 2 and words in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The K2VV sample itself.


@pytest.mark.skipif(not K2VV.is_dir(), reason="K2VV sample not present")
def test_k2vv_reference_scores_against_itself(tmp_path: Path) -> None:
    req, ref = K2VV / "requests-99.jsonl", K2VV / "reference-results-99.jsonl"
    assert main(["bench", "toolcall", "--data", str(req), "--results", str(ref),
                 "--reference", str(ref), "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (s["requests"], s["errors"]) == (99, 1)  # line 33: the provider's 429
    assert s["finish_reasons"] == {"length": 1, "stop": 67, "tool_calls": 30}
    assert (s["tool_call_responses"], s["valid_tool_call_responses"]) == (30, 30)
    assert s["schema_accuracy"] == 1.0 and s["trigger_f1"] == 1.0
    assert (s["trigger"]["tp"], s["trigger"]["tn"]) == (30, 69)
    # K2VV's own verdicts agree with ours on every tool_calls response
    theirs = {r["data_index"]: r["tool_calls_valid"]
              for r in map(json.loads, ref.read_text().splitlines())}
    ours = {r["data_index"]: r["tool_calls_valid"]
            for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert ours == theirs


def test_seed_and_strict_tools_prepare_each_request() -> None:
    from kaname.bench.toolcall_client import ClientConfig, prepare_request

    raw = {"messages": [{"role": "_input", "content": "s"}], "tools": TOOLS, "stream": True}
    plain = prepare_request(raw, ClientConfig(endpoint="http://x"), 7)
    assert "seed" not in plain and "strict" not in plain["tools"][0]["function"]
    req = prepare_request(raw, ClientConfig(endpoint="http://x", seed=100, strict_tools=True), 7)
    assert req["seed"] == 107 and req["tools"][0]["function"]["strict"] is True
    assert req["messages"][0]["role"] == "system"
    assert "strict" not in raw["tools"][0]["function"]  # the caller's request is untouched
