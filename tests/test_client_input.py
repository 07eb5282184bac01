"""No 5xx for client input, as a property, on all four APIs (the app in-process, `--model
random`): lone surrogates anywhere in a valid body, tool names the real APIs refuse, oversized
choices and grammars, fields kaname does not serve, bodies over the size limit. Each is a 4xx
in the API's own error shape naming the JSON pointer of what to change, or is served."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaname.cli import _runtime_for_format
from kaname.server import ServerConfig, build_app

SETTINGS = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
OBJECT = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 8}},
          "required": ["q"], "additionalProperties": False}

# A valid body of each API that holds every kind of client text: system text, messages of each
# role, a tool (name, description, schema), a past call and its result, a schema for the
# content, stop strings, a prompt.
CHAT = {
    "model": "random", "max_tokens": 3, "stop": ["STOP", "END"],
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Look up kaname."}]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "kaname"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a pivot"},
        {"role": "user", "content": "And then?"}],
    "tools": [{"type": "function", "function": {
        "name": "lookup", "description": "Looks a word up.", "parameters": OBJECT}}],
    "response_format": {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": OBJECT, "strict": True}},
}
COMPLETION = {"model": "random", "max_tokens": 3, "prompt": "Say yes or no:",
              "stop": ["\n"], "structured_outputs": {"choice": ["yes", "no", "maybe"]}}
RESPONSES = {
    "model": "random", "max_output_tokens": 3, "instructions": "Be terse.", "stop": ["END"],
    "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look up kaname."}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup",
         "arguments": '{"q": "kaname"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a pivot"},
        {"role": "user", "content": "And then?"}],
    "tools": [
        {"type": "function", "name": "lookup", "description": "Looks a word up.",
         "parameters": OBJECT},
        {"type": "custom", "name": "shell", "description": "Runs a command."},
        {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [
            {"type": "function", "name": "spawn", "description": "Starts one.",
             "parameters": OBJECT}]}],
    "text": {"format": {"type": "json_schema", "name": "answer", "schema": OBJECT}},
}
MESSAGES = {
    "model": "random", "max_tokens": 3, "stop_sequences": ["END"],
    "system": [{"type": "text", "text": "Be terse."}],
    "messages": [
        {"role": "user", "content": "Look up kaname."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "kaname"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a pivot"},
            {"type": "text", "text": "And then?"}]}],
    "tools": [{"name": "lookup", "description": "Looks a word up.", "input_schema": OBJECT}],
    "output_config": {"format": {"type": "json_schema", "schema": OBJECT}},
}
APIS = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETION,
        "/v1/responses": RESPONSES, "/v1/messages": MESSAGES}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = build_app(ServerConfig(model="random", format="qwen3", max_body_bytes=1 << 20),
                    _runtime_for_format)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def post(client: TestClient, path: str, body: Any) -> Any:
    # json.dumps escapes a lone surrogate as "\ud800": valid JSON, as a client sends it
    return client.post(path, content=json.dumps(body),
                       headers={"content-type": "application/json"})


def error_of(path: str, r: Any) -> tuple[str, str | None, str | None]:
    """(message, param, code) of a 4xx, after checking it has the API's error shape."""
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:400])
    body = r.json()
    if path.startswith("/v1/messages"):  # Anthropic's shape: no param; the message names it
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        assert body["error"]["type"] in ("invalid_request_error", "request_too_large",
                                         "not_found_error"), body
        message = body["error"]["message"]
        found = re.search(r"(/[^\s:,;)']*)", message)
        return message, found.group(1) if found else None, None
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    return err["message"], err["param"], err["code"]


def served(r: Any) -> None:
    assert r.status_code == 200, (r.status_code, r.text[:400])


def test_the_valid_bodies_are_served(client):
    for path, body in APIS.items():
        served(post(client, path, body))


# ---- lone surrogates --------------------------------------------------------------------------

