"""`kaname serve` through the official openai SDK, against a live server on 127.0.0.1
(random-logits model over a vocabulary carrying qwen3's special tokens)."""

from __future__ import annotations

import json
import random
import string
from collections import Counter

import httpx
import jsonschema
import openai
import pytest
import rfc3987
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict
from serverproc import ServerProcess

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 30}, "limit": {"type": "integer",
                                                                  "minimum": 1, "maximum": 9}},
        "required": ["query", "limit"], "additionalProperties": False}}}
TOOLS = [WEATHER, SEARCH]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "Weather in Tokyo, then search for umbrellas."}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    age: int


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--model", "random", "--format", "qwen3", "--api-key", "sekrit",
                       "--max-tokens-limit", "2048") as s:
        yield s


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sekrit", max_retries=0)


def _check_calls(message, allowed: set[str]) -> None:
    for call in message.tool_calls or []:
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["random"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}  # no key needed


def test_json_schema_content(client):
    for seed in range(6):
        r = client.chat.completions.create(
            model="random", messages=MESSAGES, seed=seed, max_tokens=400,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "schema": PERSON,
                                             "strict": True}})
        choice = r.choices[0]
        if choice.finish_reason == "length":
            continue
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        assert r.usage.completion_tokens > 0
        assert r.model_extra["kaname"]["enforced"] is True


def test_parse_with_pydantic_model(client):
    parsed = 0
    for seed in range(6):
        r = client.chat.completions.parse(model="random", messages=MESSAGES,
                                          response_format=Person, seed=seed, max_tokens=400)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(r.choices[0].message.parsed, Person)
            parsed += 1
    assert parsed >= 3


@pytest.mark.parametrize("choice", ["auto", "required", "get_weather"])
def test_tools_by_tool_choice(client, choice):
    tool_choice = choice if choice in ("auto", "required") else {
        "type": "function", "function": {"name": choice}}
    allowed = {choice} if choice not in ("auto", "required") else set(PARAMS)
    finishes = []
    for seed in range(8):
        r = client.chat.completions.create(model="random", messages=MESSAGES, tools=TOOLS,
                                           tool_choice=tool_choice, seed=seed, max_tokens=400)
        c = r.choices[0]
        finishes.append(c.finish_reason)
        _check_calls(c.message, allowed)
        if c.finish_reason == "tool_calls":
            assert c.message.tool_calls
            ids = [t.id for t in c.message.tool_calls]
            assert len(set(ids)) == len(ids)
        if choice != "auto":
            assert c.finish_reason in ("tool_calls", "length")
    assert finishes.count("tool_calls") >= 4


def test_parallel_false_allows_at_most_one_call(client):
    for seed in range(6):
        r = client.chat.completions.create(model="random", messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           seed=seed, max_tokens=400)
        assert len(r.choices[0].message.tool_calls or []) <= 1


def test_tool_choice_none_makes_no_calls(client):
    r = client.chat.completions.create(model="random", messages=MESSAGES, tools=TOOLS,
                                       tool_choice="none", seed=1, max_tokens=200)
    assert not r.choices[0].message.tool_calls


def _streamed(client, **kwargs):
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in client.chat.completions.create(stream=True,
                                                stream_options={"include_usage": True},
                                                **kwargs):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return content or None, reasoning or None, [calls[i] for i in sorted(calls)], finish, usage


def test_stream_equals_non_stream(client):
    compared_calls = 0
    # at least 8 seeds, and as many more as it takes to compare 3 tool calls (which seeds
    # call tools depends on the sampler's draws, not on what this test checks)
    for seed in range(40):
        if seed >= 8 and compared_calls >= 3:
            break
        kwargs = dict(model="random", messages=MESSAGES, tools=TOOLS, seed=seed,
                      max_tokens=400, temperature=0.9)
        r = client.chat.completions.create(**kwargs)
        m = r.choices[0].message
        content, reasoning, calls, finish, usage = _streamed(client, **kwargs)
        assert finish == r.choices[0].finish_reason
        assert content == m.content
        assert reasoning == (m.model_extra or {}).get("reasoning_content")
        assert [(c["name"], c["arguments"]) for c in calls] == [
            (t.function.name, t.function.arguments) for t in m.tool_calls or []]
        assert all(c["id"] for c in calls)
        assert usage.completion_tokens == r.usage.completion_tokens
        compared_calls += len(calls)
    assert compared_calls >= 3


