"""Record what real coding agents send: the request bodies in tests/data/agent_requests.

    python scripts/record_agents.py [--only claude-code|codex|claude-agent-sdk] [--dry-run]

Runs every agent that `bash scripts/agents.sh install [--latest]` installed (tests/coding_agents.py)
against a capture server on 127.0.0.1 that speaks just enough of Anthropic Messages
(POST /v1/messages, streaming or not, /v1/messages/count_tokens, GET /v1/models) and of OpenAI
Responses (POST /v1/responses, streaming) for one turn with one tool round trip: a request
offering the agent's read-only tool gets a call of it (Claude Code `Read` of hello.txt, Codex its
shell tool running `cat hello.txt`), the request carrying the tool result gets the text "done",
anything else (title generation, quota checks) gets a short text. The server is stateless: the
answer depends on the request alone.

Writes tests/data/agent_requests/<agent>-<version>/NN-<what>.json, one JSON object per request,
{"path", "headers" (the meaningful ones), "body"}, keeping the first request, the one carrying
the tool result and one of each kind of side request, plus summary.json (every request in
order, its answer, the hosts the agent tried to reach beyond the API, exit status, time).
Standard library only, so it runs before the venv exists.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import coding_agents as agents  # tests/coding_agents.py

MODEL = "kaname-test"
FINAL = "done"
# Headers worth keeping: what selects API behaviour or names the client. Request ids, lengths,
# keys and connection details are dropped.
KEEP_HEADERS = {"anthropic-beta", "anthropic-version", "user-agent", "x-app", "originator",
                "openai-beta", "content-type", "accept", "x-stainless-lang",
                "x-stainless-package-version", "x-stainless-runtime", "x-stainless-helper-method",
                "anthropic-dangerous-direct-browser-access", "version",
                "x-codex-beta-features"}
CODEX_SHELLS = ("exec_command", "shell_command", "shell", "container.exec")


# ---------------------------------------------------------------- what to answer


def _anthropic_has_tool_result(body: dict[str, Any]) -> bool:
    for m in body.get("messages", []):
        if isinstance(m.get("content"), list) and any(
                b.get("type") == "tool_result" for b in m["content"]):
            return True
    return False


def _responses_has_tool_result(body: dict[str, Any]) -> bool:
    inp = body.get("input")
    return isinstance(inp, list) and any(
        isinstance(i, dict) and i.get("type", "").endswith("_output") for i in inp)


def anthropic_answer(body: dict[str, Any], workdir: Path) -> tuple[str, list[dict[str, Any]]]:
    """(what, content blocks) for a Messages request."""
    tools = {t.get("name") for t in body.get("tools", [])}
    if _anthropic_has_tool_result(body):
        return "tool-result", [{"type": "text", "text": FINAL}]
    if "Read" in tools:
        return "first", [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
                          "name": "Read", "input": {"file_path": str(workdir / "hello.txt")}}]
    return "side", [{"type": "text", "text": "Reading hello.txt"}]


def responses_answer(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(what, output items) for a Responses request."""
    if _responses_has_tool_result(body):
        return "tool-result", [_message_item(FINAL)]
    tools = {t.get("name"): t for t in body.get("tools", []) if t.get("type") == "function"}
    for name in CODEX_SHELLS:
        if name in tools:
            props = tools[name].get("parameters", {}).get("properties", {})
            if "cmd" in props:
                args: dict[str, Any] = {"cmd": "cat hello.txt"}
            elif props.get("command", {}).get("type") == "array":
                args = {"command": ["bash", "-lc", "cat hello.txt"]}
            else:
                args = {"command": "cat hello.txt"}
            return "first", [{"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:20],
                              "call_id": "call_" + uuid.uuid4().hex[:20], "name": name,
                              "arguments": json.dumps(args), "status": "completed"}]
    return "side", [_message_item("Reading hello.txt")]