def _strings(node: Any, at: str = "") -> Iterator[tuple[str, Any, str | int, bool]]:
    """(pointer of the holder, holder, key, is_key) of every string in a body: values and
    object keys."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield at or "/", node, key, True
            if isinstance(value, str):
                yield f"{at}/{key}", node, key, False
            yield from _strings(value, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                yield f"{at}/{i}", node, i, False
            yield from _strings(value, f"{at}/{i}")


def _with_surrogate(body: dict[str, Any], which: int, offset: int, surrogate: str
                    ) -> tuple[dict[str, Any], str]:
    """`body` with `surrogate` put into its `which`-th string (a value or a key) at `offset`,
    and the pointer an error should name: the string, or the object whose key it is."""
    body = json.loads(json.dumps(body))
    places = list(_strings(body))
    pointer, holder, key, is_key = places[which % len(places)]
    if is_key:
        assert isinstance(key, str)
        k = offset % (len(key) + 1)
        holder[key[:k] + surrogate + key[k:]] = holder.pop(key)
        return body, pointer
    text = holder[key]
    k = offset % (len(text) + 1)
    holder[key] = text[:k] + surrogate + text[k:]
    return body, pointer


@SETTINGS
@given(path=st.sampled_from([*sorted(APIS), "/v1/messages/count_tokens"]),
       which=st.integers(0, 500),
       offset=st.integers(0, 50), surrogate=st.sampled_from(["\ud800", "\udbff", "\udc00",
                                                            "\udfff"]),
       stream=st.booleans())
def test_a_lone_surrogate_anywhere_is_a_400_naming_it(client, path, which, offset, surrogate,
                                                      stream):
    base = APIS.get(path, MESSAGES)  # count_tokens reads a Messages body
    body, pointer = _with_surrogate({**base, "stream": stream}, which, offset, surrogate)
    r = post(client, path, body)
    message, param, _ = error_of(path, r)
    assert r.status_code == 400, r.text
    assert param == pointer, (param, pointer, message)
    assert "surrogate" in message


def _holds_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return any(map(_holds_surrogate, value)) or any(map(_holds_surrogate, value.values()))
    return isinstance(value, list) and any(map(_holds_surrogate, value))


texts = st.sampled_from(["a", "é", "", "x\ud800", "\udfff y"]) | st.text(max_size=3)
bodies = st.recursive(texts | st.integers() | st.none(), lambda inner: st.lists(
    inner, max_size=40) | st.dictionaries(texts, inner, max_size=20), max_leaves=120)


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(body=bodies)
def test_the_surrogate_check_finds_one_where_there_is_one(body):
    """The C encoder's answer, then the walk narrowed by slices: found exactly where a brute
    force finds one, and the pointer leads to a string (or an object's key) that holds it."""
    from kaname.edges.common import lone_surrogate

    found = lone_surrogate(body)
    assert (found is not None) == _holds_surrogate(body)
    if found is None:
        return
    def named(node: Any) -> bool:
        if found[1] == "the string":
            return isinstance(node, str) and _holds_surrogate(node)
        return isinstance(node, dict) and any(map(_holds_surrogate, node))

    # "/" names the body itself (kaname's errors say "/" for the root), and also the key ""
    nodes: list[Any] = [body] if found[0] == "/" else []
    node: Any = body
    try:
        for step in found[0].split("/")[1:]:
            step = step.replace("~1", "/").replace("~0", "~")
            node = node[int(step)] if isinstance(node, list) else node[step]
        nodes.append(node)
    except (KeyError, IndexError, TypeError, ValueError):  # "/" where there is no key ""
        pass
    assert any(map(named, nodes)), (found, body)


def test_paired_surrogates_are_text(client):
    """An escaped pair ("\\ud83d\\ude00") is one character, served like any other."""
    for path, body in APIS.items():
        body = json.loads(json.dumps(body))
        body["stop" if "stop" in body else "stop_sequences"] = ["\U0001F600"]
        served(post(client, path, body))


# ---- tool names -------------------------------------------------------------------------------

BAD_NAMES = st.sampled_from(["", "a\x00b", "two\nlines", "esc\x1b[31m", "has space", "dot.ted",
                             "slash/ed", "名前", "a" * 129]) | st.text(min_size=1, max_size=12)
# where each API's tool definitions keep their names
NAME_AT = {"/v1/chat/completions": ("/tools/0/function/name",),
           "/v1/responses": ("/tools/0/name", "/tools/1/name", "/tools/2/name",
                             "/tools/2/tools/0/name"),
           "/v1/messages": ("/tools/0/name",)}
LIMITS = {"/v1/chat/completions": 64, "/v1/responses": 64, "/v1/messages": 128}


def _set(body: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    *steps, last = pointer.strip("/").split("/")
    node: Any = body
    for step in steps:
        node = node[int(step)] if isinstance(node, list) else node[step]
    node[last] = value
    return body


@SETTINGS
@given(path=st.sampled_from(sorted(NAME_AT)), where=st.integers(0, 3), name=BAD_NAMES)
def test_a_tool_name_the_api_refuses_is_a_400_naming_it(client, path, where, name):
    limit = LIMITS[path]
    if re.fullmatch(f"[a-zA-Z0-9_-]{{1,{limit}}}", name):
        return  # a valid name (test_valid_tool_names_are_served)
    pointer = NAME_AT[path][where % len(NAME_AT[path])]
    r = post(client, path, _set(APIS[path], pointer, name))
    message, param, _ = error_of(path, r)
    assert r.status_code == 400
    assert param == pointer, (param, message)


@settings(max_examples=12, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(sorted(NAME_AT)), name=st.from_regex(r"[a-zA-Z0-9_-]{1,64}",
                                                                   fullmatch=True))
def test_valid_tool_names_are_served(client, path, name):
    body = _set(APIS[path], NAME_AT[path][0], name)
    if path == "/v1/chat/completions":  # the past call names the tool it called
        body["messages"][2]["tool_calls"][0]["function"]["name"] = name
    served(post(client, path, body))


def test_anthropic_takes_names_up_to_128_and_openai_up_to_64(client):
    name = "t" * 100
    served(post(client, "/v1/messages", _set(MESSAGES, "/tools/0/name", name)))
    r = post(client, "/v1/chat/completions", _set(CHAT, "/tools/0/function/name", name))
    assert error_of("/v1/chat/completions", r)[1] == "/tools/0/function/name"


def test_custom_tool_names_in_chat(client):
    body = {**CHAT, "tools": [{"type": "custom", "custom": {"name": "run\ncmd"}}],
            "response_format": None}
    r = post(client, "/v1/chat/completions", body)
    assert error_of("/v1/chat/completions", r)[1] == "/tools/0/custom/name"


def test_agent_tool_names_pass():
    """The tools real agents send (recorded in tests/data/agent_requests) all have names the
    rules accept: the rules refuse nothing a real client sends."""
    from pathlib import Path

    names = []
    for f in Path(__file__).parent.glob("data/agent_requests/**/*.json"):
        data = json.loads(f.read_text())
        for body in (data.get("body", data),) if isinstance(data, dict) else ():
            for tool in body.get("tools") or ():
                names += [t.get("name") for t in (tool, *tool.get("tools", ()))
                          if isinstance(t, dict) and "name" in t]
    assert names, "no recorded agent requests found"
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names), names


# ---- llguidance's limits ----------------------------------------------------------------------

@settings(max_examples=8, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1_990, 6_000), seed=st.integers(0, 2**32), stream=st.booleans(),
       spelling=st.sampled_from(["structured_outputs", "guided_choice"]))