def test_reasoning_switch(client):
    off = client.chat.completions.create(model="random", messages=MESSAGES, seed=5,
                                         max_tokens=300, reasoning_effort="none")
    assert (off.choices[0].message.model_extra or {}).get("reasoning_content") is None
    seen = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model="random", messages=MESSAGES, seed=seed, max_tokens=300,
            reasoning_effort="high", extra_body={"max_reasoning_tokens": 5})
        # required reasoning, cut by the budget of 5 tokens: content follows
        reasoning = (r.choices[0].message.model_extra or {}).get("reasoning_content")
        seen += reasoning is not None
        if r.choices[0].finish_reason == "stop":
            assert r.choices[0].message.content is not None
    assert seen >= 3  # an empty block reads as None
    r = client.chat.completions.create(
        model="random", messages=MESSAGES, seed=1, max_tokens=300,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert r.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("args", [("--format", "qwen3", "--reasoning", "off"),
                                  ("--format", "hermes")])
def test_a_model_that_does_not_reason_serves_a_reasoning_request_without(args):
    """The grammar side (no `<think>` is accepted) is test_hermes_is_qwen3_without_reasoning;
    here the HTTP side: agents send an effort whatever the model, so asking such a server for
    reasoning is served without it and reported (field policy), not refused."""
    with ServerProcess("--model", "random", *args) as s:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0)
        off = c.chat.completions.create(model="random", messages=MESSAGES, max_tokens=5,
                                        reasoning_effort="none")
        assert off.choices[0].finish_reason in ("stop", "length")
        assert off.model_extra["kaname"]["ignored"] == []
        for extra, param in (({"reasoning_effort": "high"}, "/reasoning_effort"),
                             ({"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
                              "/chat_template_kwargs/enable_thinking")):
            r = c.chat.completions.create(model="random", messages=MESSAGES, max_tokens=20,
                                          seed=1, **extra)
            assert getattr(r.choices[0].message, "reasoning_content", None) is None
            ignored = r.model_extra["kaname"]["ignored"]
            assert [i["pointer"] for i in ignored] == [param], ignored
            assert "without reasoning" in ignored[0]["reason"]


def test_reasoning_for_a_format_without_it_fails_at_start():
    with pytest.raises(RuntimeError) as e:
        ServerProcess("--model", "random", "--format", "hermes", "--reasoning", "required")
    assert "exited with 2" in str(e.value) and "has no reasoning block" in str(e.value)


def test_server_can_require_reasoning():
    with ServerProcess("--model", "random", "--format", "qwen3", "--reasoning",
                       "required") as s:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0)
        seen = 0
        for seed in range(4):
            r = c.chat.completions.create(model="random", messages=MESSAGES, seed=seed,
                                          max_tokens=200, extra_body={"max_reasoning_tokens": 5})
            seen += (r.choices[0].message.model_extra or {}).get("reasoning_content") is not None
        assert seen >= 3  # an empty block reads as None
        off = c.chat.completions.create(model="random", messages=MESSAGES, seed=0, max_tokens=60,
                                        reasoning_effort="none")
        assert (off.choices[0].message.model_extra or {}).get("reasoning_content") is None


def test_unsupported_strict_schema_is_400_naming_keyword(client):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="random", messages=MESSAGES, max_tokens=50,
            response_format={"type": "json_schema", "json_schema": {
                "name": "t", "schema": schema, "strict": True}})
    err = e.value.body
    assert "uniqueItems" in err["message"]
    assert err["param"] == "/response_format/json_schema/schema/properties/tags/uniqueItems"
    bad_tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"not": {"pattern": "^a"}}}}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=MESSAGES, tools=[bad_tool],
                                       max_tokens=50)
    assert e.value.body["param"].startswith("/tools/0/function/parameters/properties/x")


def test_lenient_schema_reports_what_it_does_not_enforce(client):
    """strict unset (OpenAI's default): the supported part is enforced, the rest is named in
    kaname.not_enforced and post-checked (content_valid)."""
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3,
                 "uniqueItems": True}}, "required": ["tags"], "additionalProperties": False}
    seen = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model="random", messages=MESSAGES, seed=seed, max_tokens=300,
            response_format={"type": "json_schema", "json_schema": {"name": "t",
                                                                    "schema": schema}})
        ext = r.model_extra["kaname"]
        assert ext["not_enforced"] == [{
            "keyword": "uniqueItems",
            "pointer": "/response_format/json_schema/schema/properties/tags/uniqueItems"}]
        if r.choices[0].finish_reason == "stop":
            tags = json.loads(r.choices[0].message.content)["tags"]
            assert ext["content_valid"] is (len(set(tags)) == len(tags))
            seen += 1
    assert seen >= 2


