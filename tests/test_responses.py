"""OpenAI's Responses API (`POST /v1/responses`) against a live `kaname serve` (random-logits model
over a vocabulary carrying qwen3's special tokens), through the official openai SDK and
openai-agents: tools, structured output, streaming, the response store, custom tools, errors in
OpenAI's shape, a fuzz of request bodies and the proxy mode."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from serverproc import ServerProcess

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["c", "f"]}},
               "required": ["city", "unit"], "additionalProperties": False}, "strict": True}
SEARCH = {"type": "function", "name": "search", "parameters": {
    "type": "object", "properties": {
        "query": {"type": "string", "maxLength": 30},
        "limit": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["query", "limit"], "additionalProperties": False}, "strict": True}
TOOLS = [WEATHER, SEARCH]
PARAMS = {t["name"]: t["parameters"] for t in TOOLS}
ASK = "Weather in Tokyo, then search for umbrellas."
# a tiny arithmetic language, and a regex one, for custom tools
ARITHMETIC = 'start: expr\nexpr: term (OP term)*\nterm: NUMBER | "(" expr ")"\n' \
             'OP: "+" | "-" | "*"\nNUMBER: /[0-9]{1,3}/\n'
TICKET = "[A-Z]{3}-[0-9]{2,4}"


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=150)


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--model", "random", "--format", "qwen3", "--api-key", "sekrit",
                       "--max-tokens-limit", "2048") as s:
        yield s


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sekrit", max_retries=0)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": "Bearer sekrit"}) as c:
        yield c


def _calls(response) -> list[Any]:
    return [o for o in response.output if o.type == "function_call"]


def _check_calls(response, allowed: set[str]) -> None:
    for call in _calls(response):
        assert call.name in allowed
        jsonschema.validate(json.loads(call.arguments), PARAMS[call.name])
        assert call.call_id and call.id.startswith("fc_") and call.status == "completed"


# ---- the response object ---------------------------------------------------------------------

def test_text_response_object_echo_and_store(client, http):
    r = client.responses.create(model="random", input="Say hi.", instructions="Be brief.",
                                max_output_tokens=60, temperature=0.7, metadata={"k": "v"},
                                extra_body={"seed": 3})
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "random"
    assert r.status in ("completed", "incomplete")
    assert (r.incomplete_details is not None) == (r.status == "incomplete")
    assert (r.instructions, r.max_output_tokens, r.temperature, r.top_p) == (
        "Be brief.", 60, 0.7, 1.0)
    assert (r.tools, r.tool_choice, r.parallel_tool_calls, r.metadata) == ([], "auto", True,
                                                                          {"k": "v"})
    assert r.text.format.type == "text"
    message = [o for o in r.output if o.type == "message"]
    assert len(message) == 1 and message[0].role == "assistant"
    assert message[0].content[0].type == "output_text" and message[0].content[0].annotations == []
    assert r.output_text == message[0].content[0].text  # computed by the SDK
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 60
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens == 0
    assert u.output_tokens_details.reasoning_tokens >= 0
    assert r.model_extra["kaname"]["enforced"] is True
    # stored by default: GET finds it, DELETE removes it
    assert client.responses.retrieve(r.id).output_text == r.output_text
    assert http.delete(f"/v1/responses/{r.id}").json()["deleted"] is True
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    unstored = client.responses.create(model="random", input="x", max_output_tokens=5,
                                       store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


# ---- tools -----------------------------------------------------------------------------------

@pytest.mark.parametrize("choice", ["required", "named", "allowed"])
def test_tools_by_tool_choice(client, choice):
    tool_choice: Any = {
        "required": "required", "named": {"type": "function", "name": "search"},
        "allowed": {"type": "allowed_tools", "mode": "required",
                    "tools": [{"type": "function", "name": "get_weather"}]}}[choice]
    allowed = {"required": set(PARAMS), "named": {"search"}, "allowed": {"get_weather"}}[choice]
    called = 0
    for seed in range(6):
        r = client.responses.create(model="random", input=ASK, tools=TOOLS,
                                    tool_choice=tool_choice, max_output_tokens=400,
                                    extra_body={"seed": seed})
        _check_calls(r, allowed)
        if r.status == "completed":
            assert _calls(r), "a required call was made"
            called += 1
        ids = [c.call_id for c in _calls(r)]
        assert len(set(ids)) == len(ids)
        assert r.tool_choice is not None and r.tools[0].name == "get_weather"
    assert called >= 4


def test_parallel_false_and_none(client):
    for seed in range(4):
        r = client.responses.create(model="random", input=ASK, tools=TOOLS,
                                    tool_choice="required", parallel_tool_calls=False,
                                    max_output_tokens=400, extra_body={"seed": seed})
        assert len(_calls(r)) <= 1 and r.parallel_tool_calls is False
    r = client.responses.create(model="random", input=ASK, tools=TOOLS, tool_choice="none",
                                max_output_tokens=100, extra_body={"seed": 1})
    assert not _calls(r)


def test_tool_round_trip_resent_or_by_previous_response_id(client):
    first = client.responses.create(model="random", input=ASK, tools=TOOLS,
                                    tool_choice={"type": "function", "name": "get_weather"},
                                    max_output_tokens=400, extra_body={"seed": 0})
    [call] = _calls(first)
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    kwargs: dict[str, Any] = dict(model="random", tools=TOOLS, max_output_tokens=200,
                                  extra_body={"seed": 7})
    chained = client.responses.create(previous_response_id=first.id, input=[answer], **kwargs)
    resent = client.responses.create(
        input=[{"role": "user", "content": ASK},
               *[o.model_dump(exclude_none=True) for o in first.output], answer], **kwargs)
    assert chained.previous_response_id == first.id
    # the same conversation: the same prompt, which holds the tool's answer
    assert chained.usage.input_tokens == resent.usage.input_tokens > first.usage.input_tokens
    assert chained.output_text == resent.output_text
    # a chain of three, through a streamed response
    with client.responses.stream(previous_response_id=chained.id, input="Thanks.",
                                 **kwargs) as s:
        events = list(s)
    final = events[-1].response
    assert final.usage.input_tokens > chained.usage.input_tokens
    assert client.responses.retrieve(final.id).id == final.id
    # an id that is not stored
    for bad in ("resp_nope", client.responses.create(model="random", input="x",
                                                     max_output_tokens=3, store=False).id):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="random", previous_response_id=bad, input="x")
        assert e.value.body["code"] == "previous_response_not_found"
        assert e.value.body["param"] == "/previous_response_id"


def test_structured_output_parse(client):
    parsed = 0
    for seed in range(6):
        r = client.responses.parse(model="random", input="Invent a person.", text_format=Person,
                                   max_output_tokens=300, extra_body={"seed": seed})
        if r.status == "completed":
            assert isinstance(r.output_parsed, Person)
            jsonschema.validate(json.loads(r.output_text), Person.model_json_schema())
            assert r.model_extra["kaname"]["content_valid"] is True
            parsed += 1
    assert parsed >= 4
    objects = 0
    for seed in range(3):
        r = client.responses.create(model="random", input="Any JSON object.", max_output_tokens=300,
                                    text={"format": {"type": "json_object"}},
                                    extra_body={"seed": seed})
        if r.status == "completed":
            assert isinstance(json.loads(r.output_text), dict)
            objects += 1
    assert objects >= 2


def test_reasoning_effort(client):
    off = client.responses.create(model="random", input=ASK, reasoning={"effort": "none"},
                                  max_output_tokens=200, extra_body={"seed": 5})
    assert not [o for o in off.output if o.type == "reasoning"]
    assert off.usage.output_tokens_details.reasoning_tokens == 0
    seen = 0
    for seed in range(4):
        r = client.responses.create(model="random", input=ASK, reasoning={"effort": "high"},
                                    max_output_tokens=200,
                                    extra_body={"seed": seed, "max_reasoning_tokens": 5})
        items = [o for o in r.output if o.type == "reasoning"]
        if items:
            assert r.output[0] is items[0] and items[0].summary == []
            assert items[0].content[0].type == "reasoning_text"
            assert 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
            seen += 1
    assert seen >= 3
    assert r.reasoning.effort == "high"


def test_max_output_tokens_cut_is_incomplete(client):
    text = {"format": {"type": "json_schema", "name": "p", "strict": True,
                       "schema": Person.model_json_schema()}}
    r = client.responses.create(model="random", input="x", text=text, max_output_tokens=3,
                                extra_body={"seed": 0})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens <= 3
    assert all(getattr(o, "status", "incomplete") in ("completed", "incomplete")
               for o in r.output)
    events = list(client.responses.create(model="random", input="x", text=text, stream=True,
                                          max_output_tokens=3, extra_body={"seed": 0}))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


# ---- streaming -------------------------------------------------------------------------------

def _text_of(item: dict[str, Any]) -> str:
    if item["type"] in ("message", "reasoning"):
        return "".join(p["text"] for p in item["content"])
    return item.get("arguments", item.get("input", ""))


def _reassemble(events) -> tuple[list[dict[str, Any]], Any]:
    """Output items rebuilt from the stream's added / delta / done events (checked against
    each other), and the final response."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    items: dict[int, dict[str, Any]] = {}
    texts: dict[int, str] = {}
    open_parts: set[int] = set()
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert e.output_index == len(items)
            items[e.output_index] = e.item.model_dump()
            texts[e.output_index] = ""
            continue
        item = items[e.output_index]
        if hasattr(e, "item_id"):
            assert e.item_id == item["id"]
        if e.type == "response.content_part.added":
            open_parts.add(e.output_index)
        elif e.type.endswith(".delta"):
            assert e.type.split(".")[1] in {"message": "output_text", "reasoning":
                                            "reasoning_text", "function_call":
                                            "function_call_arguments", "custom_tool_call":
                                            "custom_tool_call_input"}[item["type"]]
            if item["type"] in ("message", "reasoning"):
                assert e.output_index in open_parts and e.content_index == 0
            texts[e.output_index] += e.delta
        elif e.type == "response.output_item.done":
            assert e.item.id == item["id"]
            items[e.output_index] = e.item.model_dump()
            assert _text_of(items[e.output_index]) == texts[e.output_index]
        elif e.type.endswith(".done"):
            done = getattr(e, "text", None) or getattr(e, "arguments", None) \
                or getattr(e, "input", None) or getattr(e, "part", None)
            assert done is not None
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    return [items[i] for i in sorted(items)], final.response