def test_a_choice_of_thousands_of_options_is_served(client, n, seed, stream, spelling):
    options = [f"option {i}" for i in range(n)]
    given_as = {"structured_outputs": {"choice": options}} if spelling == "structured_outputs" \
        else {"guided_choice": options}
    r = post(client, "/v1/completions", {"model": "random", "prompt": "Pick:", "seed": seed,
                                         "max_tokens": 16, "stream": stream, **given_as})
    served(r)
    if stream:
        chunks = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n")
                  if b.startswith("data: {")]
        assert not any("error" in c for c in chunks), chunks[-1]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
    else:
        text, finish = r.json()["choices"][0]["text"], r.json()["choices"][0]["finish_reason"]
    if finish == "stop":
        assert text in options, text


@settings(max_examples=6, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2_001, 4_000), seed=st.integers(0, 2**32), stream=st.booleans())
def test_a_grammar_past_a_parser_limit_is_a_400_naming_it(client, n, seed, stream):
    """A Lark grammar of thousands of rule alternatives (numbers: many stay open after a
    digit) passes its compile and may hit llguidance's row limit while decoding (not where the
    first token is a whole number): then a 400 (streamed, an error event) that names the
    limit and points at the grammar, never a 500."""
    grammar = "start: " + " | ".join(f'"{i}"' for i in range(n))
    r = post(client, "/v1/completions", {"model": "random", "prompt": "Count:", "seed": seed,
                                         "max_tokens": 8, "stream": stream,
                                         "structured_outputs": {"grammar": grammar}})
    assert r.status_code < 500, r.text[:300]
    if stream:
        errors = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n")
                  if b.startswith('data: {"error"')]
        error = errors[0]["error"] if errors else None
    else:
        error = r.json().get("error") if r.status_code != 200 else None
    if error is not None:
        _is_the_row_limit(error)