def test_bad_requests_get_openai_errors(server, client):
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=MESSAGES, n=2)
    assert e.value.body["param"] == "/n"
    # a budget over what the server gives is served up to it, and says so (field policy)
    r = client.chat.completions.create(model="random", messages=MESSAGES, max_tokens=10**6)
    assert r.model_extra["kaname"]["budget"]["asked"] == 10**6
    assert r.usage.completion_tokens <= r.model_extra["kaname"]["budget"]["served"] < 10**6
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=MESSAGES, tools=TOOLS,
                                       tool_choice={"type": "function",
                                                    "function": {"name": "nope"}})
    assert e.value.body["param"] == "/tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=[{"role": "wizard",
                                                                  "content": "hi"}])
    assert e.value.body["param"].startswith("/messages/0")
    # pointers name the request's fields, not pydantic's union members
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=MESSAGES,
                                       tools=[{"type": "function"}])
    assert e.value.body["param"] == "/tools/0/function"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=[
            *MESSAGES, {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                                                             "function": {"name": "f",
                                                                          "arguments": "{"}}]},
            {"role": "user", "content": "and?"}])
    assert e.value.body["param"] == "/messages/1/tool_calls/0/function/arguments"
    headers = {"Authorization": "Bearer sekrit", "Content-Type": "application/json"}
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", headers=headers)
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param",
                                                               "code"}
    r = httpx.post(f"{server.url}/v1/chat/completions", headers=headers,
                   content=b'{"model": "random", "messages": [{"role": "user", "content": "'
                   + b"x" * (5 * 1024 * 1024) + b'"}]}')
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "body_too_large"


def test_length_finish_keeps_what_was_written(client):
    r = client.chat.completions.create(
        model="random", messages=MESSAGES, max_tokens=3, seed=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "p", "schema": PERSON, "strict": True}})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens <= 3


def test_completions_with_structured_outputs(client):
    r = client.completions.create(model="random", prompt="Answer: ", max_tokens=50, seed=1,
                                  extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].text in ("yes", "no")
    r = client.completions.create(model="random", prompt="Id: ", max_tokens=50, seed=2,
                                  extra_body={"structured_outputs": {"regex": "[A-Z]{3}-[0-9]{2}"}})
    assert len(r.choices[0].text) == 6 and r.choices[0].text[3] == "-"
    r = client.completions.create(model="random", prompt="{", max_tokens=300, seed=3,
                                  extra_body={"structured_outputs": {"json": PERSON}})
    if r.choices[0].finish_reason == "stop":
        jsonschema.validate(json.loads(r.choices[0].text), PERSON)
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="random", prompt="Answer: ", max_tokens=50, seed=1, stream=True,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}}) if c.choices)
    assert text in ("yes", "no")
    r = client.completions.create(model="random", prompt="x", max_tokens=20, seed=4,
                                  extra_body={"ebnf": 'start: "a" /[0-9]{2}/ "z"'})  # SGLang
    assert r.choices[0].text[0] == "a" and r.choices[0].text[-1] == "z"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="random", prompt="x", max_tokens=5,
                                  extra_body={"structured_outputs": {"regex": "(?<=a)b"}})
    with pytest.raises(openai.BadRequestError) as e:  # two constraints: which one?
        client.completions.create(model="random", prompt="x", max_tokens=5,
                                  extra_body={"ebnf": 'start: "a"', "guided_regex": "b"})
    assert e.value.body["param"]


def test_metrics(server):
    text = httpx.get(f"{server.url}/metrics",
                     headers={"Authorization": "Bearer sekrit"}).text
    assert 'kaname_requests_total{endpoint="/v1/chat/completions",status="200"}' in text
    assert "kaname_mask_seconds_count" in text
    assert 'kaname_compile_cache_total{result="hit"}' in text
    assert "kaname_queue_depth" in text