def _essence(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(i["type"], i.get("name"), _text_of(i), i.get("status")) for i in items]


def test_stream_equals_non_stream(client):
    compared = set()
    for seed in range(8):
        kwargs: dict[str, Any] = dict(model="random", input=ASK, tools=TOOLS, temperature=1.0,
                                      max_output_tokens=300, extra_body={"seed": seed})
        if seed % 2:  # a reasoning block first
            kwargs |= {"reasoning": {"effort": "low"},
                       "extra_body": {"seed": seed, "max_reasoning_tokens": 8}}
        r = client.responses.create(**kwargs)
        items, final = _reassemble(list(client.responses.create(stream=True, **kwargs)))
        expected = [o.model_dump() for o in r.output]
        assert _essence(items) == _essence(expected) == _essence(
            [o.model_dump() for o in final.output])
        assert (final.status, final.usage.output_tokens) == (r.status, r.usage.output_tokens)
        assert final.model_extra["kaname"]["grammar_hash"] == r.model_extra["kaname"][
            "grammar_hash"]
        compared |= {i["type"] for i in items}
        if r.status == "completed":  # the SDK's own accumulation agrees
            with client.responses.stream(**kwargs) as s:
                assert _essence([o.model_dump() for o in s.get_final_response().output]) == \
                    _essence(expected)
    assert {"message", "function_call", "reasoning"} <= compared


