"""kaname serve under load: 64 streaming clients back to back for 60 s on a batch of 8, over
chat completions, completions, the Responses API and Anthropic's Messages API, some of them
leaving mid-stream, lose nothing and leave the server's memory flat; a full queue answers 429
at once in the API's shape; a client that goes away frees its generation slot."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import httpx
import pytest
from serverproc import ServerProcess

MODEL = ("--model", "random", "--format", "qwen3")
CLIENTS = 64
LOAD_SECONDS = 60.0
LEAVE_EVERY = 6  # about one request in six is dropped by its client after its first event
RSS_GROWTH_MB = 64  # most the server may grow from the first half's plateau to the end

# A request that keeps its slot busy: the regex cannot end before max_tokens (about 5000
# tokens/s on the random model, so SLOW_TOKENS is a second or two), never a 'stop' finish.
SLOW_TOKENS = 8000
SLOW_COMPLETION = {"model": "random", "prompt": "go", "max_tokens": SLOW_TOKENS,
                   "structured_outputs": {"regex": "[a-z]{300000}"}}
# long enough that an uncancelled generation is still running when the test looks
VERY_SLOW = {**SLOW_COMPLETION, "max_tokens": 30000}


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def _wait_idle(url: str, timeout: float) -> float:
    """Seconds until no generation runs and none waits; AssertionError after `timeout`."""
    t0 = time.monotonic()
    while True:
        if _metric(url, "kaname_active_generations") == 0 \
                and _metric(url, "kaname_queue_depth") == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"generations still running after {timeout} s")
        time.sleep(0.1)


def _assert_error_shape(body: Any, code: str) -> None:
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == code, body


# ---- sustained load --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def busy_server():
    with ServerProcess(*MODEL, "--max-concurrency", "8", "--max-queue", "64") as s:
        yield s


def _load_request(rng: random.Random) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"model": "random", "stream": True, "seed": rng.randrange(10**6),
                            "max_tokens": rng.randint(4, 24)}
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    kind = rng.choice(["chat", "chat", "tools", "completion", "responses", "messages"])
    if kind == "completion":
        return "/v1/completions", {**body, "prompt": "Once upon a time"}
    lookup = {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "maxLength": 8}},
        "required": ["q"]}}
    if kind == "responses":
        return "/v1/responses", {
            "model": "random", "stream": True, "seed": body["seed"],
            "max_output_tokens": body["max_tokens"], "input": f"hello {rng.random()}",
            **({"tools": [{"type": "function", **lookup}]} if rng.random() < 0.5 else {})}
    if kind == "messages":
        return "/v1/messages", {
            "model": "random", "stream": True, "seed": body["seed"],
            "max_tokens": body["max_tokens"],
            "messages": [{"role": "user", "content": f"hello {rng.random()}"}],
            **({"tools": [{"name": "lookup", "input_schema": lookup["parameters"]}]}
               if rng.random() < 0.5 else {})}
    body["messages"] = [{"role": "user", "content": f"hello {rng.random()}"}]
    if kind == "tools":
        body["tools"] = [{"type": "function", "function": {"name": "lookup", "parameters": {
            "type": "object", "properties": {"q": {"type": "string", "maxLength": 8}},
            "required": ["q"]}}}]
        body["tool_choice"] = rng.choice(["auto", "required"])
    return "/v1/chat/completions", body


def _named_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """`event: NAME` / `data: {...}` blocks (the Responses and Messages APIs' framing)."""
    out = []
    for block in (b for b in text.split("\n\n") if b.strip()):
        name, data = block.split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: "), block
        event = json.loads(data[len("data: "):])
        assert event["type"] == name[len("event: "):], block
        out.append((event["type"], event))
    return out


def _check_stream(path: str, body: dict[str, Any], status: int, text: str) -> None:
    assert status == 200, (status, text[:300])
    if path == "/v1/responses":
        types = [t for t, _ in _named_events(text)]
        assert types[0] == "response.created", types
        assert types[-1] in ("response.completed", "response.incomplete"), types[-3:]
        assert sum(t.startswith("response.completed") or t == "response.incomplete"
                   for t in types) == 1, types
        assert "error" not in types and "response.failed" not in types, types
        return
    if path == "/v1/messages":
        events = _named_events(text)
        types = [t for t, _ in events]
        assert types[0] == "message_start" and types[-1] == "message_stop", types
        stops = [e["delta"]["stop_reason"] for t, e in events if t == "message_delta"]
        assert len(stops) == 1 and stops[0] in ("end_turn", "max_tokens", "tool_use"), stops
        assert "error" not in types, types
        return
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert blocks and blocks[-1] == "data: [DONE]", text[-300:]
    finishes = []
    usage = 0
    for block in blocks[:-1]:
        assert block.startswith("data: "), block
        event = json.loads(block[len("data: "):])
        assert "error" not in event, event
        if event.get("usage"):
            usage += 1
        for choice in event["choices"]:
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
    assert len(finishes) == 1, finishes
    ok = {"stop", "length", "tool_calls"} if path.endswith("chat/completions") \
        else {"stop", "length"}
    assert finishes[0] in ok, finishes
    want_usage = bool(body.get("stream_options", {}).get("include_usage"))
    assert usage == int(want_usage), (usage, body)


def _rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_sustained_streaming_load(busy_server):
    url = busy_server.url
    done: list[float] = []
    left = 0
    failures: list[str] = []
    rss: list[tuple[float, float]] = []  # (seconds into the load, MB)

    async def client(i: int, http: httpx.AsyncClient, deadline: float) -> None:
        nonlocal left
        rng = random.Random(i)
        while time.monotonic() < deadline:
            path, body = _load_request(rng)
            leave = rng.randrange(LEAVE_EVERY) == 0
            t0 = time.monotonic()
            try:
                async with http.stream("POST", url + path, json=body) as r:
                    if leave and r.status_code == 200:
                        async for _ in r.aiter_bytes():
                            break  # gone after the first bytes: the server must let it go
                        left += 1
                        continue
                    text = (await r.aread()).decode()
                _check_stream(path, body, r.status_code, text)
                done.append(time.monotonic() - t0)
            except Exception as e:  # recorded, the client goes on
                failures.append(f"client {i} {path}: {type(e).__name__}: {str(e)[:300]}")

    async def watch(start: float, deadline: float) -> None:
        while time.monotonic() < deadline:
            rss.append((time.monotonic() - start, _rss_mb(busy_server.pid)))
            await asyncio.sleep(1.0)

    async def main() -> None:
        limits = httpx.Limits(max_connections=CLIENTS * 2)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            start = time.monotonic()
            deadline = start + LOAD_SECONDS
            await asyncio.gather(watch(start, deadline),
                                 *(client(i, http, deadline) for i in range(CLIENTS)))

    t0 = time.monotonic()
    asyncio.run(main())
    took = time.monotonic() - t0
    done.sort()
    plateau = max(mb for t, mb in rss if LOAD_SECONDS / 4 <= t <= LOAD_SECONDS / 2)
    end = max(mb for t, mb in rss if t > LOAD_SECONDS * 3 / 4)
    print(f"\n{len(done)} streamed requests from {CLIENTS} clients in {took:.1f} s "
          f"({len(done) / took:.1f}/s), {left} left mid-stream, latency p50 "
          f"{done[len(done) // 2]:.2f} s, max {done[-1]:.2f} s, failures {len(failures)}; "
          f"RSS {plateau:.0f} MB at a quarter to half, {end:.0f} MB in the last quarter")
    assert not failures, failures[:5]
    assert len(done) >= CLIENTS * 3
    assert left >= CLIENTS // 2  # the disconnects happened
    assert end <= plateau + RSS_GROWTH_MB, (plateau, end)
    _wait_idle(url, 10)  # every sequence, the abandoned ones too, has let its slot go
    metrics = httpx.get(url + "/metrics").text
    assert 'status="429"' not in metrics
    assert 'status="500"' not in metrics
    for path in ("/v1/responses", "/v1/messages"):  # each API took its share
        assert f'kaname_requests_total{{endpoint="{path}",status="200"}}' in metrics, path
    # the batch carried several sequences a step
    assert 'kaname_batch_sequences_bucket{le="4.0"}' in metrics
    steps = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith("kaname_batch_sequences_")}
    assert steps['kaname_batch_sequences_bucket{le="1.0"}'] < \
        steps["kaname_batch_sequences_count"], steps
    parts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith("kaname_batch_seconds_total")}
    model = parts['kaname_batch_seconds_total{part="model"}']
    loops = parts['kaname_batch_seconds_total{part="loops"}']
    print(f"batch: {model:.1f} s in model steps, {loops:.1f} s in the sequences' loops")
    assert model > 0 and loops > 0