def _request_counts(text: str) -> dict[tuple[str, str], float]:
    return {(s.labels["endpoint"], s.labels["status"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "kaname_requests" for s in family.samples
            if s.name == "kaname_requests_total"}


def test_metrics_stay_bounded_under_random_paths(server):
    """2,000 requests to random paths, with the key and without, add at most a series per
    status under one "unmatched" label, not one per path; real routes count under their
    template, 401s before routing included."""
    rng = random.Random(21)
    auth = {"Authorization": "Bearer sekrit"}
    alphabet = string.ascii_letters + string.digits + "-._~%"
    sent: Counter[str] = Counter()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        first = http.get("/metrics", headers=auth).text
        for i in range(2000):
            path = "/" + "/".join(
                "".join(rng.choices(alphabet, k=rng.randint(1, 12))).replace("%", "%25")
                for _ in range(rng.randint(1, 4)))
            if rng.random() < 0.3:
                path = "/v1/z" + path  # under the API's prefix, still no route
            keyed = i % 2 == 0
            r = http.request(rng.choice(["GET", "POST", "DELETE"]), path,
                             headers=auth if keyed else {})
            assert r.status_code == (404 if keyed else 401), (path, r.text)
            sent["404" if keyed else "401"] += 1
        for _ in range(5):
            assert http.get("/v1/models", headers=auth).status_code == 200
        assert http.get("/v1/models").status_code == 401
        for n in range(3):
            assert http.get(f"/v1/responses/resp_{n}", headers=auth).status_code == 404
        assert http.post("/v1/models", headers=auth).status_code == 405
        last = http.get("/metrics", headers=auth).text
    before, after = _request_counts(first), _request_counts(last)

    def grew(endpoint: str, status: str) -> float:
        return after.get((endpoint, status), 0) - before.get((endpoint, status), 0)

    # the 2,000 paths add two series; the rest are the real requests above
    assert set(after) - set(before) <= {
        ("unmatched", "401"), ("unmatched", "404"), ("/v1/models", "200"),
        ("/v1/models", "401"), ("/v1/models", "405"), ("/v1/responses/{response_id}", "404"),
        ("/metrics", "200")}, set(after) - set(before)
    assert len(last) - len(first) < 2000, "per-path series in /metrics"
    assert grew("unmatched", "401") == sent["401"] and grew("unmatched", "404") == sent["404"]
    assert grew("/v1/models", "200") == 5 and grew("/v1/models", "401") == 1
    assert grew("/v1/models", "405") == 1
    assert grew("/v1/responses/{response_id}", "404") == 3
    assert grew("/metrics", "200") == 1  # the first scrape, counted once it was answered


def test_proxy_with_tokenizer_json_and_sglang_dialect(server, tmp_path):
    """A proxy whose vocabulary comes from a tokenizer.json, sending the grammar as SGLang's
    `ebnf`, in front of the random server (which takes ebnf as kaname does)."""
    from kaname.formats import get_format
    from kaname.runtimes.synthetic import synthetic_tokenizer_json

    text, _ = synthetic_tokenizer_json(get_format("qwen3").special_tokens)
    (tmp_path / "tokenizer.json").write_text(text)
    with ServerProcess("--format", "qwen3", "--upstream", f"{server.url}/v1",
                       "--upstream-model", "random", "--upstream-api-key", "sekrit",
                       "--upstream-dialect", "sglang",
                       "--tokenizer", str(tmp_path / "tokenizer.json")) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0)
        calls = 0
        for seed in range(4):
            r = client.chat.completions.create(model="random", messages=MESSAGES, tools=TOOLS,
                                               tool_choice="required", seed=seed,
                                               max_tokens=400)
            assert r.model_extra["kaname"]["enforced"] is True
            _check_calls(r.choices[0].message, set(PARAMS))
            calls += len(r.choices[0].message.tool_calls or [])
        assert calls >= 3


def test_sigterm_ends_in_flight_generations_after_the_grace_period():
    """Graceful shutdown: a completions stream still running after --graceful-shutdown
    seconds ends with an error event and `[DONE]`, and the process exits promptly instead of
    finishing it (tests/test_server_shutdown.py has the queue and the other APIs)."""
    import os
    import signal
    import threading
    import time

    with ServerProcess("--model", "random", "--format", "qwen3", "--graceful-shutdown", "1",
                       "--max-tokens-limit", "1000000") as s:
        got_first = threading.Event()
        lines: list[str] = []

        def stream() -> None:
            with httpx.stream("POST", f"{s.url}/v1/completions", timeout=60, json={
                    "model": "random", "prompt": "x", "max_tokens": 1000000,
                    "stream": True,  # minutes of generation
                    "structured_outputs": {"regex": "[a-z ]{3000000}"}}) as r:
                for line in r.iter_lines():
                    lines.append(line)
                    got_first.set()

        t = threading.Thread(target=stream, daemon=True)
        t.start()
        assert got_first.wait(30)
        started = time.monotonic()
        os.kill(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=30)
        assert time.monotonic() - started < 10
        t.join(timeout=10)
    events = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    error = json.loads(events[-2])["error"]
    assert error["code"] == "shutting_down" and "grace period" in error["message"], error


# ---- OpenAI's strict per function -----------------------------------------------------------

TAG_PARAMS = {"type": "object", "properties": {
    "url": {"type": "string", "format": "uri-reference", "maxLength": 30},
    # uniqueItems over strings: no finite domain, so llguidance cannot enforce it
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "uniqueItems": True,
             "maxItems": 3}},
    "required": ["url", "tags"], "additionalProperties": False}