def _is_the_row_limit(error: dict[str, Any]) -> None:
    assert error["code"] == "grammar_too_complex", error
    assert error["param"] == "/structured_outputs/grammar", error
    assert "max_items_in_row" in error["message"], error


@pytest.mark.parametrize("stream", [False, True])
def test_the_row_limit_while_decoding_is_a_400(client, stream):
    grammar = "start: " + " | ".join(f'"{i}"' for i in range(2001))
    r = post(client, "/v1/completions", {"model": "random", "prompt": "x", "seed": 0,
                                         "max_tokens": 8, "stream": stream,
                                         "structured_outputs": {"grammar": grammar}})
    if stream:
        assert r.status_code == 200
        events = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n")
                  if b.startswith("data: {")]
        assert "error" in events[-1], events[-1]
        _is_the_row_limit(events[-1]["error"])
    else:
        assert r.status_code == 400, r.text[:300]
        _is_the_row_limit(r.json()["error"])


_ROWS = "start: " + " | ".join(f'"{i}"' for i in range(2001))  # past max_items_in_row
LIMITED_TURNS = {  # a custom tool in that grammar, named by tool_choice, beside another tool
    "/v1/chat/completions": ({
        "model": "random", "max_tokens": 24, "reasoning_effort": "none",
        "messages": [{"role": "user", "content": "Count."}],
        "tool_choice": {"type": "custom", "custom": {"name": "count"}},
        "tools": [{"type": "function", "function": {"name": "other", "parameters": OBJECT}},
                  {"type": "custom", "custom": {"name": "count", "format": {
                      "type": "grammar", "grammar": {"syntax": "lark", "definition": _ROWS}}}}]},
        "/tools/1/custom/format/grammar/definition"),
    "/v1/responses": ({
        "model": "random", "max_output_tokens": 24, "reasoning": {"effort": "none"},
        "input": "Count.", "tool_choice": {"type": "custom", "name": "count"},
        "tools": [{"type": "function", "name": "other", "parameters": OBJECT},
                  {"type": "custom", "name": "count", "format": {
                      "type": "grammar", "syntax": "lark", "definition": _ROWS}}]},
        "/tools/1/format/definition"),
}


