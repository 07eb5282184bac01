"""SIGTERM loses nothing, and `--request-timeout` bounds waiting and time without progress.

A server with one generation slot (`--max-concurrency 1`), on the random model slowed to STEP
seconds a token (tests/slowserve.py), runs one request while seven wait. On SIGTERM every
client gets a complete answer or an explicit error in its API's shape (a 503 before the 200, or
an error event and then the end of the stream), none a bare disconnect: the waiting ones at
once, the running one when it finishes or when the grace period (`--graceful-shutdown`) ends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from serverproc import ManagedProcess
from slowserve import SLOW_PREFILL

STEP = 0.05  # seconds a token
PREFILL = 6.0  # seconds before the first token of a prompt holding SLOW_PREFILL
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}
# content that cannot end before LONG characters (hundreds of tokens: many seconds at STEP)
LONG = 3000
LONG_SCHEMA = {"type": "string", "minLength": LONG, "maxLength": LONG}


class SlowServer(ManagedProcess):
    name = "kaname-slow"

    def __init__(self, *args: str):
        super().__init__([sys.executable, str(Path(__file__).with_name("slowserve.py")),
                          "--port", "{port}", "--model", "random", "--format", "qwen3",
                          "--max-concurrency", "1", "--max-tokens-limit", "100000", *args],
                         env={"KANAME_TEST_STEP_S": str(STEP),
                              "KANAME_TEST_PREFILL_S": str(PREFILL)})


def body(api: str, stream: bool, *, long: bool = False, max_tokens: int | None = None,
         prompt: str = "Say something.") -> dict[str, Any]:
    """A short request, or a `long` one that runs to its max_tokens (default: minutes)."""
    out: dict[str, Any] = {"model": "random", "stream": stream,
                           "max_tokens": max_tokens or (100000 if long else 20),
                           "messages": [{"role": "user", "content": prompt}]}
    if long:
        if api == "chat":
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "long", "schema": LONG_SCHEMA}}
        else:
            out["output_config"] = {"format": {"type": "json_schema", "schema": LONG_SCHEMA}}
    return out


@dataclass
class Outcome:
    """What one client saw."""

    api: str
    stream: bool
    status: int | None = None
    json: Any = None  # a non-streamed body, or the body of an error status
    events: list[tuple[str | None, str]] = field(default_factory=list)  # (event name, data)
    disconnect: str | None = None  # the transport error, where the answer was cut
    started: float = 0.0
    ended: float = 0.0  # when the answer was complete (or cut)

    def kind(self) -> str:
        """"answer" (complete), "error" (explicit, in the API's shape) or what went wrong."""
        if self.disconnect is not None:
            return f"disconnect: {self.disconnect}"
        if self.status != 200:
            return "error" if self.json == error_shape(self.api, self.json) else \
                f"bad error body {self.status}: {self.json}"
        if not self.stream:
            return "answer"
        if self.api == "chat":
            if not self.events or self.events[-1][1] != "[DONE]":
                return "stream without [DONE]"
            data = [json.loads(d) for _, d in self.events[:-1]]
            if "error" in data[-1]:
                return "error" if data[-1] == error_shape("chat", data[-1]) \
                    and all("error" not in d for d in data[:-1]) else f"bad: {data[-1]}"
            return "answer" if data[-1]["choices"][-1]["finish_reason"] else "cut stream"
        name, data = self.events[-1]
        if name == "error":
            return "error" if json.loads(data) == error_shape("messages", json.loads(data)) \
                else f"bad error event: {data}"
        return "answer" if name == "message_stop" else f"stream ended at {name}"

    def error(self) -> dict[str, Any]:
        """The error's object: the body of an error status or the stream's error event."""
        if self.status != 200:
            return self.json["error"]
        data = self.events[-2][1] if self.api == "chat" else self.events[-1][1]
        return json.loads(data)["error"]


def error_shape(api: str, got: Any) -> Any:
    """`got` if it is an error in `api`'s shape (OpenAI's or Anthropic's), else None."""
    if not isinstance(got, dict):
        return None
    err = got.get("error")
    if api == "chat":
        ok = set(got) == {"error"} and isinstance(err, dict) \
            and set(err) == {"message", "type", "param", "code"}
    else:
        ok = got.get("type") == "error" and isinstance(err, dict) \
            and set(err) == {"type", "message"}
    return got if ok and isinstance(err.get("message"), str) and err["message"] else None


def send(url: str, api: str, payload: dict[str, Any], out: Outcome,
         first_byte: threading.Event | None = None) -> None:
    out.started = time.monotonic()
    try:
        with httpx.stream("POST", url + PATHS[api], json=payload, timeout=120) as r:
            out.status = r.status_code
            if r.status_code != 200 or not out.stream:
                r.read()
                out.json = r.json()
            else:
                name = None
                for line in r.iter_lines():
                    if first_byte is not None:
                        first_byte.set()
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        out.events.append((name, line[6:]))
                        name = None
    except httpx.HTTPError as e:
        out.disconnect = f"{type(e).__name__}: {e}"
    finally:
        out.ended = time.monotonic()
        if first_byte is not None:
            first_byte.set()


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def wait_for(what: str, check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


# the seven that wait behind the running one: both APIs, streamed and not
QUEUED = [("chat", False), ("chat", True), ("messages", False), ("messages", True),
          ("chat", True), ("messages", False), ("chat", False)]


def run_and_terminate(server: SlowServer, running: Outcome, payload: dict[str, Any]) -> float:
    """`running` takes the slot, seven more wait, then SIGTERM; the seven must be answered
    503 at once. The seconds from SIGTERM to the process's exit."""
    url = server.url
    first = threading.Event()
    threads = [threading.Thread(target=send, args=(url, running.api, payload, running, first))]
    threads[0].start()
    wait_for("the first request runs", lambda: metric(url, "kaname_active_generations") == 1)
    queued = [Outcome(api, stream) for api, stream in QUEUED]
    for out in queued:
        t = threading.Thread(target=send, args=(url, out.api, body(out.api, out.stream), out))
        t.start()
        threads.append(t)
    wait_for("seven requests queue", lambda: metric(url, "kaname_queue_depth") == 7)
    sent = time.monotonic()
    os.kill(server.proc.pid, signal.SIGTERM)
    wait_for("new connections are refused", lambda: refused(url) or server.proc.poll() is not None)
    refused_while_running = server.proc.poll() is None
    server.proc.wait(timeout=60)
    exited = time.monotonic() - sent
    for t in threads:
        t.join(timeout=30)
    for out in queued:  # answered at once, not when the running one ends
        assert out.kind() == "error", (out, server.log())
        assert out.status == 503 and out.ended - sent < 5, out
        assert "shutting down" in out.error()["message"], out
    assert all(out.error()["type"] == "overloaded_error" for out in queued if
               out.api == "messages")
    assert refused_while_running, "the process exited before refusing a connection"
    return exited


def refused(url: str) -> bool:
    """Not served: the connection is refused, or reset unanswered (a connection the kernel had
    accepted into the backlog just as the listener closed)."""
    try:
        httpx.get(url + "/health", timeout=2)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


def test_sigterm_answers_the_queue_and_lets_the_running_request_finish():
    """Grace enough for the running stream: it completes; the seven waiting get a 503."""
    with SlowServer("--graceful-shutdown", "20") as server:
        running = Outcome("chat", True)
        exited = run_and_terminate(server, running, body("chat", True, long=True,
                                                                   max_tokens=60))
    assert running.kind() == "answer", (running, server.log())
    assert exited < 15, exited  # the running one's ~3 s, not the grace period


def test_sigterm_ends_what_outlives_the_grace_period_with_an_error_event():
    """A stream still running when the grace period ends gets an error event (Anthropic's
    `event: error`) and the end of its stream; the process then exits."""
    with SlowServer("--graceful-shutdown", "2") as server:
        running = Outcome("messages", True)
        exited = run_and_terminate(server, running, body("messages", True,
                                                                   long=True))
    assert running.kind() == "error", (running, server.log())
    assert running.error()["type"] == "overloaded_error", running
    assert "grace" in running.error()["message"], running
    assert any(name == "content_block_delta" for name, _ in running.events)  # it had begun
    assert 2 <= exited < 10, exited


def test_a_non_streamed_request_outliving_the_grace_period_gets_a_503():
    with SlowServer("--graceful-shutdown", "2") as server:
        running = Outcome("chat", False)
        exited = run_and_terminate(server, running, body("chat", False, long=True))
    assert running.kind() == "error" and running.status == 503, (running, server.log())
    assert 2 <= exited < 10, exited


# ---- --request-timeout: waiting from arrival, then time without progress ---------------------

TIMEOUT = 4.0


def test_a_queued_stream_times_out_on_time_and_a_running_one_only_when_stalled():
    """A stream that waits for the slot gets its 504 before the 200 `--request-timeout`
    seconds after it arrived; a generation that goes that long without a step (a prefill
    longer than it) gets its 504 then. A generation that keeps making progress is never cut:
    it runs past the timeout to its own end (an agent's turn reading a long prompt, then
    writing a long answer)."""
    with SlowServer("--request-timeout", str(TIMEOUT)) as server:
        # the slot is held past the deadline (a prefill longer than it: the holder is
        # answered 504 on time, but its slot is free only after its first token), so the
        # waiting stream never gets its 200
        holder = Outcome("messages", False)
        t = threading.Thread(target=send, args=(
            server.url, "messages", body("messages", False, prompt=SLOW_PREFILL), holder))
        t.start()
        wait_for("the holder runs", lambda: metric(server.url,
                                                   "kaname_active_generations") == 1)
        waiting = Outcome("chat", True)
        send(server.url, "chat", body("chat", True, long=True), waiting)
        assert waiting.status == 504 and waiting.kind() == "error", waiting
        assert waiting.error()["code"] == "timeout", waiting
        assert TIMEOUT - 0.5 < waiting.ended - waiting.started < TIMEOUT + 1.5, waiting
        t.join(timeout=30)
        assert holder.status == 504 and holder.kind() == "error", holder
        assert holder.ended - holder.started < TIMEOUT + 1.5, holder
        wait_for("the slot is free", lambda: metric(server.url,
                                                    "kaname_active_generations") == 0)

        # the slot is held for about half the deadline: the stream starts, then runs for
        # twice the timeout (a token every STEP seconds) and ends on its own, not cut
        holder = Outcome("chat", False)
        t = threading.Thread(target=send, args=(server.url, "chat",
                                                body("chat", False, long=True, max_tokens=50),
                                                holder))
        t.start()
        wait_for("the holder runs", lambda: metric(server.url,
                                                   "kaname_active_generations") == 1)
        waiting = Outcome("chat", True)
        tokens = int(2 * TIMEOUT / STEP)
        send(server.url, "chat", body("chat", True, long=True, max_tokens=tokens), waiting)
        t.join(timeout=30)
        assert holder.kind() == "answer", holder
        assert waiting.status == 200 and waiting.kind() == "answer", waiting
        assert waiting.ended - waiting.started > TIMEOUT + 1.5, waiting
