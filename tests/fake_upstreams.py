"""A misbehaving OpenAI-compatible /v1/completions upstream for the proxy's fault tests.

One server, one behaviour per request: the behaviour is named by a marker `FAULT:<name>` in the
prompt (the proxy forwards the rendered chat prompt, so a marker in the last user message
arrives there). Without a marker the upstream streams a fixed, grammar-valid plain answer.

Behaviours:
  ok              streams OK_TEXT, finish_reason "stop", [DONE]
  chars           streams CHARS_TEXT (reasoning, then an answer) one character per event, so
                  the text's tokenization changes as it grows (a special token and multi-
                  character tokens form across events)
  unenforced      ignores the grammar: streams UNENFORCED_TEXT, finish_reason "stop"
  long-fraction   streams LONG_FRACTION, a JSON object with a 9-digit fraction (past the guard)
  short-fraction  streams SHORT_FRACTION, the same with 8 digits (within it)
  line-separator  streams SEPARATED_TEXT with its U+2028 / U+0085 written raw in the JSON (as
                  vLLM and pydantic write them), finish "stop"
  stop-string     streams STOPPED_TEXT, a JSON object cut before a ",", and finishes "stop" with
                  vLLM's stop_reason "," (the request's stop string)
  stall-headers   answers 200 and SSE headers, then sends nothing
  stall-silent    accepts the connection, reads the request, sends nothing at all
  stall-midway    sends one good chunk, then nothing
  garbled-line    a line that is not SSE
  bad-json        `data:` with invalid JSON
  no-finish       text chunks, then [DONE] without any finish_reason
  error-event     an `{"error": ...}` event
  http-500        HTTP 500 with a JSON error body
  http-400        HTTP 400 in OpenAI's shape: the prompt does not fit (as vLLM answers)
  reset           closes the connection without answering

Every request body is recorded in `FakeUpstream.requests` (parsed JSON).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OK_TEXT = "All good."
UNENFORCED_TEXT = "hello world"
LONG_FRACTION = '{"x": 0.123456789}'
SHORT_FRACTION = '{"x": 0.12345678}'
STOPPED_TEXT = '{"x": 1'
SEPARATED_TEXT = "All\u2028good\x85 here."
CHARS_REASONING = "月に横浜市中区"
CHARS_ANSWER = "横浜市中区 All good."
CHARS_TEXT = f"<think>\n{CHARS_REASONING}\n</think>\n\n{CHARS_ANSWER}"
_MARKER = re.compile(r"FAULT:([a-z0-9-]+)")
STALL_S = 60.0  # a stalled answer waits at most this long (or until the server stops)


class FakeUpstream:
    """`with FakeUpstream() as up:` serves on 127.0.0.1:<free port>; `up.url` ends in /v1."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.models = ["fake-model"]  # what GET /v1/models lists
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.endswith("/models"):
                    self._plain(200, {"object": "list", "data": [
                        {"id": m, "object": "model"} for m in owner.models]})
                else:
                    self._plain(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                owner.requests.append(body)
                if not self.path.endswith("/completions"):
                    self._plain(404, {"error": {"message": "not found"}})
                    return
                found = _MARKER.search(str(body.get("prompt", "")))
                owner._serve(self, found.group(1) if found else "ok")

            def _plain(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="fake-upstream")

    # ---- behaviours ----------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, fault: str) -> None:
        if fault == "stall-silent":
            self.stopping.wait(STALL_S)
            return
        if fault == "reset":
            h.close_connection = True
            h.connection.close()
            return
        if fault in ("http-500", "http-400"):
            status = int(fault[-3:])
            error = {"message": "boom", "type": "server_error"} if status == 500 else {
                "message": "This model's maximum context length is 2048 tokens.",
                "type": "BadRequestError", "param": None, "code": "context_length_exceeded"}
            data = json.dumps({"error": error}).encode()
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        h.wfile.flush()

        def send(line: str) -> None:
            h.wfile.write(line.encode())
            h.wfile.flush()

        def event(text: str, finish: str | None = None) -> None:
            send("data: " + json.dumps({"id": "cmpl-fake", "object": "text_completion",
                                        "model": "random", "choices": [{
                                            "index": 0, "text": text,
                                            "finish_reason": finish}]}) + "\n\n")

        def pieces(text: str) -> list[str]:
            return [text[i:i + 3] for i in range(0, len(text), 3)]

        try:
            if fault in ("stall-headers",):
                self.stopping.wait(STALL_S)
                return
            if fault == "stall-midway":
                event(OK_TEXT[:3])
                self.stopping.wait(STALL_S)
                return
            if fault == "garbled-line":
                event(OK_TEXT[:3])
                send("this is not server-sent events\n\n")
            elif fault == "bad-json":
                event(OK_TEXT[:3])
                send('data: {"choices": [{"text": "unterminated\n\n')
            elif fault == "no-finish":
                for p in pieces(OK_TEXT):
                    event(p)
            elif fault == "error-event":
                event(OK_TEXT[:3])
                send("data: " + json.dumps({"error": {"message": "upstream exploded",
                                                      "type": "server_error"}}) + "\n\n")
            elif fault == "chars":
                for ch in CHARS_TEXT:
                    event(ch)
                event("", "stop")
            elif fault == "line-separator":
                for p in pieces(SEPARATED_TEXT):
                    send("data: " + json.dumps({"id": "cmpl-fake", "object": "text_completion",
                                                "choices": [{"index": 0, "text": p,
                                                             "finish_reason": None}]},
                                               ensure_ascii=False) + "\n\n")
                event("", "stop")
            elif fault == "stop-string":
                event(STOPPED_TEXT)
                send("data: " + json.dumps({"id": "cmpl-fake", "object": "text_completion",
                                            "choices": [{"index": 0, "text": "",
                                                         "finish_reason": "stop",
                                                         "stop_reason": ","}]}) + "\n\n")
            elif fault in ("unenforced", "long-fraction", "short-fraction"):
                text = {"unenforced": UNENFORCED_TEXT, "long-fraction": LONG_FRACTION,
                        "short-fraction": SHORT_FRACTION}[fault]
                for p in pieces(text):
                    event(p)
                event("", "stop")
            else:  # ok
                for p in pieces(OK_TEXT):
                    event(p)
                event("", "stop")
                send("data: " + json.dumps({"id": "cmpl-fake", "choices": [], "usage": {
                    "prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}) + "\n\n")
            send("data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):  # the proxy gave up first: fine
            pass

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