TAG_POINTER = "/tools/0/function/parameters/properties"


def _tag_tool(**fn: object) -> list[dict]:
    return [{"type": "function", "function": {"name": "tag_page", "parameters": TAG_PARAMS,
                                              **fn}}]


def _post_check(arguments: str) -> bool:
    cls = jsonschema.validators.validator_for(TAG_PARAMS)
    return cls(TAG_PARAMS, format_checker=cls.FORMAT_CHECKER).is_valid(json.loads(arguments))


def test_non_strict_tool_is_enforced_where_it_can_be_and_post_checked(client):
    """A tool without `strict` (an MCP tool, pydantic's set[...]) is not refused for keywords
    llguidance lacks: they are named, and every call's arguments get the jsonschema verdict."""
    verdicts = []
    for seed in range(8):
        r = client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "tag example.com"}],
            tools=_tag_tool(), tool_choice="required", parallel_tool_calls=False,
            max_tokens=200, seed=seed)
        kaname = r.model_extra["kaname"]
        assert {"keyword": "uniqueItems", "pointer": f"{TAG_POINTER}/tags/uniqueItems"} \
            in kaname["not_enforced"]
        # uri-reference is enforced (RFC 3986 as a pattern), so not named
        assert all(n["pointer"] != f"{TAG_POINTER}/url/format" for n in kaname["not_enforced"])
        message = r.choices[0].message
        assert len(kaname["tool_calls_valid"]) == len(message.tool_calls or [])
        for call, verdict in zip(message.tool_calls or [], kaname["tool_calls_valid"],
                                 strict=True):
            assert verdict == {"id": call.id, "name": "tag_page",
                               "valid": _post_check(call.function.arguments)}
            verdicts.append(verdict["valid"])
        # the grammar still enforces everything else: maxLength, maxItems, no other keys
        for call in message.tool_calls or []:
            args = json.loads(call.function.arguments)
            assert set(args) == {"url", "tags"} and len(args["tags"]) <= 3
            assert all(len(t) <= 6 for t in args["tags"]) and len(args["url"]) <= 30
            assert rfc3987.match(args["url"], rule="URI_reference") is not None, args["url"]
    assert verdicts and True in verdicts  # calls were made and checked


def test_non_strict_tool_verdicts_stream_as_they_answer(client):
    kwargs = {"model": "random", "messages": [{"role": "user", "content": "tag it"}],
              "tools": _tag_tool(), "tool_choice": "required", "max_tokens": 200, "seed": 3}
    plain = client.chat.completions.create(**kwargs).model_extra["kaname"]
    last = [c for c in client.chat.completions.create(**kwargs, stream=True)][-1]
    streamed = last.model_extra["kaname"]
    strip = [{k: v for k, v in x.items() if k != "id"} for x in plain["tool_calls_valid"]]
    assert [{k: v for k, v in x.items() if k != "id"} for x in streamed["tool_calls_valid"]] \
        == strip and strip
    assert streamed["not_enforced"] == plain["not_enforced"]