# ---- a full queue, a client gone ----------------------------------------------------------------

@pytest.fixture(scope="module")
def small_server():
    with ServerProcess(*MODEL, "--max-concurrency", "1", "--max-queue", "2",
                       "--max-tokens-limit", "100000") as s:
        yield s


def test_full_queue_answers_429_at_once(small_server):
    url = small_server.url
    _wait_idle(url, 30)

    async def one(http: httpx.AsyncClient, i: int) -> tuple[float, httpx.Response]:
        await asyncio.sleep(0.02 * i)  # in order: the first takes the slot
        t0 = time.monotonic()
        r = await http.post(url + "/v1/completions", json=SLOW_COMPLETION)
        return time.monotonic() - t0, r

    async def main() -> list[tuple[float, httpx.Response]]:
        async with httpx.AsyncClient(timeout=60) as http:
            return await asyncio.gather(*(one(http, i) for i in range(10)))

    results = asyncio.run(main())
    rejected = [(t, r) for t, r in results if r.status_code == 429]
    served = [(t, r) for t, r in results if r.status_code == 200]
    assert len(rejected) + len(served) == 10, [r.status_code for _, r in results]
    assert 1 <= len(served) <= 3, len(served)  # one slot, two places in the queue
    assert len(rejected) >= 7 - 1
    for took, r in rejected:
        assert took < 2.0, took
        assert r.headers.get("retry-after") == "1"
        _assert_error_shape(r.json(), "queue_full")
        assert r.json()["error"]["type"] == "rate_limit_error"
    for _, r in served:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "length"
        assert r.json()["usage"]["completion_tokens"] == SLOW_TOKENS
    _wait_idle(url, 10)