@pytest.mark.parametrize("path", sorted(LIMITED_TURNS))
@pytest.mark.parametrize("stream", [False, True])
def test_the_row_limit_while_decoding_a_turn_names_the_tool(client, path, stream):
    """The limit is first hit while the turn is decoded (its grammar compiled): the 400 (a
    stream's error event) still names the field to simplify, the tool's grammar."""
    body, pointer = LIMITED_TURNS[path]
    r = post(client, path, {**body, "stream": stream})
    if stream:
        assert r.status_code == 200, r.text[:300]
        events = [json.loads(b[len("data: "):]) for line in r.text.split("\n\n")
                  for b in line.split("\n") if b.startswith("data: {")]
        error = events[-1]["error"] if path != "/v1/responses" else (
            events[-1]["response"]["error"])  # response.failed: {code, message}, no param
        assert path != "/v1/responses" or events[-1]["type"] == "response.failed", events[-1]
    else:
        assert r.status_code == 400, r.text[:300]
        error = r.json()["error"]
    assert error["code"] == "grammar_too_complex", error
    assert error.get("param", pointer) == pointer, error
    assert f"(at {pointer})" in error["message"], error
    assert "max_items_in_row" in error["message"], error


def test_limits_at_compile_time_point_at_the_constraint(client):
    """A grammar with more symbols than llguidance builds is refused at compile time, naming
    the limit, at the field it came from."""
    grammar = "start: " + " | ".join(f'"w{i}" x{i}' for i in range(5_000)) + "\n" + "\n".join(
        f'x{i}: "a" "b" "c" "d" "e" "f" "g" "h"' for i in range(5_000))
    r = post(client, "/v1/completions", {"model": "random", "prompt": "x", "max_tokens": 2,
                                         "guided_grammar": grammar})
    message, param, code = error_of("/v1/completions", r)
    assert (r.status_code, code, param) == (400, "grammar_too_complex", "/guided_grammar")
    assert "llguidance" in message


def test_limit_messages_are_read_as_limits():
    from kaname.grammar.compiler import limit_error

    for message, limit in (
            ("Parser Error: Current row has 2002 items; max is 2000; consider making your "
             "grammar left-recursive if it's right-recursive", "max_items_in_row"),
            ("at 1(8): grammar size (number of symbols) too big (limit for this grammar: 50)",
             "max_grammar_size"),
            ("initial lexer configuration (grammar) too big (limit for this grammar: 10)",
             "initial_lexer_fuel"),
            ("lexer error: too many states: 20 >= 20", "max_lexer_states"),
            ("lexer error: too many expressions constructed", "step_lexer_fuel"),
            ("parser error: Too many items (limit 5; mask); try avoiding single-byte/short "
             "lexemes", "step_max_items")):
        e = limit_error(message, "choice")
        assert e is not None and limit in e.message and e.message.startswith("choice"), message
    assert limit_error("Parser Error: token \"c\" doesn't satisfy the grammar") is None


# ---- fields that would change the answer ------------------------------------------------------

REFUSED = [
    ("/v1/chat/completions", "logprobs", True), ("/v1/chat/completions", "top_logprobs", 3),
    ("/v1/chat/completions", "n", 2), ("/v1/chat/completions", "logit_bias", {"42": 100}),
    ("/v1/chat/completions", "modalities", ["text", "audio"]),
    ("/v1/chat/completions", "audio", {"voice": "alloy", "format": "wav"}),
    ("/v1/completions", "logprobs", 2), ("/v1/completions", "logprobs", 0),
    ("/v1/completions", "echo", True), ("/v1/completions", "best_of", 3),
    ("/v1/completions", "suffix", " the end"), ("/v1/completions", "n", 2),
    ("/v1/completions", "logit_bias", {"42": -100}),
    ("/v1/responses", "top_logprobs", 2), ("/v1/responses", "background", True),
    ("/v1/responses", "conversation", "conv_1"), ("/v1/responses", "prompt", {"id": "p"}),
]
ACCEPTED = [
    ("/v1/chat/completions", "logprobs", False), ("/v1/chat/completions", "logprobs", None),
    ("/v1/chat/completions", "top_logprobs", 0), ("/v1/chat/completions", "n", 1),
    ("/v1/chat/completions", "logit_bias", {}), ("/v1/chat/completions", "modalities", ["text"]),
    ("/v1/completions", "logprobs", None), ("/v1/completions", "echo", False),
    ("/v1/completions", "best_of", 1), ("/v1/completions", "suffix", ""),
    ("/v1/completions", "n", 1), ("/v1/responses", "top_logprobs", 0),
    ("/v1/responses", "background", False),
]