# ---- the parts alone: a failure mid-stream, the store's bounds ----------------------------

def test_an_error_once_streaming_is_response_failed():
    from types import SimpleNamespace

    from kaname.edges.responses import Context, ResponsesRequest
    from kaname.errors import ModelError
    from kaname.formats.items import TextDelta
    from kaname.server.responses_api import ResponseStore, _stream

    async def failing(turn):
        yield TextDelta("content", "half an ans")
        raise ModelError("the model went away")

    turns: Any = SimpleNamespace(stream=failing)
    turn: Any = SimpleNamespace(response_id="abc", created=1)
    ctx = Context(ResponsesRequest(model="m", input="x"), "abc", 1, "m", ())
    store = ResponseStore()

    async def events() -> list[dict[str, Any]]:
        return [e async for e in _stream(turns, turn, ctx, store, None, {})]

    got = asyncio.run(events())
    assert [e["type"] for e in got] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.failed"]
    failed = got[-1]["response"]
    assert failed["status"] == "failed" and "the model went away" in failed["error"]["message"]
    assert failed["output"][0]["content"][0]["text"] == "half an ans"
    assert store.get("resp_abc") is None  # a failed response is not kept


def test_store_is_bounded_lru():
    from kaname.server.responses_api import ResponseStore

    store = ResponseStore(max_responses=2, max_bytes=10_000)
    for i in range(3):
        store.put({"id": f"r{i}", "output": [{"type": "message", "n": i}]}, (),
                  [({"role": "user", "content": "x"}, "/input")], None)
        store.get("r0")  # used: kept, r1 goes first
    assert [store.get(f"r{i}") is not None for i in range(3)] == [True, False, True]
    parent = store.get("r2")
    big = [({"role": "user", "content": "y" * 6000}, "/input")]
    store.put({"id": "r3", "output": []}, parent.chain, big, parent)
    assert store.get("r3").chain[:len(parent.chain)] == parent.chain
    store.put({"id": "r4", "output": []}, (), big, None)  # over 10 kB together: LRU goes
    assert store.get("r3") is None and store.get("r4") is not None
    store.put({"id": "r5", "output": []}, (), big * 2, None)  # alone over the bound
    assert store.get("r5") is None