def test_full_queue_is_a_429_in_each_apis_shape(small_server):
    """The Responses API answers in OpenAI's shape, the Messages API in Anthropic's."""
    url = small_server.url
    _wait_idle(url, 30)
    asks = {"/v1/responses": {"model": "random", "input": "go", "max_output_tokens": 16},
            "/v1/messages": {"model": "random", "max_tokens": 16,
                             "messages": [{"role": "user", "content": "go"}]}}

    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            # fill the slot and both places in the queue, then ask each API
            busy = [asyncio.create_task(http.post(url + "/v1/completions", json=SLOW_COMPLETION))
                    for _ in range(3)]
            await asyncio.sleep(0.3)
            answers = [await http.post(url + p, json=b) for p, b in asks.items()]
            await asyncio.gather(*busy)
            return answers

    try:
        responses, messages = asyncio.run(main())
    finally:
        _wait_idle(url, 30)
    assert responses.status_code == 429 and messages.status_code == 429
    _assert_error_shape(responses.json(), "queue_full")
    assert messages.json() == {"type": "error", "error": {
        "type": "rate_limit_error", "message": messages.json()["error"]["message"]}}


async def _open_streams(url: str, n: int, hold: float,
                        stagger: float) -> list[tuple[float, int, Any]]:
    """n concurrent streaming slow completions, the i-th sent after i * stagger seconds; each:
    (seconds to its first event, HTTP status, first event or error body). Each stream is held
    open `hold` seconds after its first event, then closed; streams still waiting for their
    first event after hold + 3 s are given up (left out)."""

    async def one(http: httpx.AsyncClient, i: int) -> tuple[float, int, Any]:
        await asyncio.sleep(stagger * i)
        t0 = time.monotonic()
        async with http.stream("POST", url + "/v1/completions",
                               json={**SLOW_COMPLETION, "stream": True}) as r:
            if r.status_code != 200:
                return time.monotonic() - t0, r.status_code, json.loads(await r.aread())
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    took = time.monotonic() - t0
                    await asyncio.sleep(hold)
                    return took, 200, json.loads(line[len("data: "):])
        raise AssertionError("stream ended without an event")

    async with httpx.AsyncClient(timeout=60) as http:
        tasks = [asyncio.create_task(one(http, i)) for i in range(n)]
        done, pending = await asyncio.wait(tasks, timeout=hold + 3.0)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() for t in done]


