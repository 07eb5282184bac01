"""One client cannot take the server down: requests are prepared (large bodies parsed, prompt
rendered, grammar compiled) off the event loop under the request's deadline, refused
constraints are remembered, and the compile cache is bounded by bytes.

Two `kaname serve --model random` servers, started together: one with a 2 s
--request-timeout (the 504s), one with room to compile and a small --compile-cache-mb.
"""

from __future__ import annotations

import gc
import json
import os
import random
import re
import string
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from serverproc import ServerProcess

from kaname.cli import _runtime_for_format
from kaname.server import ServerConfig, build_app

CACHE_MB = 24


def big_schema(n: int = 22_000) -> dict[str, Any]:
    """~0.95 MB of JSON Schema (22k properties): seconds to compile, most of it Python (the
    metaschema check), then refused by llguidance as too large."""
    return {"type": "object",
            "properties": {f"property_name_{i:05d}": {"type": "string"} for i in range(n)}}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with ThreadPoolExecutor(2) as pool:
        hasty = pool.submit(ServerProcess, "--model", "random", "--request-timeout", "2")
        roomy = pool.submit(ServerProcess, "--model", "random", "--request-timeout", "120",
                            "--compile-cache-mb", str(CACHE_MB))
    started = [f.result() for f in (hasty, roomy) if f.exception() is None]
    try:
        yield hasty.result(), roomy.result()  # the error of one that did not start
    finally:
        for s in started:
            s.stop()


@pytest.fixture(scope="module")
def hasty(servers) -> ServerProcess:
    return servers[0]


@pytest.fixture(scope="module")
def roomy(servers) -> ServerProcess:
    return servers[1]


def health_while(url: str, request: Callable[[], Any]) -> tuple[Any, list[float]]:
    """Run `request()` on a thread; meanwhile GET /health over and over. Its outcome (result
    or exception) and each /health's latency."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = request()
        except Exception as e:
            box["result"] = e

    thread = threading.Thread(target=run)
    thread.start()
    latencies = []
    with httpx.Client(timeout=30) as client:
        time.sleep(0.3)  # the body is sent and the request being prepared
        while thread.is_alive():
            t = time.monotonic()
            assert client.get(f"{url}/health").status_code == 200
            latencies.append(time.monotonic() - t)
            time.sleep(0.05)
    thread.join()
    return box["result"], latencies


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{url}/metrics").text
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert m, f"{name}{labels} not in /metrics"
    return float(m.group(1))


def test_health_answers_while_a_1mb_schema_compiles_and_its_deadline_is_a_504(hasty):
    client = openai.OpenAI(base_url=f"{hasty.url}/v1", api_key="x", max_retries=0)
    t = time.monotonic()
    error, latencies = health_while(hasty.url, lambda: client.chat.completions.create(
        model="random", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        response_format={"type": "json_schema", "json_schema": {
            "name": "big", "strict": True, "schema": big_schema()}}))
    took = time.monotonic() - t
    assert isinstance(error, openai.APIStatusError) and error.status_code == 504, error
    body = error.response.json()
    assert body["error"]["type"] == "timeout_error" and body["error"]["code"] == "timeout"
    assert "2 s" in body["error"]["message"]
    assert took < 2 + 8  # the deadline (2 s from arrival) with room for a loaded machine
    assert len(latencies) >= 3 and max(latencies) < 1.0, latencies
    # the abandoned compile stops: the idle server spends (almost) no CPU afterwards, where
    # the compile would have gone on for seconds
    time.sleep(0.5)
    before = cpu_seconds(hasty.proc.pid)
    time.sleep(2.0)
    assert cpu_seconds(hasty.proc.pid) - before < 0.3


def health_during(url: str, request: Callable[[], Any]) -> tuple[Any, list[float]]:
    """Poll /health from a thread, then run `request()`: its outcome (result or exception)
    and the latency of each /health sent while it ran."""
    done = threading.Event()
    polls: list[tuple[float, float]] = []  # (sent, latency)

    def poll() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                t = time.monotonic()
                assert client.get(f"{url}/health").status_code == 200
                polls.append((t, time.monotonic() - t))
                time.sleep(0.02)

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.2)  # polling
    start = time.monotonic()
    try:
        outcome = request()
    except Exception as e:
        outcome = e
    end = time.monotonic()
    done.set()
    thread.join()
    return outcome, [latency for sent, latency in polls if start <= sent < end]


def test_health_answers_while_a_large_body_is_parsed(roomy):
    """A 3.7 MB body of 60,000 one-part messages: ~0.8 s of JSON parsing and validation,
    which froze /health for as long when FastAPI did it on the event loop. Its last message
    is refused (preparing so many is another matter): the 400 names it after the whole body is
    validated, in the API's shape. A valid large body is served as usual."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "a"}]}
                                      for _ in range(60_000)]
    messages[-1]["role"] = "robot"
    body = json.dumps({"model": "random", "max_tokens": 1, "messages": messages})
    assert 3_500_000 < len(body) < 4 * 1024 * 1024  # under the body limit
    with httpx.Client(timeout=60) as client:
        r, latencies = health_during(roomy.url, lambda: client.post(
            f"{roomy.url}/v1/chat/completions", content=body,
            headers={"content-type": "application/json"}))
        assert r.status_code == 400, r.text[:300]
        assert r.json()["error"]["param"] == "/messages/59999/role"
        assert max(latencies) < 0.2, latencies  # the parse froze it ~0.8 s on the loop
        assert len(latencies) >= 3, latencies
        # 60,000 one-character parts of one message (1.9 MB): parsed off the loop, answered
        parts = [{"type": "text", "text": "a"}] * 60_000
        r = client.post(f"{roomy.url}/v1/chat/completions", json={
            "model": "random", "max_tokens": 1,
            "messages": [{"role": "user", "content": parts}]})
        assert r.status_code == 200, r.text[:300]
        assert r.json()["usage"]["completion_tokens"] == 1