# ---- errors ----------------------------------------------------------------------------------

def _bad(client, status: type[openai.APIStatusError], **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(status) as e:
        client.responses.create(**{"model": "random", "max_output_tokens": 20, **kwargs})
    body = e.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    return body


def test_errors_name_the_responses_field(client, http):
    assert _bad(client, openai.NotFoundError, model="gpt-4o", input="x")["code"] == \
        "model_not_found"
    unique = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    tool = {"type": "function", "name": "f", "parameters": unique}  # strict by default
    err = _bad(client, openai.BadRequestError, input="x", tools=[WEATHER, tool])
    assert err["param"] == "/tools/1/parameters/properties/tags/uniqueItems"
    assert "uniqueItems" in err["message"]
    err = _bad(client, openai.BadRequestError, input="x", text={"format": {
        "type": "json_schema", "name": "t", "schema": unique, "strict": True}})
    assert err["param"] == "/text/format/schema/properties/tags/uniqueItems"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "x"},
            {"type": "input_image", "image_url": "https://x/y.png"}]}]},
         "/input/0/content/1/type"),
        ({"input": [{"role": "wizard", "content": "x"}]}, "/input/0/role"),
        ({"input": [{"role": "user", "content": "x"},
                     {"type": "function_call", "call_id": "c1", "arguments": "{}"}]},
         "/input/1/name"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
         "/tool_choice"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {
            "type": "allowed_tools", "mode": "auto",
            "tools": [{"type": "function", "name": "get_weather"},
                      {"type": "function", "name": "nope"}]}}, "/tool_choice/tools/1"),
        ({"input": "x", "background": True}, "/background"),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, "/reasoning/effort"),
        ({"input": "x", "include": ["message.output_text.logprobs"]}, "/include/0"),
        ({"input": []}, "/input"),
        ({"input": "x", "tools": [CUSTOM_TOOLS[0] | {"format": {
            "type": "grammar", "syntax": "lark", "definition": "start: undefined_rule"}}]},
         "/tools/0/format/definition"),
    ]
    for kwargs, param in cases:
        assert _bad(client, openai.BadRequestError, **kwargs)["param"] == param, kwargs