@pytest.mark.parametrize("path, field, value", REFUSED)
def test_a_field_kaname_does_not_serve_is_a_400_naming_it(client, path, field, value):
    r = post(client, path, {**APIS[path], field: value})
    message, param, code = error_of(path, r)
    assert (r.status_code, param, code) == (400, f"/{field}", "unsupported_parameter"), message


@pytest.mark.parametrize("path, field, value", ACCEPTED)
def test_the_same_field_asking_for_nothing_is_served(client, path, field, value):
    served(post(client, path, {**APIS[path], field: value}))


# ---- truncations: vLLM's top_k and min_p (OpenAI's APIs), Anthropic's top_k ------------------

TRUNCATES = {"/v1/chat/completions": ("top_k", "min_p"), "/v1/completions": ("top_k", "min_p"),
             "/v1/responses": ("top_k", "min_p"), "/v1/messages": ("top_k",)}
_VOLATILE = {"id", "call_id", "signature", "created", "created_at"}
_SAY = "Say something."
FREE_TEXT = {  # free text without reasoning: every token is sampled
    "/v1/chat/completions": {"model": "random", "max_tokens": 12, "reasoning_effort": "none",
                             "messages": [{"role": "user", "content": _SAY}]},
    "/v1/completions": {"model": "random", "max_tokens": 12, "prompt": _SAY},
    "/v1/responses": {"model": "random", "max_output_tokens": 12, "input": _SAY,
                      "reasoning": {"effort": "none"}},
    "/v1/messages": {"model": "random", "max_tokens": 12, "thinking": {"type": "disabled"},
                     "messages": [{"role": "user", "content": _SAY}]},
}


