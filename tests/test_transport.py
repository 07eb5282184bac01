"""Hostile transport and small protocol faults, on a real `kaname serve --model random` with
`--read-timeout 2` and an API key: a request's headers and body must arrive within the read
timeout (a connection sending nothing, or headers a byte a second, is closed; a body that
trickles after its headers is answered 408 in its API's shape and closed; a request slow but
in time is served), the bearer scheme in any case, 405s with `Allow` and a client error type,
413s in each API's shape.

The slow clients all run at once, in threads started with the server (each test waits for its
own), so the module takes about one read timeout beyond the server's start, not one each."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from serverproc import ServerProcess

KEY = "sk-transport-test"
READ_TIMEOUT = 2.0
MARGIN = 2.5  # the server's lateness allowed on 2 shared cores
GIVE_UP = 12.0  # a connection still open this long after it opened is held: the bug
AUTH = f"x-api-key: {KEY}\r\n"
CHAT = json.dumps({"model": "random", "max_tokens": 3,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
MESSAGES = json.dumps({"model": "random", "max_tokens": 3,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()


def _head(method: str, path: str, body: bytes = b"", extra: str = AUTH) -> bytes:
    length = f"content-length: {len(body)}\r\ncontent-type: application/json\r\n" \
        if method == "POST" else ""
    return f"{method} {path} HTTP/1.1\r\nhost: test\r\n{extra}{length}\r\n".encode()


def _bytewise(data: bytes, gap: float = 1.0) -> list[tuple[float, bytes]]:
    """`data` a byte per `gap` seconds."""
    return [(gap, data[i:i + 1]) for i in range(len(data))]


@dataclass
class Seen:
    """What a slow client saw: when the server closed the connection (seconds after it
    opened; None: still open when the client gave up) and what it answered before."""

    closed_after: float | None
    sent_until: float  # when the client's last part went out
    data: bytes

    def response(self) -> tuple[int, dict[str, str], Any]:
        """The first response's status, headers (lower-cased) and JSON body."""
        head, _, rest = self.data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        headers = {k.lower(): v for k, v in headers.items()}
        body = rest[:int(headers.get("content-length", len(rest)))]
        return int(lines[0].split()[1]), headers, json.loads(body)


def _slow_client(port: int, parts: list[tuple[float, bytes]]) -> Seen:
    """Connect, send each part after its delay, read all the while; until the server closes
    the connection or GIVE_UP seconds."""
    received = bytearray()
    start = time.monotonic()
    due = start + (parts[0][0] if parts else 0.0)
    sent_until = 0.0
    with socket.create_connection(("127.0.0.1", port)) as s:
        while (now := time.monotonic()) < start + GIVE_UP:
            if parts and now >= due:
                try:
                    s.sendall(parts.pop(0)[1])
                except OSError:  # closed under us: read what came before
                    parts = []
                sent_until = time.monotonic() - start
                due = now + (parts[0][0] if parts else 0.0)
                continue
            wait = max(0.0, due - now) if parts else start + GIVE_UP - now
            if select.select([s], [], [], wait)[0]:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    return Seen(time.monotonic() - start, sent_until, bytes(received))
                received += chunk
    return Seen(None, sent_until, bytes(received))


SLOW_HEAD = _head("POST", "/v1/chat/completions", CHAT, AUTH + "connection: close\r\n")
# Each slow client: the parts it sends, (delay, bytes) each.
SLOW: dict[str, list[tuple[float, bytes]]] = {
    "silent": [],
    "headers_trickle": _bytewise(_head("GET", "/v1/models")),
    "chat_body_trickle": [(0.0, _head("POST", "/v1/chat/completions", CHAT)),
                          *_bytewise(CHAT)],
    "messages_body_trickle": [(0.0, _head("POST", "/v1/messages", MESSAGES)),
                              *_bytewise(MESSAGES)],
    # refused 401 before its body is read, which goes on trickling
    "unauthorized_body_trickle": [(0.0, _head("POST", "/v1/chat/completions", CHAT, "")),
                                  *_bytewise(CHAT)],
    # a complete request, then a second one on the same connection whose headers trickle
    "keepalive_then_trickle": [(0.0, _head("GET", "/health")),
                               *_bytewise(_head("GET", "/v1/models"))],
    # slow but within the limit: headers and body in six parts over 1.25 s
    "slow_in_time": [(0.25 if i else 0.0, part) for i, part in enumerate(
        [SLOW_HEAD[:20], SLOW_HEAD[20:40], SLOW_HEAD[40:], CHAT[:10], CHAT[10:30], CHAT[30:]])],
}


def _served_meanwhile(url: str) -> float:
    """Seconds a chat request takes half a second into the slow clients' trickling."""
    time.sleep(0.5)
    t = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", content=CHAT, timeout=10,
                   headers={"x-api-key": KEY, "content-type": "application/json"})
    assert r.status_code == 200, r.text
    return time.monotonic() - t


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ServerProcess, dict[str, Future[Any]]]]:
    with ServerProcess("--model", "random", "--format", "hermes", "--api-key", KEY,
                       "--read-timeout", str(READ_TIMEOUT), startup_timeout=120) as s, \
            ThreadPoolExecutor(len(SLOW) + 1) as pool:
        futures = {name: pool.submit(_slow_client, s.port, list(parts))
                   for name, parts in SLOW.items()}
        futures["served_meanwhile"] = pool.submit(_served_meanwhile, s.url)
        yield s, futures