def test_field_policy_accepts_and_lists(http):
    """What real clients send that kaname has no meaning for is served and listed with its
    pointer (Codex sends client_metadata, include, prompt_cache_key and hosted tools by
    default), never a 400."""
    r = http.post("/v1/responses", json={
        "model": "random", "max_output_tokens": 10**6, "n": 2, "store": False,
        "client_metadata": {"x-codex-turn": "1"}, "prompt_cache_key": "k",
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "web_search"}, *TOOLS],
        "input": [{"type": "reasoning", "id": "rs_1", "summary": [],
                   "encrypted_content": "gAAA"},
                  {"role": "user", "content": "x"}, {"type": "web_search_call", "id": "w"}]})
    assert r.status_code == 200, r.text
    body = r.json()
    ignored = {i["pointer"]: i["reason"] for i in body["kaname"]["ignored"]}
    assert set(ignored) == {"/n", "/client_metadata", "/prompt_cache_key", "/include/0",
                            "/tools/0", "/input/0", "/input/2"}, ignored
    assert "not offered" in ignored["/tools/0"]
    # an output budget over what the model holds is served up to what fits, and says so
    assert body["kaname"]["budget"]["asked"] == 10**6
    assert body["kaname"]["budget"]["served"] < 10**6


# ---- custom tools (Lark and regex grammars) --------------------------------------------------

CUSTOM_TOOLS = [
    {"type": "custom", "name": "calc", "description": "Evaluates arithmetic",
     "format": {"type": "grammar", "syntax": "lark", "definition": ARITHMETIC}},
    {"type": "custom", "name": "ticket", "description": "Opens a ticket",
     "format": {"type": "grammar", "syntax": "regex", "definition": TICKET}},
]


@functools.cache
def _lark_parser(grammar: str) -> tuple[Any, Any]:
    from kaname.formats import get_format
    from kaname.grammar import GrammarCompiler, Lark
    from kaname.runtimes.synthetic import synthetic_tokenizer

    tok, _ = synthetic_tokenizer(get_format("qwen3").special_tokens)
    return GrammarCompiler(tok).compile(Lark(grammar)), tok


def _in_lark(text: str, grammar: str) -> bool:
    """Whether `text` parses with `grammar`, by llguidance's parser alone (not the turn's)."""
    from kaname.grammar.compiler import accepts

    return accepts(*_lark_parser(grammar), text)