def _message_item(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_" + uuid.uuid4().hex[:20], "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


# ---------------------------------------------------------------- wire shapes


def anthropic_message(body: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    tool = any(b["type"] == "tool_use" for b in blocks)
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
            "model": body.get("model", MODEL), "content": blocks,
            "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def anthropic_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message["stop_reason"],
                                               "stop_sequence": None},
                                     "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def responses_events(body: dict[str, Any], items: list[dict[str, Any]]
                     ) -> list[tuple[str, dict[str, Any]]]:
    resp = {"id": "resp_" + uuid.uuid4().hex[:24], "object": "response",
            "created_at": int(time.time()), "status": "in_progress",
            "model": body.get("model", MODEL), "output": [], "error": None,
            "incomplete_details": None, "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": resp}),
        ("response.in_progress", {"type": "response.in_progress", "response": resp})]
    for i, item in enumerate(items):
        if item["type"] == "function_call":
            events.append(("response.output_item.added", {
                "type": "response.output_item.added", "output_index": i,
                "item": {**item, "arguments": "", "status": "in_progress"}}))
            events.append(("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "item_id": item["id"],
                "output_index": i, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done", {
                "type": "response.function_call_arguments.done", "item_id": item["id"],
                "output_index": i, "arguments": item["arguments"]}))
        else:
            text = item["content"][0]["text"]
            events.append(("response.output_item.added", {
                "type": "response.output_item.added", "output_index": i,
                "item": {**item, "status": "in_progress", "content": []}}))
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(("response.content_part.added", {
                "type": "response.content_part.added", "item_id": item["id"],
                "output_index": i, "content_index": 0, "part": part}))
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"],
                "output_index": i, "content_index": 0, "delta": text}))
            events.append(("response.output_text.done", {
                "type": "response.output_text.done", "item_id": item["id"],
                "output_index": i, "content_index": 0, "text": text}))
            events.append(("response.content_part.done", {
                "type": "response.content_part.done", "item_id": item["id"],
                "output_index": i, "content_index": 0, "part": {**part, "text": text}}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "output_index": i, "item": item}))
    done = {**resp, "status": "completed", "output": items,
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 110}}
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    for n, (_, data) in enumerate(events):
        data["sequence_number"] = n
    return events


# ---------------------------------------------------------------- the capture server