def _seen(server: tuple[ServerProcess, dict[str, Future[Any]]], name: str) -> Seen:
    return server[1][name].result(timeout=GIVE_UP + 5)


def _closed_in_time(seen: Seen, start: float = 0.0) -> None:
    """Closed at the read deadline counted from `start` (not before, not much after)."""
    assert seen.closed_after is not None, f"connection still open after {GIVE_UP} s"
    assert start + READ_TIMEOUT - 0.2 <= seen.closed_after <= start + READ_TIMEOUT + MARGIN


@pytest.mark.parametrize("name", ["silent", "headers_trickle"])
def test_a_request_without_its_headers_in_time_is_closed_unanswered(server, name):
    seen = _seen(server, name)
    _closed_in_time(seen)
    assert seen.data == b""  # no request, no answer


def test_a_second_request_on_a_connection_gets_its_own_deadline(server):
    seen = _seen(server, "keepalive_then_trickle")
    assert seen.data.startswith(b"HTTP/1.1 200") and seen.data.count(b"HTTP/1.1") == 1
    _closed_in_time(seen, start=1.0)  # its first byte went out 1 s after the connection


@pytest.mark.parametrize("name, error", [
    ("chat_body_trickle", {"message": "the request was not received within the read timeout "
                                      "of 2 s; send its body at once",
                           "type": "invalid_request_error", "param": None,
                           "code": "read_timeout"}),
    ("messages_body_trickle", {"type": "invalid_request_error",
                               "message": "the request was not received within the read "
                                          "timeout of 2 s; send its body at once"}),
])
def test_a_body_that_trickles_is_answered_408_in_its_api_shape_and_closed(server, name, error):
    seen = _seen(server, name)
    _closed_in_time(seen)
    status, headers, body = seen.response()
    assert status == 408 and headers["connection"] == "close"
    assert body == ({"error": error} if name.startswith("chat") else
                    {"type": "error", "error": error})


def test_a_refused_request_whose_body_trickles_on_is_closed(server):
    seen = _seen(server, "unauthorized_body_trickle")
    _closed_in_time(seen)
    assert seen.response()[0] == 401


def test_a_slow_request_within_the_limit_is_served(server):
    seen = _seen(server, "slow_in_time")
    assert seen.sent_until < READ_TIMEOUT
    status, _, body = seen.response()
    assert status == 200 and body["object"] == "chat.completion"


def test_the_server_answers_while_slow_clients_hold_connections(server):
    assert server[1]["served_meanwhile"].result(timeout=GIVE_UP) < 1.0


@pytest.mark.parametrize("headers, status", [
    ({"authorization": f"Bearer {KEY}"}, 200),
    ({"authorization": f"bearer {KEY}"}, 200),
    ({"authorization": f"BEARER {KEY}"}, 200),
    ({"x-api-key": KEY}, 200),
    ({"authorization": f"Bearer {KEY}x"}, 401),
    ({"authorization": f"Bearer {KEY[:-1]}"}, 401),
    ({"authorization": f"Basic {KEY}"}, 401),
    ({"authorization": KEY}, 401),
    ({"x-api-key": "wrong"}, 401),
    ({"x-api-key": "ключ".encode()}, 401),  # not ASCII: a 401, not a 500
    ({}, 401),
])
def test_the_bearer_scheme_in_any_case(server, headers, status):
    r = httpx.get(f"{server[0].url}/v1/models", headers=headers, timeout=10)
    assert r.status_code == status
    if status == 401:
        assert r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{server[0].url}/health", timeout=10).status_code == 200  # no key


@pytest.mark.parametrize("path, allow, body", [
    ("/v1/models", "GET", {"error": {
        "message": "Method Not Allowed", "type": "invalid_request_error", "param": None,
        "code": None}}),
    ("/v1/messages", "POST", {"type": "error", "error": {
        "type": "invalid_request_error", "message": "Method Not Allowed"}}),
])
def test_405_names_the_allowed_methods_and_is_the_clients_error(server, path, allow, body):
    r = httpx.request("TRACE", f"{server[0].url}{path}", headers={"x-api-key": KEY},
                      timeout=10)
    assert r.status_code == 405
    assert sorted(r.headers["allow"].split(", ")) == sorted(allow.split(", "))
    assert r.json() == body


@pytest.mark.parametrize("path, error_type", [("/v1/chat/completions", "invalid_request_error"),
                                              ("/v1/messages", "request_too_large")])
@pytest.mark.parametrize("chunked", [False, True])
def test_10_mb_bodies_are_413_in_each_api_shape(server, path, error_type, chunked):
    body = b'{"model": "random", "messages": [], "x": "' + b"a" * (10 << 20) + b'"}'
    content: Any = iter([body[i:i + (1 << 20)] for i in range(0, len(body), 1 << 20)]) \
        if chunked else body
    r = httpx.post(f"{server[0].url}{path}", content=content, timeout=30,
                   headers={"x-api-key": KEY, "content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["type"] == error_type
    assert ("type" in r.json()) == (path == "/v1/messages")  # Anthropic's shape