@pytest.mark.parametrize("name", ["calc", "ticket"])
def test_custom_tool_input_follows_its_grammar(client, name):
    inputs = []
    for seed in range(4):
        r = client.responses.create(model="random", input="2+3*4, and open a ticket.",
                                    tools=CUSTOM_TOOLS, tool_choice={"type": "custom",
                                                                     "name": name},
                                    max_output_tokens=300, extra_body={"seed": seed})
        assert not _calls(r), "a custom tool is not called as a function"
        calls = [o for o in r.output if o.type == "custom_tool_call"]
        if r.status == "completed":
            assert calls
        for call in calls:
            assert call.name == name and call.call_id
            inputs.append(call.input)
    assert len(inputs) >= 3
    for text in inputs:
        assert (_in_lark(text, ARITHMETIC) if name == "calc" else re.fullmatch(TICKET, text)), \
            text
    # streamed, and answered back through custom_tool_call_output
    events = list(client.responses.create(model="random", input="x", tools=CUSTOM_TOOLS,
                                          tool_choice={"type": "custom", "name": name},
                                          stream=True, max_output_tokens=300,
                                          extra_body={"seed": 0}))
    items, final = _reassemble(events)
    [call] = [i for i in items if i["type"] == "custom_tool_call"]
    assert any(e.type == "response.custom_tool_call_input.done" for e in events)
    after = client.responses.create(model="random", previous_response_id=final.id,
                                    tools=CUSTOM_TOOLS, max_output_tokens=50, input=[
                                        {"type": "custom_tool_call_output",
                                         "call_id": call["call_id"], "output": "ok"}])
    assert after.usage.input_tokens > final.usage.input_tokens


# ---- openai-agents ---------------------------------------------------------------------------

def test_openai_agents_runs_to_completion(server):
    from agents import (
        Agent,
        ModelSettings,
        RunHooks,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    class Forecast(BaseModel):
        city: str = Field(max_length=20)
        temperature_c: int = Field(ge=-50, le=60)

    looked_up: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        looked_up.append(city)
        return f"sunny in {city}, 21 C"

    class AnswerAfterTheTool(RunHooks):
        """The random model would call tools forever: after one, the agent must answer."""

        async def on_tool_end(self, context, agent, tool, result) -> None:  # type: ignore
            agent.model_settings = dataclasses.replace(agent.model_settings, tool_choice="none")

    async def run(seed: int) -> Any:
        agent = Agent(name="forecaster", instructions="Answer with the forecast.",
                      model="random", tools=[get_weather], output_type=Forecast,
                      reset_tool_choice=False,
                      model_settings=ModelSettings(tool_choice="required", max_tokens=300,
                                                   extra_body={"seed": seed}))
        return await Runner.run(agent, "Weather in Tokyo?", max_turns=4,
                                hooks=AnswerAfterTheTool())

    async def both() -> list[Any]:
        # one event loop for the client's connections
        set_default_openai_client(openai.AsyncOpenAI(base_url=f"{server.url}/v1",
                                                     api_key="sekrit", max_retries=0))
        set_tracing_disabled(True)
        return [await run(seed) for seed in range(2)]

    calls = 0
    for result in asyncio.run(both()):
        assert isinstance(result.final_output, Forecast)
        kinds = [type(i).__name__ for i in result.new_items]
        # the first turn calls the tool (once, or in parallel), each call gets its output
        first = kinds.index("ToolCallOutputItem")
        assert first >= 1 and set(kinds[:first]) == {"ToolCallItem"}
        assert kinds.count("ToolCallItem") == kinds.count("ToolCallOutputItem")
        assert kinds[-1] == "MessageOutputItem"
        calls += kinds.count("ToolCallItem")
    assert len(looked_up) == calls >= 2


# ---- fuzz ------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3000) | st.floats(-3, 3, allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)

# valid bodies (with values that are each a known error: an image part, an unknown tool...),
# then a few mutations: a value anywhere replaced by any JSON, or a field added
_parts = st.lists(st.fixed_dictionaries({
    "type": st.sampled_from(["input_text", "input_text", "output_text", "input_image"]),
    "text": st.text(max_size=8)}), min_size=1, max_size=2)
_items = st.one_of(
    st.fixed_dictionaries({
        "role": st.sampled_from(["user", "user", "system", "developer", "assistant"]),
        "content": st.text(max_size=8) | _parts}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.just("c1"),
                           "name": st.sampled_from(["get_weather", "search"]),
                           "arguments": st.sampled_from(['{"city": "x"}', "{"])}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call_output",
                                                    "custom_tool_call_output"]),
                           "call_id": st.just("c1"), "output": st.text(max_size=5) | _parts}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.just([]),
                           "content": st.just([{"type": "reasoning_text", "text": "hm"}])}),
    st.fixed_dictionaries({"type": st.just("custom_tool_call"), "call_id": st.just("c2"),
                           "name": st.just("calc"), "input": st.just("1+2")}),
    st.fixed_dictionaries({"type": st.sampled_from(["item_reference", "web_search_call"]),
                           "id": st.just("x")}))