def _rejected(results: list[tuple[float, int, Any]]) -> list[tuple[float, int, Any]]:
    return [(t, status, e) for t, status, e in results if status == 429 or "error" in e]


def test_full_queue_is_http_429_for_streams(small_server):
    url = small_server.url
    _wait_idle(url, 30)
    try:
        results = asyncio.run(_open_streams(url, 10, hold=1.0, stagger=0.02))
    finally:
        _wait_idle(url, 30)
    rejected = _rejected(results)
    assert len(rejected) >= 10 - 3, results
    for took, status, body in rejected:
        assert took < 2.0
        _assert_error_shape(body, "queue_full")
        assert status == 429, "a full queue is HTTP 429 before the stream starts"


def test_admission_bounds_simultaneous_arrivals():
    """One slot, two places in the queue, ten requests in one event-loop turn: seven 429s.
    (HTTP requests meet this when they reach acquire() in the same turn, as streams can.)"""
    from kaname.server.admission import Admission
    from kaname.server.errors import APIError
    from kaname.server.metrics import Metrics

    async def main() -> list[Any]:
        admission = Admission(1, 2, Metrics(lambda: (0, 0)))

        async def one() -> Any:
            try:
                await admission.acquire(0.5)  # never released: the queued ones time out
                return "slot"
            except APIError as e:
                return e.status

        return await asyncio.gather(*(one() for _ in range(10)))

    outcome = asyncio.run(main())
    assert sorted(outcome, key=str) == [429] * 7 + [504] * 2 + ["slot"], outcome


def test_client_disconnect_frees_the_slot(small_server):
    url = small_server.url
    _wait_idle(url, 30)
    for attempt in range(3):
        with httpx.Client(timeout=30) as http, \
                http.stream("POST", url + "/v1/completions",
                            json={**VERY_SLOW, "stream": True}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # held: dropping it would close the connection at once
            for line in lines:
                if line.startswith("data: {"):
                    assert json.loads(line[6:])["choices"][0]["text"]
                    break
            assert _metric(url, "kaname_active_generations") == 1
            r.close()  # the client goes away after one chunk
        try:
            _wait_idle(url, 3.0)
        except AssertionError:
            _wait_idle(url, 60)  # let it end before the next test
            raise AssertionError(f"attempt {attempt}: the generation went on after the client "
                                 "left") from None
        t0 = time.monotonic()
        r2 = httpx.post(url + "/v1/completions", json={"model": "random", "prompt": "hi",
                                                       "max_tokens": 8}, timeout=30)
        assert r2.status_code == 200 and time.monotonic() - t0 < 2.0