def test_strict_tool_that_cannot_be_enforced_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "tag it"}],
            tools=_tag_tool(strict=True), max_tokens=20)
    # the first keyword that cannot be enforced, named with its pointer
    param = e.value.body["param"]
    assert param in (f"{TAG_POINTER}/tags/uniqueItems", f"{TAG_POINTER}/url/format"), param
    assert param.rsplit("/", 1)[1] in e.value.body["message"]


# ---- guards per request and per server ------------------------------------------------------

NOTE = {"type": "object", "properties": {"title": {"type": "string"},
                                         "words": {"type": "array", "items": {"type": "string"}}},
        "required": ["title", "words"], "additionalProperties": False}


def _note(client, **extra: object):
    return client.chat.completions.create(
        model="random", messages=[{"role": "user", "content": "a note"}], max_tokens=300,
        response_format={"type": "json_schema", "json_schema": {
            "name": "note", "schema": NOTE, "strict": True}}, **extra)


def test_request_sets_its_own_guards(client):
    for seed in range(4):
        r = _note(client, seed=seed, extra_body={"kaname": {"guards": {
            "max_string_length": 5, "max_array_items": 2}}})
        kaname = r.model_extra["kaname"]
        assert kaname["guards"]["max_string_length"] == 5
        assert kaname["guards"]["max_integer_digits"] == 15  # unset: the server's default
        if r.choices[0].finish_reason == "stop":
            note = json.loads(r.choices[0].message.content)
            assert len(note["title"]) <= 5 and len(note["words"]) <= 2
            assert all(len(w) <= 5 for w in note["words"])
    with pytest.raises(openai.BadRequestError) as e:  # separators that would not be JSON
        _note(client, extra_body={"kaname": {"guards": {"separators": ["x", ":"]}}})
    assert "separators" in e.value.body["param"]


def test_server_guard_defaults_from_the_command_line():
    with ServerProcess("--model", "random", "--format", "qwen3", "--max-string-length", "3",
                       "--max-integer-digits", "off", "--max-depth", "4") as s:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0)
        kaname = _note(c, seed=1).model_extra["kaname"]
        assert kaname["guards"]["max_string_length"] == 3
        assert kaname["guards"]["max_integer_digits"] is None
        assert kaname["guards"]["max_depth"] == 4


def test_a_request_caps_the_depth_of_a_recursive_schema(client):
    """kaname.guards.max_depth: a recursive $ref is followed at most that many times."""
    node = {"type": "object", "properties": {
        "op": {"enum": ["and", "or", "leaf"]},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["op"], "additionalProperties": False}
    schema = {"$defs": {"Node": node}, "$ref": "#/$defs/Node"}

    def depth(n: dict) -> int:
        return 1 + max((depth(c) for c in n.get("children", [])), default=0)

    ended = 0
    for seed in range(6):
        r = client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "a tree"}], max_tokens=300,
            seed=seed, response_format={"type": "json_schema", "json_schema": {
                "name": "tree", "schema": schema, "strict": True}},
            extra_body={"kaname": {"guards": {"max_depth": 2, "max_array_items": 2}}})
        assert r.model_extra["kaname"]["guards"]["max_depth"] == 2
        if r.choices[0].finish_reason == "stop":
            ended += 1
            assert depth(json.loads(r.choices[0].message.content)) <= 3
    assert ended == 6
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="random", messages=[{"role": "user", "content": "a tree"}], max_tokens=8,
            extra_body={"kaname": {"guards": {"max_depth": 0}}})
    assert "max_depth" in e.value.body["param"]


def test_cut_off_content_is_judged_alike_streamed_or_not(client):
    """A json_schema answer cut by max_tokens: content_valid is the same verdict both ways
    (False for cut content, None where the cut came before any content: inside reasoning)."""
    for extra, verdict in (({}, False), ({"reasoning_effort": "low"}, None)):
        kwargs = {"model": "random", "messages": MESSAGES, "max_tokens": 4, "seed": 0,
                  "response_format": {"type": "json_schema", "json_schema": {
                      "name": "p", "schema": PERSON, "strict": True}}, **extra}
        plain = client.chat.completions.create(**kwargs)
        last = list(client.chat.completions.create(**kwargs, stream=True))[-1]
        assert plain.choices[0].finish_reason == "length" == last.choices[0].finish_reason
        assert plain.model_extra["kaname"]["content_valid"] is verdict
        assert last.model_extra["kaname"]["content_valid"] is verdict