class Capture:
    """The capture server: every request (path, headers, body) and its answer, in order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _record(self, body: Any) -> dict[str, Any]:
                headers = {k.lower(): v for k, v in self.headers.items()}
                entry = {"method": self.command, "path": self.path, "headers": headers,
                         "body": body}
                with capture.lock:
                    capture.requests.append(entry)
                return entry

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
                data = b"".join(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()
                                for name, obj in events)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                entry = self._record(None)
                path = self.path.split("?")[0]
                if path.rstrip("/").endswith("/models"):
                    entry["answer"] = "models"
                    model = {"id": MODEL, "object": "model", "type": "model",
                             "display_name": MODEL, "created_at": "2026-01-01T00:00:00Z",
                             "created": 0, "owned_by": "kaname"}
                    self._json(200, {"object": "list", "data": [model], "has_more": False,
                                     "first_id": MODEL, "last_id": MODEL})
                else:
                    entry["answer"] = "404"
                    self._json(404, {"error": {"type": "not_found_error",
                                               "message": f"no route {path}"}})

            def do_POST(self) -> None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = b""
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        raw += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                else:
                    raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "zstd":
                    body: Any = {"undecoded": "zstd", "bytes": len(raw)}
                else:
                    try:
                        body = json.loads(raw or b"null")
                    except ValueError:
                        body = {"undecoded": raw[:200].decode(errors="replace")}
                entry = self._record(body)
                path = self.path.split("?")[0]
                if path.endswith("/messages/count_tokens"):
                    entry["answer"] = "count_tokens"
                    self._json(200, {"input_tokens": 100})
                elif path.endswith("/messages"):
                    what, blocks = anthropic_answer(body, capture.workdir)
                    entry["answer"] = what
                    message = anthropic_message(body, blocks)
                    if body.get("stream"):
                        self._sse(anthropic_events(message))
                    else:
                        self._json(200, message)
                elif path.endswith("/responses"):
                    what, items = responses_answer(body)
                    entry["answer"] = what
                    self._sse(responses_events(body, items))
                else:
                    entry["answer"] = "404"
                    self._json(404, {"error": {"type": "not_found_error",
                                               "message": f"no route {path}"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- recording


def _what(entry: dict[str, Any]) -> str:
    path = entry["path"].split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    answer = entry.get("answer", "")
    if answer in ("first", "tool-result", "side"):
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        suffix = "-stream" if body.get("stream") else ""
        return f"{answer}{suffix}" if answer != "side" else f"side-{path}{suffix}"
    return f"{entry['method'].lower()}-{path}"


def _side_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Side requests of the same kind (the same path, tools, system prompt size) are kept once."""
    body = entry["body"] if isinstance(entry["body"], dict) else {}
    system = body.get("system") or body.get("instructions") or ""
    return (entry["method"], entry["path"], entry.get("answer"),
            tuple(sorted(t.get("name", t.get("type", "")) for t in body.get("tools", []))),
            len(json.dumps(system)) // 200, body.get("max_tokens"))


def record(agent: agents.Agent, out: Path, *, timeout: float, dry_run: bool) -> dict[str, Any]:
    tmp = Path(__import__("tempfile").mkdtemp(prefix=f"record-{agent.name}-"))
    workdir = tmp / "work"  # what make_workdir will create; the capture names it in its Read
    capture = Capture(workdir)
    try:
        run = agents.run_agent(agent, capture.url, model=MODEL, timeout=timeout, tmp=tmp)
    finally:
        capture.close()
    requests = capture.requests
    summary = {
        "agent": agent.name, "returncode": run.returncode, "seconds": round(run.seconds, 1),
        "argv": [Path(a).name if a.startswith("/") else a for a in run.argv],
        "stdout_tail": run.stdout[-1500:], "stderr_tail": run.stderr[-1500:],
        "outbound": sorted(set(run.outbound)),
        # the tool ran: hello.txt's content came back in a request
        "tool_output_seen": any(agents.HELLO in json.dumps(r["body"]) for r in requests),
        "final_text_printed": FINAL in run.stdout,
        "requests": [{"method": r["method"], "path": r["path"], "answer": r.get("answer"),
                      "model": (r["body"] or {}).get("model") if isinstance(r["body"], dict)
                      else None} for r in requests],
    }
    keep: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for r in requests:
        key = ("main", r["answer"]) if r.get("answer") in ("first", "tool-result") else _side_key(r)
        if key in seen:
            continue
        seen.add(key)
        keep.append(r)
    if not dry_run:
        folder = out / agent.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for n, r in enumerate(keep, 1):
            headers = {k: v for k, v in r["headers"].items() if k in KEEP_HEADERS}
            body = json.loads(json.dumps(r["body"]).replace(str(tmp), "/tmp/agent"))
            (folder / f"{n:02d}-{_what(r)}.json").write_text(json.dumps(
                {"method": r["method"], "path": r["path"], "headers": headers, "body": body},
                indent=1, ensure_ascii=False) + "\n")
        (folder / "summary.json").write_text(json.dumps(
            json.loads(json.dumps(summary).replace(str(tmp), "/tmp/agent")),
            indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=agents.KINDS)
    ap.add_argument("--out", type=Path, default=agents.DATA_DIR)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--dry-run", action="store_true", help="print the summary, write nothing")
    args = ap.parse_args()
    found = [a for a in agents.installed_agents() if args.only in (None, a.kind)]
    if not found:
        print(f"no agents: {agents.why_not_installed()}", file=sys.stderr)
        return 1
    failed = False
    for agent in found:
        summary = record(agent, args.out, timeout=args.timeout, dry_run=args.dry_run)
        print(json.dumps({k: summary[k] for k in ("agent", "returncode", "seconds", "outbound",
                                                   "tool_output_seen", "final_text_printed",
                                                   "requests")}, indent=1))
        if summary["returncode"] != 0:
            failed = True
            print(summary["stdout_tail"], summary["stderr_tail"], sep="\n", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