_fields = {
    "instructions": st.text(max_size=8),
    "tools": st.lists(st.sampled_from([WEATHER, SEARCH, *CUSTOM_TOOLS]), max_size=3,
                      unique_by=lambda t: t["name"]),
    "tool_choice": st.sampled_from([
        "auto", "required", "none", {"type": "function", "name": "get_weather"},
        {"type": "custom", "name": "calc"},
        {"type": "allowed_tools", "mode": "auto",
         "tools": [{"type": "function", "name": "search"}]}]),
    "text": st.fixed_dictionaries({"format": st.sampled_from([
        {"type": "json_object"}, {"type": "text"},
        {"type": "json_schema", "name": "p", "schema": Person.model_json_schema()}])}),
    "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["none", "low"])}),
    "temperature": st.floats(0, 2, allow_nan=False),
    "stream": st.booleans(),
    "store": st.booleans(),
    "include": st.just(["reasoning.encrypted_content"]),
    "parallel_tool_calls": st.booleans(),
    "metadata": st.just({"k": "v"}),
    "truncation": st.sampled_from(["auto", "disabled"]),
    "seed": st.integers(0, 9),
}
_bodies = st.fixed_dictionaries(
    {"model": st.just("random"), "max_output_tokens": st.integers(1, 12),
     "input": st.text(max_size=8) | st.lists(_items, min_size=1, max_size=4)},
    optional=_fields)
_mutations = st.lists(st.tuples(st.integers(0, 10**6), _json,
                                st.sampled_from([None, "n", "previous_response_id",
                                                 "background", "tools"])), max_size=2)


def _mutate(body: dict[str, Any], pick: int, value: Any, add: str | None) -> None:
    """Replace the value at the `pick`-th place in `body` by `value`; or add field `add`."""
    if add is not None:
        body[add] = value
        return
    places: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        for key in (range(len(node)) if isinstance(node, list) else list(node)):
            places.append((node, key))
            if isinstance(node[key], dict | list):
                walk(node[key])

    walk(body)
    node, key = places[pick % len(places)]
    node[key] = value


def _check_answer(r: httpx.Response, body: Any) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500], body)
    if r.status_code >= 400:
        err = r.json()
        assert set(err) == {"error"} and set(err["error"]) == {"message", "type", "param",
                                                               "code"}, err
        return
    if r.headers["content-type"].startswith("text/event-stream"):
        blocks = [b for b in r.text.split("\n\n") if b.strip()]
        events = []
        for block in blocks:
            name, data = block.split("\n", 1)
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            events.append(event)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        last = events[-1]
        assert last["type"] in ("response.completed", "response.incomplete",
                                "response.failed"), last
        if last["type"] == "response.failed":
            assert set(last["response"]["error"]) == {"code", "message"}
        return
    assert r.json()["object"] == "response"


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_bodies, mutations=_mutations)
def test_fuzzed_bodies_are_never_a_5xx(http, body, mutations):
    body = json.loads(json.dumps(body))  # a copy: the tools are shared constants
    for pick, value, add in mutations:
        _mutate(body, pick, value, add)
    _check_answer(http.post("/v1/responses", json=body), body)


# ---- proxy mode ------------------------------------------------------------------------------

