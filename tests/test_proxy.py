"""kaname serve in front of an upstream (`--upstream`): tool calls through a kaname upstream with
the official openai SDK, stream == non-stream, and the upstream's faults answered fast in
OpenAI's error shape without leaking a generation slot."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from conftest import MASKBENCH, VENDORED, read_rows
from fake_upstreams import OK_TEXT, UNENFORCED_TEXT, FakeUpstream
from serverproc import ServerProcess, free_port

from kaname.chat import prepare_turn
from kaname.errors import ConstraintError
from kaname.formats import get_format
from kaname.grammar import GrammarCompiler
from kaname.runtimes.synthetic import synthetic_tokenizer

MODEL = ("--model", "random", "--format", "qwen3")
N_TOOL_REQUESTS = 120
MAX_TOKENS = 400  # the random model splits forced text as finely as masks allow
FAULT_TIMEOUT = 4.0  # --request-timeout of the proxy in front of the fake upstream

# ---- a small, varied tool set (plus a few JSONSchemaBench Glaiveai2K schemas) ---------------

HANDMADE_TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False},
    "search_flights": {"type": "object", "properties": {
        "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "nonstop": {"type": "boolean"}},
        "required": ["origin", "destination"], "additionalProperties": False},
    "set_alarm": {"type": "object", "properties": {
        "hour": {"type": "integer", "minimum": 0, "maximum": 23},
        "minute": {"type": "integer", "minimum": 0, "maximum": 59},
        "days": {"type": "array", "maxItems": 3, "items": {
            "type": "string", "enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}}},
        "required": ["hour", "minute"], "additionalProperties": False},
    "no_arguments": {"type": "object", "properties": {}, "additionalProperties": False},
    "create_user": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": ["integer", "null"], "minimum": 0, "maximum": 150}},
            "required": ["name"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                 "maxItems": 2}},
        "required": ["user"], "additionalProperties": False},
    "convert": {"type": "object", "properties": {
        "amount": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "mode": {"const": "exact"}},
        "required": ["amount", "mode"], "additionalProperties": False},
}


def _compiles(tok: Any, compiler: GrammarCompiler, name: str, params: dict[str, Any]) -> bool:
    tool = [{"type": "function", "function": {"name": name, "parameters": params,
                                              "strict": True}}]
    try:
        prepare_turn(get_format("qwen3"), [{"role": "user", "content": "x"}], tok, compiler,
                     tools=tool, tool_choice="required")
    except ConstraintError:
        return False
    return True


@pytest.fixture(scope="module")
def tool_pool() -> dict[str, dict[str, Any]]:
    """name -> parameters: the handmade tools and up to 12 Glaiveai2K schemas kaname takes."""
    tok, _ = synthetic_tokenizer(get_format("qwen3").special_tokens)
    compiler = GrammarCompiler(tok)
    pool = dict(HANDMADE_TOOLS)
    # the full set where ../shared/data is present, else the sample vendored in tests/data
    glaive = [row["schema"] for row in read_rows(MASKBENCH if MASKBENCH.is_file() else VENDORED)
              if row["subset"] == "Glaiveai2K" and isinstance(row["schema"], dict)
              and row["schema"].get("type") == "object"]
    rng = random.Random(4)
    for schema in rng.sample(glaive, min(30, len(glaive))):
        if len(pool) >= len(HANDMADE_TOOLS) + 12:
            break
        name = f"glaive_{len(pool) - len(HANDMADE_TOOLS)}"
        if _compiles(tok, compiler, name, schema):
            pool[name] = schema
    assert all(_compiles(tok, compiler, n, HANDMADE_TOOLS[n]) for n in HANDMADE_TOOLS)
    return pool


# ---- servers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def upstream():
    with ServerProcess(*MODEL, "--max-concurrency", "2", "--max-queue", "64") as s:
        yield s


@pytest.fixture(scope="module")
def proxy(upstream):
    with ServerProcess(*MODEL, "--upstream", upstream.url + "/v1", "--upstream-model",
                       "random", "--max-concurrency", "4", "--request-timeout", "60") as s:
        yield s


@pytest.fixture(scope="module")
def client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)


def _tool_request(rng: random.Random, pool: dict[str, dict[str, Any]]) -> dict[str, Any]:
    names = rng.sample(sorted(pool), rng.randint(1, 3))
    # strict: every argument schema is enforced, so every call must validate
    tools = [{"type": "function", "function": {
        "name": n, "description": f"the {n} tool", "parameters": pool[n], "strict": True}}
        for n in names]
    choice: Any = rng.choice(["auto", "auto", "required", "named", "none"])
    if choice == "named":
        choice = {"type": "function", "function": {"name": rng.choice(names)}}
    # the guards a client sets where random text would not end strings and lists by chance
    extra: dict[str, Any] = {"kaname": {"guards": {"max_string_length": 40,
                                                   "max_array_items": 4}}}
    if rng.random() < 0.5:
        extra["chat_template_kwargs"] = {"enable_thinking": False}
    return {"model": "random", "max_tokens": MAX_TOKENS, "seed": rng.randrange(2**31),
            "temperature": rng.choice([0.0, 0.7, 1.0]), "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": rng.random() < 0.5, "extra_body": extra,
            "messages": [{"role": "system", "content": "You call tools."},
                         {"role": "user", "content": f"Please help with task {rng.random()}"}]}


def _check_tool_response(req: dict[str, Any], resp: Any) -> str:
    """The tool_choice / parallel_tool_calls contract and schema-valid arguments."""
    choice = resp.choices[0]
    finish = choice.finish_reason
    calls = choice.message.tool_calls or []
    params = {t["function"]["name"]: t["function"]["parameters"] for t in req["tools"]}
    tc = req["tool_choice"]
    assert finish in ("stop", "tool_calls", "length"), finish
    assert resp.model_extra["kaname"]["enforced"] is True
    if finish == "tool_calls":
        assert calls, "finish_reason tool_calls without calls"
        for call in calls:
            assert call.type == "function"
            assert call.id
            assert call.function.name in params, call.function.name
            if isinstance(tc, dict):
                assert call.function.name == tc["function"]["name"]
            jsonschema.validate(json.loads(call.function.arguments),
                                params[call.function.name])
        if not req["parallel_tool_calls"]:
            assert len(calls) <= 1
        assert len({c.id for c in calls}) == len(calls)
    elif finish == "stop":
        assert not calls
        assert tc == "auto" or tc == "none", f"tool_choice {tc} finished without a call"
    if tc == "none":
        assert not calls and finish != "tool_calls"
    return finish


def test_tool_calls_through_proxy(client, tool_pool):
    rng = random.Random(20261130)
    requests = [_tool_request(rng, tool_pool) for _ in range(N_TOOL_REQUESTS)]

    def one(req: dict[str, Any]) -> str:
        return _check_tool_response(req, client.chat.completions.create(**req))

    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        finishes = list(pool.map(one, requests))
    took = time.monotonic() - t0
    counts = {f: finishes.count(f) for f in ("stop", "tool_calls", "length")}
    print(f"\n{N_TOOL_REQUESTS} tool requests through the proxy in {took:.1f} s: {counts} "
          f"(length share {counts['length'] / N_TOOL_REQUESTS:.0%})")
    assert counts["tool_calls"] >= N_TOOL_REQUESTS // 2
    assert counts["length"] <= N_TOOL_REQUESTS * 0.15


def _reassemble(stream: Any) -> dict[str, Any]:
    """One message from the SDK's chunks: content, reasoning_content, tool calls by index."""
    content, reasoning, finish = "", "", None
    calls: dict[int, dict[str, str]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += tc.id or ""
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    return {"content": content or None, "reasoning": reasoning or None, "finish": finish,
            "calls": [calls[i] for i in sorted(calls)]}


def _message(resp: Any) -> dict[str, Any]:
    choice = resp.choices[0]
    m = choice.message
    return {"content": m.content or None,
            "reasoning": (m.model_extra or {}).get("reasoning_content") or None,
            "finish": choice.finish_reason,
            "calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                      for c in m.tool_calls or []]}


def _without_ids(m: dict[str, Any]) -> dict[str, Any]:
    return {**m, "calls": [{k: v for k, v in c.items() if k != "id"} for c in m["calls"]]}


def test_stream_equals_non_stream_through_proxy(client, tool_pool):
    rng = random.Random(77)
    kinds: dict[str, int] = {}
    for i in range(16):
        req = _tool_request(rng, tool_pool)
        if i % 4 == 3:  # plain chat turns too (content and reasoning only)
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                req.pop(key)
            req["max_tokens"] = 60
        req["temperature"] = 0.8
        plain = _message(client.chat.completions.create(**req))
        streamed = _reassemble(client.chat.completions.create(**req, stream=True))
        assert _without_ids(streamed) == _without_ids(plain), (i, req)
        assert all(c["id"] for c in streamed["calls"])
        kinds[plain["finish"]] = kinds.get(plain["finish"], 0) + 1
    assert kinds.get("tool_calls", 0) >= 3, kinds


def test_max_reasoning_tokens_through_proxy(client, tool_pool):
    """max_reasoning_tokens puts a `max_tokens=` lexeme in the grammar; the kaname upstream
    enforces it, so the proxy's replay must accept what it sends."""
    rng = random.Random(5)
    failures = []
    for _ in range(12):
        req = _tool_request(rng, tool_pool)
        req["extra_body"] = {"max_reasoning_tokens": 40}
        try:
            _check_tool_response(req, client.chat.completions.create(**req))
        except openai.APIStatusError as e:
            failures.append(f"{e.status_code}: {e.message[:200]}")
    assert not failures, failures


# ---- faults of the upstream -----------------------------------------------------------------

@pytest.fixture(scope="module")
def fake_upstream():
    with FakeUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def fault_proxy(fake_upstream):
    """One slot, a short deadline: a fault that leaked the slot would block the next request."""
    with ServerProcess(*MODEL, "--upstream", fake_upstream.url, "--upstream-model", "random",
                       "--max-concurrency", "1", "--max-queue", "4",
                       "--request-timeout", str(FAULT_TIMEOUT)) as s:
        yield s


@pytest.fixture(scope="module")
def fault_client(fault_proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=fault_proxy.url + "/v1", api_key="x", max_retries=0,
                         timeout=30)


WEATHER = [{"type": "function", "function": {"name": "get_weather",
                                             "parameters": HANDMADE_TOOLS["get_weather"]}}]


def _ask(client: openai.OpenAI, text: str, **kw: Any) -> Any:
    return client.chat.completions.create(
        model="random", messages=[{"role": "user", "content": text}], max_tokens=50, **kw)


def _assert_error_shape(body: Any, code: str) -> None:
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] == code, err


def _assert_healthy(client: openai.OpenAI, proxy: ServerProcess) -> None:
    """The one slot is free again: a good request is answered at once, nothing is running."""
    t0 = time.monotonic()
    resp = _ask(client, "hello")
    assert time.monotonic() - t0 < 2.0
    assert resp.choices[0].message.content == OK_TEXT
    assert resp.choices[0].finish_reason == "stop"
    metrics = httpx.get(proxy.url + "/metrics").text
    assert "kaname_active_generations 0.0" in metrics
    assert "kaname_queue_depth 0.0" in metrics


def test_proxy_sends_grammar_upstream(fault_client, fault_proxy, fake_upstream):
    _assert_healthy(fault_client, fault_proxy)
    body = fake_upstream.requests[-1]
    assert body["stream"] is True and body["model"] == "random"
    assert body["skip_special_tokens"] is False
    assert body["max_tokens"] == 50
    assert isinstance(body["structured_outputs"]["grammar"], str)
    assert "start:" in body["structured_outputs"]["grammar"]
    assert body["prompt"].startswith("<|im_start|>user\nhello<|im_end|>")


def _not_enforced_count(proxy: ServerProcess) -> float:
    for line in httpx.get(proxy.url + "/metrics").text.splitlines():
        if line.startswith("kaname_upstream_not_enforced_total "):
            return float(line.split()[1])
    raise AssertionError("kaname_upstream_not_enforced_total not in /metrics")


def test_unenforced_upstream_is_rejected(fault_client, fault_proxy, fake_upstream):
    before = _not_enforced_count(fault_proxy)
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        _ask(fault_client, "FAULT:unenforced", tools=WEATHER, tool_choice="required")
    assert time.monotonic() - t0 < 2.0
    assert info.value.status_code == 502
    _assert_error_shape(info.value.response.json(), "upstream_not_enforced")
    # allowed: the raw text, marked as not enforced
    resp = _ask(fault_client, "FAULT:unenforced", tools=WEATHER, tool_choice="required",
                extra_body={"allow_unenforced": True})
    assert resp.choices[0].message.content == UNENFORCED_TEXT
    assert not resp.choices[0].message.tool_calls
    kaname = resp.model_extra["kaname"]
    assert kaname["enforced"] is False and kaname["not_enforced_reason"]
    assert _not_enforced_count(fault_proxy) == before + 2
    _assert_healthy(fault_client, fault_proxy)


@pytest.mark.parametrize("fault,status,code", [
    ("garbled-line", 502, "upstream_garbled"),
    ("bad-json", 502, "upstream_garbled"),
    ("no-finish", 502, "upstream_garbled"),
    ("error-event", 502, "upstream_error"),
    ("http-500", 502, "upstream_error"),
    ("reset", 502, "upstream_unreachable"),
])
def test_upstream_fault_answered_fast(fault_client, fault_proxy, fault, status, code):
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        _ask(fault_client, f"FAULT:{fault}")
    assert time.monotonic() - t0 < 2.0
    assert info.value.status_code == status
    assert info.value.code == code
    _assert_error_shape(info.value.response.json(), code)
    _assert_healthy(fault_client, fault_proxy)


@pytest.mark.parametrize("fault", ["stall-headers", "stall-silent", "stall-midway"])
def test_stalled_upstream_times_out(fault_client, fault_proxy, fault):
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        _ask(fault_client, f"FAULT:{fault}")
    took = time.monotonic() - t0
    assert FAULT_TIMEOUT - 0.5 < took < FAULT_TIMEOUT + 2.0, took
    assert info.value.status_code == 504
    # the request's deadline (from its arrival), one code wherever it passes
    _assert_error_shape(info.value.response.json(), "timeout")
    _assert_healthy(fault_client, fault_proxy)


def _sse_events(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.parametrize("fault,code,slow", [
    ("bad-json", "upstream_garbled", False),
    ("unenforced", "upstream_not_enforced", False),
    ("stall-headers", "timeout", True),
])
def test_streamed_fault_is_an_error_event(fault_client, fault_proxy, fault, code, slow):
    body = {"model": "random", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": f"FAULT:{fault}"}]}
    if fault == "unenforced":
        body |= {"tools": WEATHER, "tool_choice": "required"}
    t0 = time.monotonic()
    r = httpx.post(fault_proxy.url + "/v1/chat/completions", json=body, timeout=30)
    took = time.monotonic() - t0
    assert took < (FAULT_TIMEOUT + 2.0 if slow else 2.0), took
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(r.text)
    assert events[-1] == "[DONE]"
    _assert_error_shape(events[-2], code)
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-2])
    assert all(c["finish_reason"] is None for e in events[:-2] for c in e["choices"])
    # the SDK raises on the error event
    with pytest.raises(openai.APIError):
        for _ in _ask(fault_client, f"FAULT:{fault}", stream=True,
                      **({"tools": WEATHER, "tool_choice": "required"}
                         if fault == "unenforced" else {})):
            pass
    _assert_healthy(fault_client, fault_proxy)


def test_completions_through_fake_upstream(fault_client, fault_proxy, fake_upstream):
    resp = fault_client.completions.create(model="random", prompt="say it", max_tokens=20)
    assert resp.choices[0].text == OK_TEXT and resp.choices[0].finish_reason == "stop"
    assert fake_upstream.requests[-1]["prompt"] == "say it"
    with pytest.raises(openai.APIStatusError) as info:
        fault_client.completions.create(model="random", prompt="FAULT:bad-json", max_tokens=20)
    assert info.value.status_code == 502 and info.value.code == "upstream_garbled"
    _assert_healthy(fault_client, fault_proxy)


def test_upstream_model_is_discovered():
    """Without --upstream-model the proxy forwards the one model the upstream lists (vLLM
    answered 404 to the proxy's own default name)."""
    with FakeUpstream() as up, ServerProcess(*MODEL, "--upstream", up.url) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["fake-model"]
        client.completions.create(model="fake-model", prompt="say it", max_tokens=20)
        assert up.requests[-1]["model"] == "fake-model"


@pytest.mark.parametrize("models", [["a", "b"], []])
def test_upstream_serving_several_models_needs_upstream_model(models):
    with FakeUpstream() as up:
        up.models = models
        with pytest.raises(RuntimeError) as e:
            ServerProcess(*MODEL, "--upstream", up.url, startup_timeout=60)
        assert f"serves {len(models)} models" in str(e.value)
        assert "exited with 1" in str(e.value) and "--upstream-model" in str(e.value)


def test_upstream_down_is_502_fast():
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with ServerProcess(*MODEL, "--upstream", dead, "--upstream-model", "random",
                       "--max-concurrency", "1", "--request-timeout", str(FAULT_TIMEOUT)) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=30)
        for _ in range(3):  # repeatedly: the one slot is released each time
            t0 = time.monotonic()
            with pytest.raises(openai.APIStatusError) as info:
                _ask(client, "hello")
            assert time.monotonic() - t0 < 2.0
            assert info.value.status_code == 502
            _assert_error_shape(info.value.response.json(), "upstream_unreachable")
        assert "kaname_active_generations 0.0" in httpx.get(s.url + "/metrics").text


def test_streamed_text_survives_retokenization(fault_client):
    """The upstream streams one character per event: `<think>` and multi-character tokens
    form across events. The client must see the text once, split as without streaming."""
    from fake_upstreams import CHARS_ANSWER, CHARS_REASONING

    plain = _message(_ask(fault_client, "FAULT:chars"))
    assert plain["content"] == CHARS_ANSWER
    assert plain["reasoning"].strip() == CHARS_REASONING
    streamed = _reassemble(_ask(fault_client, "FAULT:chars", stream=True))
    assert streamed == plain