def test_a_body_still_parsed_at_its_deadline_is_a_504():
    """The parse of a large body counts against the request's deadline (from its arrival),
    as a compile does: at it, a 504 in the API's shape, not once the parse is done (in
    process: a 20 ms timeout against a parse of ~0.3 s, ~0.8 s on the event loop). The
    abandoned parse stops, and turns the garbage collector it paused back on."""
    app = build_app(ServerConfig(model="random", request_timeout=0.02), _runtime_for_format)
    parts = [{"type": "text", "text": "a"}]
    body = json.dumps({"model": "random", "max_tokens": 1, "messages": [
        {"role": "user", "content": parts} for _ in range(60_000)]})
    with TestClient(app) as client:
        t = time.monotonic()
        r = client.post("/v1/messages", content=body,
                        headers={"content-type": "application/json"})
        took = time.monotonic() - t
        assert r.status_code == 504, r.text[:300]
        assert r.json()["error"]["type"] == "timeout_error"
        assert took < 0.2, took
        assert "body parsed" in r.json()["error"]["message"]
        t = time.monotonic()
        while not gc.isenabled() and time.monotonic() - t < 5:
            time.sleep(0.01)
        assert gc.isenabled()


def test_a_504_in_the_anthropic_shape(hasty):
    client = anthropic.Anthropic(base_url=hasty.url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as e:
        client.messages.create(model="random", max_tokens=4,
                               messages=[{"role": "user", "content": "hi"}],
                               tools=[{"name": "big", "description": "many fields",
                                       "input_schema": big_schema()}])
    assert e.value.status_code == 504
    body = e.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "timeout_error"
    assert "request timeout" in body["error"]["message"]


def test_a_refused_constraint_is_answered_again_from_memory(roomy):
    properties: dict[str, Any] = {f"property_name_{i:05d}": {"type": "string"}
                                  for i in range(3000)}
    properties["code"] = {"type": "string", "pattern": "^(?=A)[A-Z]+"}  # look-ahead: refused
    body = {"model": "random", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "response_format": {"type": "json_schema", "json_schema": {
                "name": "refused", "strict": True,
                "schema": {"type": "object", "properties": properties}}}}
    misses = metric(roomy.url, "kaname_compile_cache_total", '{result="miss"}')
    hits = metric(roomy.url, "kaname_compile_cache_total", '{result="hit"}')
    answers, times = [], []
    with httpx.Client(timeout=120) as client:
        for _ in range(2):
            t = time.monotonic()
            answers.append(client.post(f"{roomy.url}/v1/chat/completions", json=body))
            times.append(time.monotonic() - t)
    first, second = answers
    assert first.status_code == second.status_code == 400
    assert first.json() == second.json()
    error = first.json()["error"]
    assert error["param"] == ("/response_format/json_schema/schema/properties/code/pattern")
    assert metric(roomy.url, "kaname_compile_cache_total", '{result="miss"}') == misses + 1
    assert metric(roomy.url, "kaname_compile_cache_total", '{result="hit"}') == hits + 1
    assert times[1] < 1.0 and times[1] < times[0] / 3, times


def test_rss_stays_bounded_over_120_distinct_large_constraints(roomy):
    """100k-character regexes cost ~7 MB each once compiled (docs/benchmarks.md): without a
    bound, 120 of them grow the server by ~800 MB; with a 24 MB cache it levels off."""
    rnd = random.Random(0)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=7)) for _ in range(10_000)]

    def send(k: int) -> int:
        regex = "(" + "|".join(f"{k:03d}{w}" for w in words) + ")"  # 100k chars, distinct
        r = httpx.post(f"{roomy.url}/v1/completions", timeout=120, json={
            "model": "random", "prompt": "x", "max_tokens": 1, "guided_regex": regex})
        return r.status_code

    pid = roomy.proc.pid
    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(send, range(20))) == {200}
        settled = rss_mb(pid)
        assert set(pool.map(send, range(20, 120))) == {200}
    grown = rss_mb(pid) - settled
    assert grown < 64, f"RSS grew {grown:.0f} MB over 100 more constraints"
    assert 0 < metric(roomy.url, "kaname_compile_cache_bytes") <= CACHE_MB << 20