def test_through_a_proxy(server):
    with ServerProcess("--model", "random", "--format", "qwen3", "--upstream",
                       server.url + "/v1", "--upstream-model", "random",
                       "--upstream-api-key", "sekrit") as proxy:
        c = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0)
        made = 0
        for seed in range(3):
            r = c.responses.create(model="random", input=ASK, tools=TOOLS,
                                   tool_choice="required", max_output_tokens=400,
                                   extra_body={"seed": seed})
            assert r.model_extra["kaname"]["enforced"] is True
            _check_calls(r, set(PARAMS))
            made += len(_calls(r))
        assert made >= 2


# ---- review findings ---------------------------------------------------------------------------

def test_a_cut_call_does_not_break_the_conversation(client):
    """A function call cut by max_output_tokens is stored with partial arguments; continuing
    from that response leaves it out instead of refusing the server's own output."""
    cut = None
    for seed in range(12):
        # the call's forced head alone takes ~18 tokens of this vocabulary
        r = client.responses.create(model="random", input=ASK, tools=TOOLS,
                                    tool_choice="required", max_output_tokens=22 + seed % 4,
                                    reasoning={"effort": "none"}, extra_body={"seed": seed})
        if r.status == "incomplete" and _calls(r):
            cut = r
            break
    assert cut is not None, "no seed cut a call short"
    with pytest.raises(ValueError):
        json.loads(_calls(cut)[0].arguments)
    after = client.responses.create(model="random", previous_response_id=cut.id,
                                    input="go on", max_output_tokens=20)
    assert after.status in ("completed", "incomplete")


def test_custom_tool_format_errors_point_at_the_flat_format(http):
    body = {"model": "random", "input": "x", "tools": [
        {"type": "custom", "name": "t", "format": {"type": "grammar", "syntax": "perl",
                                                   "definition": "x"}}]}
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith("/tools/0/format/syntax"), r.json()


def test_namespace_tools_and_outputs_matched_by_name(http):
    """Codex's `namespace` tools: their functions are offered, a call carries its namespace
    back, and an output sent with the call's name (and namespace) instead of its call_id is
    matched to the call, streamed or not."""
    spawn = {"type": "function", "name": "spawn_agent", "strict": False,
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                            "required": ["task"], "additionalProperties": False}}
    tools = [{"type": "namespace", "name": "multi_agent_v1", "tools": [spawn]},
             {"type": "web_search"}]
    for seed in range(3):
        r = http.post("/v1/responses", json={
            "model": "random", "input": "go", "tools": tools, "tool_choice": "required",
            "parallel_tool_calls": False, "max_output_tokens": 200, "seed": seed})
        assert r.status_code == 200, r.text
        calls = [i for i in r.json()["output"] if i["type"] == "function_call"]
        if not calls or r.json()["status"] != "completed":
            continue
        (call,) = calls
        assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")
        assert json.loads(call["arguments"]).keys() == {"task"}
        # the output names the call instead of giving its call_id (as some of Codex's do)
        history = [{"role": "user", "content": "go"}, call,
                   {"type": "function_call_output", "name": "spawn_agent",
                    "namespace": "multi_agent_v1", "output": "spawned"}]
        base = {"model": "random", "input": history, "tools": tools, "max_output_tokens": 5,
                "seed": 0}
        by_name = http.post("/v1/responses", json=base)
        assert by_name.status_code == 200, by_name.text
        from kaname.edges.responses import ResponsesRequest, to_turn
        from kaname.formats.items import ToolResult

        turn = to_turn(ResponsesRequest.model_validate(base), ())
        (result,) = [i for i in turn.messages if isinstance(i, ToolResult)]
        assert (result.call_id, result.at) == (call["call_id"], "/input/2")
        orphan = http.post("/v1/responses", json={**base, "input": [
            history[0], {"type": "function_call_output", "output": "x"}]})
        assert orphan.status_code == 400 and orphan.json()["error"]["param"] == "/input/1/call_id"
        return
    raise AssertionError("no seed gave a completed call")