def _answer(path: str, body: dict[str, Any]) -> Any:
    """What the model said, without the ids and times that differ from call to call."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in _VOLATILE}
        return [strip(v) for v in node] if isinstance(node, list) else node
    key = {"/v1/chat/completions": "choices", "/v1/completions": "choices",
           "/v1/responses": "output", "/v1/messages": "content"}[path]
    return strip(body[key])


@pytest.mark.parametrize("path", sorted(APIS))
def test_top_k_1_and_min_p_1_sample_the_greedy_answer(client, path):
    """At temperature 1, top_k 1 (and min_p 1) keep only the likeliest allowed token: the
    greedy answer, whatever the seed; without them the same seeds sample other answers."""
    base = FREE_TEXT[path]
    greedy = post(client, path, {**base, "temperature": 0})
    served(greedy)
    for field in TRUNCATES[path]:
        for seed in (1, 2):
            r = post(client, path, {**base, "temperature": 1.0, "seed": seed, field: 1})
            served(r)
            assert _answer(path, r.json()) == _answer(path, greedy.json()), (field, seed)
    sampled = [post(client, path, {**base, "temperature": 1.0, "seed": seed}) for seed in (1, 2)]
    assert any(_answer(path, r.json()) != _answer(path, greedy.json()) for r in sampled)


BAD_VALUES = {"top_k": (-2, 1.5, "forty"), "min_p": (-0.1, 1.5, "x")}
BAD_TRUNCATIONS = [(path, field, value) for path, fields in TRUNCATES.items()
                   for field in fields for value in BAD_VALUES[field]]
BAD_TRUNCATIONS.append(("/v1/messages", "top_k", -1))  # Anthropic's top_k is >= 0


@pytest.mark.parametrize("path, field, value", BAD_TRUNCATIONS)
def test_a_bad_truncation_is_a_400_naming_it(client, path, field, value):
    r = post(client, path, {**APIS[path], field: value})
    message, param, _ = error_of(path, r)
    assert (r.status_code, param) == (400, f"/{field}"), message


def test_truncations_are_not_listed_as_ignored(client):
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        fields = {"top_k": 40, **({"min_p": 0.05} if "min_p" in TRUNCATES[path] else {})}
        r = post(client, path, {**APIS[path], "temperature": 0.8, **fields})
        served(r)
        ignored = {i["pointer"] for i in r.json()["kaname"]["ignored"]}
        assert not ignored & {"/top_k", "/min_p"}, (path, ignored)
    # Anthropic's API has no min_p: listed there, as any field it does not define
    r = post(client, "/v1/messages", {**APIS["/v1/messages"], "min_p": 0.05})
    assert "/min_p" in {i["pointer"] for i in r.json()["kaname"]["ignored"]}
    # -1 and 0 are vLLM's "off": served
    for value in (-1, 0):
        served(post(client, "/v1/chat/completions", {**CHAT, "top_k": value}))


# ---- the size limit ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(APIS))
@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_413_in_the_api_shape(client, path, chunked):
    body = json.dumps({**APIS[path], "padding": "x" * (1 << 20)}).encode()
    content: Any = body
    if chunked:  # no Content-Length: the limit holds while the body is read
        def parts() -> Iterator[bytes]:
            for i in range(0, len(body), 65536):
                yield body[i:i + 65536]
        content = parts()
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text[:200]
    assert ("content-length" in r.request.headers) != chunked
    if path == "/v1/messages":
        assert r.json() == {"type": "error", "error": {
            "type": "request_too_large", "message": "request body exceeds 1048576 bytes"}}
    else:
        assert r.json()["error"]["code"] == "body_too_large"


# ---- all of it at once ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3), max_leaves=6)
REFUSABLE = sorted({field for _, field, _ in REFUSED})


@st.composite
def bad_bodies(draw: Any) -> tuple[str, dict[str, Any]]:
    """A valid body of some API with one to three bad things done to it."""
    path = draw(st.sampled_from(sorted(APIS)))
    body = json.loads(json.dumps(APIS[path]))
    for edit in draw(st.lists(st.sampled_from(["surrogate", "name", "field", "choice"]),
                              min_size=1, max_size=3)):
        if edit == "surrogate":
            body, _ = _with_surrogate(body, draw(st.integers(0, 500)),
                                      draw(st.integers(0, 20)), "\ud800")
        elif edit == "name" and path in NAME_AT:
            body = _set(body, draw(st.sampled_from(NAME_AT[path])), draw(BAD_NAMES))
        elif edit == "field":
            body[draw(st.sampled_from(REFUSABLE))] = draw(json_values)
        elif edit == "choice" and path == "/v1/completions":
            body["structured_outputs"] = {"choice": draw(st.lists(
                st.text(max_size=8), min_size=1, max_size=3) | st.just(
                [str(i) for i in range(draw(st.integers(1_999, 3_000)))]))}
    return path, body


@SETTINGS
@given(case=bad_bodies(), stream=st.booleans())
def test_no_mix_of_bad_input_is_a_5xx(client, case, stream):
    """Whatever mix of the above: served, or a 4xx in the API's shape naming a pointer."""
    path, body = case
    r = post(client, path, {**body, "stream": stream})
    assert r.status_code < 500, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        message, param, _ = error_of(path, r)
        assert param is not None and param.startswith("/"), message
