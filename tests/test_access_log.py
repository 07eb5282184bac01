"""One log line per request (server/access_log.py): what was asked and what came of it, at the
default log level; a warning for a 5xx, a timeout or a cancel; JSON lines with --log-format
json. Also the probe Claude Code sends at start (HEAD /api/hello), answered without a key."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serverproc import ManagedProcess, ServerProcess
from slowserve import SLOW_PREFILL

from kaname.cli import _runtime_for_format
from kaname.server import ServerConfig, build_app

CHAT = "/v1/chat/completions"


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": "random", "max_tokens": 12,
            "messages": [{"role": "user", "content": "Say hi."}], **kw}


@pytest.fixture(scope="module")
def app():
    return build_app(ServerConfig(model="random", format="hermes", api_key="k"),
                     _runtime_for_format)


def _lines(caplog) -> list[tuple[int, dict[str, Any]]]:
    return [(r.levelno, r.request) for r in caplog.records if r.name == "kaname.requests"]


def test_each_request_leaves_one_line_with_its_figures(app, caplog):
    caplog.set_level(logging.INFO, logger="kaname.requests")
    auth = {"authorization": "Bearer k"}
    with TestClient(app) as client:
        r = client.post(CHAT, json=_body(), headers=auth)
        assert r.status_code == 200
        with client.stream("POST", CHAT, json=_body(stream=True), headers=auth) as s:
            assert s.status_code == 200 and s.read()
        bad = client.post(CHAT, json=_body(max_tokens=-1), headers=auth)
        assert bad.status_code == 400
        assert client.post(CHAT, json=_body()).status_code == 401
        assert client.get("/no/such/path", headers=auth).status_code == 404
    lines = _lines(caplog)
    assert [(f["method"], f["path"], f["status"]) for _, f in lines] == [
        ("POST", CHAT, 200), ("POST", CHAT, 200), ("POST", CHAT, 400), ("POST", CHAT, 401),
        ("GET", "/no/such/path", 404)]
    usage = r.json()["usage"]
    for level, f in lines[:2]:
        assert level == logging.INFO and f["error"] is None
        assert f["model"] == "random" and f["prompt_tokens"] == usage["prompt_tokens"]
        assert f["completion_tokens"] >= 1 and f["finish_reason"] in ("stop", "length")
        assert 0 <= f["ttft_s"] <= f["total_s"]
    assert lines[0][1]["completion_tokens"] == usage["completion_tokens"]
    assert lines[2][1]["error"] == bad.json()["error"]["code"]
    assert lines[2][1]["error_param"] == bad.json()["error"]["param"] is not None
    assert lines[3][1]["error"] == "invalid_api_key"
    assert all(f["model"] is None for _, f in lines[2:])  # nothing was generated


def test_claude_codes_probe_is_answered_without_a_key(app):
    with TestClient(app) as client:
        assert client.head("/api/hello").status_code == 200
        assert client.get("/api/hello").status_code == 200
        assert client.get("/v1/models").status_code == 401  # the API still needs the key


class SlowServer(ManagedProcess):
    """tests/slowserve.py: the random model, SLOW_PREFILL prompts stall 6 s in their prefill."""

    name = "kaname-slow-log"

    def __init__(self, *args: str):
        super().__init__([sys.executable, str(Path(__file__).with_name("slowserve.py")),
                          "--port", "{port}", "--model", "random", *args],
                         env={"KANAME_TEST_STEP_S": "0.05", "KANAME_TEST_PREFILL_S": "6"})


def _json_lines(server: ManagedProcess) -> list[dict[str, Any]]:
    out = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_json_lines_and_warnings_for_timeouts_and_cancels():
    with SlowServer("--log-format", "json", "--request-timeout", "2") as server:
        ok = httpx.post(server.url + CHAT, json=_body(), timeout=60)
        assert ok.status_code == 200
        stalled = httpx.post(server.url + CHAT, timeout=60, json=_body(
            messages=[{"role": "user", "content": SLOW_PREFILL}]))
        assert stalled.status_code == 504
        # the same stall after a Responses stream's 200: its error goes in the stream
        with httpx.stream("POST", server.url + "/v1/responses", timeout=60, json={
                "model": "random", "input": SLOW_PREFILL, "stream": True,
                "max_output_tokens": 12}) as s:
            assert s.status_code == 200
            assert "response.failed" in "".join(s.iter_lines())
        # a stream the client leaves after its first event (the generation would take ~50 s)
        with httpx.stream("POST", server.url + CHAT, timeout=60,
                          json=_body(stream=True, max_tokens=1000)) as s:
            next(s.iter_lines())
        deadline = time.monotonic() + 30
        while len(_json_lines(server)) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        lines = _json_lines(server)
    assert [(ln["status"], ln["level"]) for ln in lines] == [
        (200, "info"), (504, "warning"), (200, "warning"), (200, "warning")], lines
    assert lines[0]["completion_tokens"] >= 1 and lines[0]["finish_reason"] is not None
    assert lines[1]["error"] == "timeout" and lines[1]["total_s"] >= 2
    assert lines[2]["path"] == "/v1/responses" and lines[2]["error"] == "timeout"
    assert lines[3]["cancelled"] is True and lines[3]["finish_reason"] is None
    assert all(isinstance(ln["time"], float) for ln in lines)


def test_text_lines_at_the_default_log_level():
    with ServerProcess("--model", "random") as server:
        assert httpx.post(server.url + CHAT, json=_body(), timeout=60).status_code == 200
        threading.Event().wait(0.3)
        log = server.log()
    [line] = [ln for ln in log.splitlines() if CHAT in ln]
    assert line.startswith(f"kaname: POST {CHAT} 200 model=random prompt=")
    assert " finish=" in line and " total=" in line


def test_an_error_before_any_answer_is_a_500_line_not_a_cancel(caplog):
    """Starlette's own handler answers an exception that escapes the app 500: the line says
    so, rather than blaming the client."""
    import asyncio

    from kaname.server.access_log import AccessLog

    async def broken(scope, receive, send):
        raise RuntimeError("a bug")

    async def main() -> None:
        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            pass

        with pytest.raises(RuntimeError):
            await AccessLog(broken)({"type": "http", "method": "GET", "path": "/x"},
                                    receive, send)

    caplog.set_level(logging.INFO, logger="kaname.requests")
    asyncio.run(main())
    [(level, f)] = _lines(caplog)
    assert (f["status"], f["error"], level) == (500, "internal_error", logging.WARNING)
    assert "cancelled" not in f
