"""Request bodies near OpenAI's schema, and far from it, against a live `kaname serve`: nothing
the client sends is a 5xx, and every error is in OpenAI's shape
`{"error": {"message", "type", "param", "code"}}` (as a body, or as a streamed event)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serverproc import ServerProcess

MODEL = ("--model", "random", "--format", "qwen3")
SMALL = 8  # max_tokens when the fuzzed value is a valid one
SETTINGS = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def server():
    with ServerProcess(*MODEL, "--request-timeout", "30") as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


# ---- checking an answer ---------------------------------------------------------------------

def _assert_error_shape(body: Any) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], str), err


def _check(r: httpx.Response, what: Any) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500], what)
    if r.status_code >= 400:
        _assert_error_shape(r.json())
        return
    assert r.status_code == 200, (r.status_code, r.text[:300])
    if r.headers["content-type"].startswith("text/event-stream"):
        blocks = [b for b in r.text.split("\n\n") if b.strip()]
        assert blocks[-1] == "data: [DONE]", r.text[-300:]
        for block in blocks[:-1]:
            assert block.startswith("data: "), block
            event = json.loads(block[len("data: "):])
            if "error" in event:
                _assert_error_shape(event)
                assert block is blocks[-2], "an error event ends the stream"
            else:
                assert isinstance(event["choices"], list)
    else:
        body = r.json()
        assert isinstance(body["choices"], list) and body["choices"], body
        assert body["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")


# ---- strategies -----------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
names = st.sampled_from(["lookup", "get_weather", "x", "", "a" * 300, "名前", "bad name!",
                         "ns.tool", "a-b_c"]) | st.text(max_size=10)

SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}}},
    {"type": "object", "properties": {}, "additionalProperties": False},
    {"type": "object", "required": ["missing"], "additionalProperties": False},
    {"type": "string", "pattern": "^[a-z]+$"},
    {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 1},
    {"type": "foo"}, {"type": 5}, {"type": ["string", "null"]}, {"properties": []},
    {"properties": {"a": 5}}, {"$ref": "#/$defs/nope"}, {"pattern": "("},
    {"type": "string", "pattern": "a{99999999}"}, {"minimum": "x"}, {"enum": []},
    {"enum": [1, "a", None, {"k": [1]}]}, {"const": {"deep": [1, 2]}},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"anyOf": [{"type": "string"}, {"type": "integer"}], "not": {"type": "string"}},
    {"type": "string", "format": "date-time"}, {"type": "string", "format": "no-such-format"},
    {"type": "string", "minLength": 10**9}, {"type": "array", "minItems": 10**6},
    {"type": "integer", "multipleOf": 0}, {"type": "number", "multipleOf": 1e-300},
    # (schemas with $ref are a known 400 as tool parameters: test_tool_parameters_with_refs;
    # a schema matching nothing is a known 500: test_grammar_matching_nothing_is_400)
    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
    {"type": "object", "properties": {"a": {"type": "string"}},
     "dependentRequired": {"a": ["b"]}},
    {"if": {"type": "string"}, "then": {"minLength": 2}}, {"x-custom": True}, {},
]
schemas = st.sampled_from(SCHEMAS) | json_values


def _small(value: Any) -> Any:
    """A valid max_tokens is made small; anything else is left for the server to refuse."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value:
        return min(value, SMALL)
    return value


# Bodies are a valid-looking request (each field drawn near OpenAI's schema: valid values,
# schemas kaname may refuse, unknown tool names) with up to two fields then replaced by odd
# values or dropped, so that most requests get past validation and reach the grammar and the
# model, and the rest probe validation one field at a time.

ODD = st.sampled_from([None, -1, 0, 10**30, -10**30, 1.5, float("nan"), float("inf"), "", "x",
                       [], {}, [None], {"a": 1}, True]) | json_values
valid_max_tokens = st.integers(1, SMALL)
odd_max_tokens = st.sampled_from([0, -1, -5, 10**30, 10**6, 8193, "5", 3.5, None, True, [4]])
text = st.text(max_size=30)
tool_call = st.builds(
    lambda i, n, a: {"id": f"call_{i}", "type": "function",
                     "function": {"name": n, "arguments": a}},
    st.integers(0, 9), names,
    st.sampled_from(['{"q": "x"}', "{}", "not json", '{"a": [1, {"b": null}]}'])
    | st.dictionaries(st.text(max_size=4), scalars, max_size=2))
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]),
                           "content": text}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["text", "text", "image_url"]),
                               "text": text}), min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": text | st.none()},
                          optional={"tool_calls": st.lists(tool_call, max_size=2),
                                    "reasoning_content": text}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": text,
                           "tool_call_id": st.sampled_from(["call_0", "call_1", "nope"])}),
)
messages = st.lists(message, min_size=1, max_size=4).map(
    lambda ms: ms if ms[-1]["role"] != "assistant" else [*ms, {"role": "user", "content": "?"}])
tool = st.builds(
    lambda n, p, d, strict: {"type": "function", "function": {
        "name": n, **({"parameters": p} if p is not None else {}),
        **({"description": d} if d else {}), **({"strict": strict} if strict is not None
                                               else {})}},
    st.sampled_from(["lookup", "get_weather", "set_alarm", "名前", "a-b_c", "x" * 64]),
    st.sampled_from(SCHEMAS) | st.none(), text, st.booleans() | st.none())
tools = st.lists(tool, min_size=1, max_size=3)
tool_choice = (st.sampled_from(["none", "auto", "required"])
               | st.builds(lambda n: {"type": "function", "function": {"name": n}},
                           st.sampled_from(["lookup", "get_weather", "unknown_fn", ""])))
response_format = (
    st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "json_schema"}])
    | st.builds(lambda sc, strict, name: {"type": "json_schema", "json_schema": {
        "name": name, "schema": sc, **({"strict": strict} if strict is not None else {})}},
        st.sampled_from(SCHEMAS), st.booleans() | st.none(),
        st.sampled_from(["answer", "x", ""])))
common = {
    # (a subnormal temperature is a known 500: test_tiny_temperature_is_not_a_500)
    "temperature": st.just(0.0) | st.floats(0.01, 2), "top_p": st.floats(0.01, 1),
    "seed": st.integers(0, 2**64), "stop": st.text(min_size=1, max_size=3)
    | st.lists(st.text(max_size=3), max_size=3), "n": st.just(1),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "user": text, "logprobs": st.booleans(), "frequency_penalty": st.floats(-2, 2),
}
chat_base = st.fixed_dictionaries(
    {"model": st.just("random"), "messages": messages, "max_tokens": valid_max_tokens,
     "stream": st.booleans()},
    optional={
        **common, "max_completion_tokens": valid_max_tokens, "tools": tools,
        "tool_choice": tool_choice, "parallel_tool_calls": st.booleans(),
        "response_format": response_format,
        "strict_level": st.sampled_from(["full", "names", "off"]),
        "max_reasoning_tokens": st.integers(1, 20),
        "reasoning_effort": st.sampled_from(["low", "high", "none"]),
        "chat_template_kwargs": st.fixed_dictionaries({"enable_thinking": st.booleans()}),
        "allow_unenforced": st.booleans(),
    })
CHAT_FIELDS = ["model", "messages", "max_tokens", "max_completion_tokens", "tools",
               "tool_choice", "parallel_tool_calls", "response_format", "strict_level",
               "max_reasoning_tokens", "reasoning_effort", "chat_template_kwargs", "temperature",
               "top_p", "seed", "stop", "n", "stream", "stream_options", "allow_unenforced",
               "an_unknown_field"]

# known 500s, left out here and tested below: grammars matching nothing ("start: a\na: a"),
# counted repetitions past the lexer's limits ("a{99999999}")
GRAMMARS = ['start: "yes" | "no"', "start: /[a-z]+/", "start: ", "start: foo", "%json {}",
            'start: %json {"type": "object"}', "\x00", "start: /(/",
            'start: "a"* ', 'start: %json {"type": 5}', "start: <[0]>", "start: <|im_end|>"]
REGEXES = ["[a-z]{1,5}", "(", "a{2,4}b{0,3}", "\\d+", "", "[", "(?P<x>a)", "a|", "\\p{L}+",
           "(a|b)*c", "^abc$", "(?i)yes|no", "\\"]
structured = st.one_of(
    st.builds(lambda v: {"json": v}, st.sampled_from(SCHEMAS) | st.sampled_from(
        ['{"type": "string"}', "{", "true"]) | st.booleans()),
    st.builds(lambda v: {"regex": v}, st.sampled_from(REGEXES)),
    st.builds(lambda v: {"choice": v}, st.lists(st.text(max_size=5), max_size=3)),
    st.builds(lambda v: {"grammar": v}, st.sampled_from(GRAMMARS)),
    st.just({"json_object": True}), st.just({}),
    st.builds(lambda r, c: {"regex": r, "choice": c}, st.sampled_from(REGEXES),
              st.lists(st.text(max_size=3), min_size=1, max_size=2)))
completion_base = st.fixed_dictionaries(
    {"model": st.just("random"), "max_tokens": valid_max_tokens, "stream": st.booleans(),
     "prompt": text | st.lists(text, min_size=1, max_size=1)},
    optional={
        **common, "structured_outputs": structured, "response_format": response_format,
        "guided_json": st.sampled_from(SCHEMAS), "guided_regex": st.sampled_from(REGEXES),
        "guided_choice": st.lists(st.text(max_size=5), max_size=3),
        "guided_grammar": st.sampled_from(GRAMMARS), "allow_unenforced": st.booleans(),
    })
COMPLETION_FIELDS = ["model", "prompt", "max_tokens", "structured_outputs", "response_format",
                     "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                     "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options",
                     "allow_unenforced", "an_unknown_field"]


def _mutated(base: st.SearchStrategy, fields: list[str]) -> st.SearchStrategy:
    """The base body with up to two fields set to odd values (or dropped)."""
    odd = {"max_tokens": odd_max_tokens, "max_completion_tokens": odd_max_tokens,
           "messages": st.just([]) | st.lists(st.fixed_dictionaries(
               {"role": st.sampled_from(["bot", "", "tool", "assistant"]), "content": ODD}),
               min_size=1, max_size=2) | ODD,
           "tools": st.lists(st.fixed_dictionaries(
               {"type": st.sampled_from(["function", "retrieval"]),
                "function": st.fixed_dictionaries({"name": names},
                                                  optional={"parameters": schemas})}),
               max_size=3) | ODD,
           "tool_choice": st.sampled_from(["any", ""]) | ODD, "seed": st.sampled_from(
               ["1", 1.5, 2**70, None])}
    edit = st.tuples(st.sampled_from(fields), st.booleans()).flatmap(
        lambda fd: st.tuples(st.just(fd[0]), st.just(fd[1]), odd.get(fd[0], ODD)))

    def apply(body: dict[str, Any], edits: list[tuple[str, bool, Any]]) -> dict[str, Any]:
        body = dict(body)
        for field, drop, value in edits:
            if drop and field != "max_tokens":
                body.pop(field, None)
            else:
                body[field] = value
        return body

    return st.builds(apply, base, st.lists(edit, max_size=2))


chat_body = _mutated(chat_base, CHAT_FIELDS)
completion_body = _mutated(completion_base, COMPLETION_FIELDS)


def _post(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens"):
            if key in body:
                body[key] = _small(body[key])
        if "max_completion_tokens" not in body:  # else the server uses that one
            body.setdefault("max_tokens", SMALL)
    data = json.dumps(body, allow_nan=True)
    return http.post(path, content=data, headers={"content-type": "application/json"})


# ---- the fuzz tests ---------------------------------------------------------------------------

@SETTINGS
@given(body=chat_body)
def test_fuzz_chat_completions(http, body):
    _check(_post(http, "/v1/chat/completions", body), body)


@SETTINGS
@given(body=completion_body)
def test_fuzz_completions(http, body):
    _check(_post(http, "/v1/completions", body), body)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
       raw=st.binary(max_size=40) | st.text(max_size=40).map(str.encode)
       | st.sampled_from([b"", b"{", b"null", b"[]", b"1", b'"x"', b"\xff\xfe\x00",
                          b'{"model": "random", "messages": [{"role": "user", "content": '
                          b'"hi"}], "max_tokens": 4,}', b"NaN", b"[" * 50 + b"]" * 50]),
       content_type=st.sampled_from(["application/json", "text/plain",
                                     "application/x-www-form-urlencoded", None]))
def test_fuzz_non_json_bodies(http, path, raw, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = http.post(path, content=raw, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text[:300], raw)
    assert r.status_code >= 400, raw  # none of these is a request
    _assert_error_shape(r.json())


def test_deeply_nested_bodies(http):
    chat = b'{"model": "random", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2'
    for raw in (b"[" * 100_000 + b"]" * 100_000,
                chat + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                chat + b', "response_format": {"type": "json_schema", "json_schema": {"name": '
                b'"a", "schema": ' + b'{"type": "array", "items": ' * 5000 + b"{}"
                + b"}" * 5000 + b"}}}"):
        for path in ("/v1/chat/completions", "/v1/completions"):
            r = http.post(path, content=raw, headers={"content-type": "application/json"})
            assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
            _assert_error_shape(r.json())


def test_openapi_json(http):
    r = http.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert spec["openapi"].startswith("3.")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health"):
        assert path in spec["paths"], path
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    assert "requestBody" in chat
    assert "ChatCompletionRequest" in spec["components"]["schemas"]


def test_unknown_routes_and_methods_are_openai_errors(http):
    for method, path, status in (("GET", "/v1/nope", 404), ("GET", "/v1/chat/completions", 405),
                                 ("DELETE", "/v1/models", 405)):
        r = http.request(method, path)
        assert r.status_code == status, (method, path, r.status_code)
        _assert_error_shape(r.json())


# ---- 5xx the fuzzing found (kept out of the strategies above so that it goes on exploring) ----

def _chat(http: httpx.Client, **kw: Any) -> httpx.Response:
    body = {"model": "random", "max_tokens": SMALL,
            "messages": [{"role": "user", "content": "hi"}], **kw}
    return http.post("/v1/chat/completions", json=body)


def _completion(http: httpx.Client, **kw: Any) -> httpx.Response:
    return http.post("/v1/completions", json={"model": "random", "max_tokens": SMALL,
                                              "prompt": "hi", **kw})


def test_negative_seed_is_not_a_500(http):
    for stream in (False, True):
        for r in (_chat(http, seed=-1, stream=stream), _completion(http, seed=-1,
                                                                   stream=stream)):
            _check(r, {"seed": -1, "stream": stream})


def test_tiny_temperature_is_not_a_500(http):
    for r in (_chat(http, temperature=1e-308, top_p=0.5, seed=1),
              _completion(http, temperature=1e-308, top_p=0.5, seed=1)):
        _check(r, "temperature 1e-308")


LOOP = {"$defs": {"loop": {"$ref": "#/$defs/loop"}}, "$ref": "#/$defs/loop"}


def test_grammar_matching_nothing_is_400(http):
    for r in (_completion(http, guided_grammar="start: a\na: a"),
              _completion(http, structured_outputs={"grammar": "start: a\na: a"}),
              _chat(http, response_format={"type": "json_schema", "json_schema": {
                  "name": "x", "schema": LOOP}})):
        assert r.status_code == 400, (r.status_code, r.text[:300])
        _assert_error_shape(r.json())


def test_lexer_limit_while_decoding_is_400(http):
    for regex in ("a{99999999}", "(a|b)*c{1000000}"):
        for stream in (False, True):
            r = _completion(http, structured_outputs={"regex": regex}, stream=stream, seed=0)
            _check(r, regex)
            body = r.json() if not stream else json.loads(
                [b for b in r.text.split("\n\n") if b.strip()][-2][len("data: "):])
            assert body.get("error", {}).get("code") == "grammar_too_complex", body


def test_tool_parameters_with_refs(http):
    import jsonschema

    params = {"type": "object", "$defs": {"city": {"type": "string", "maxLength": 12}},
              "properties": {"city": {"$ref": "#/$defs/city"},
                             "near": {"type": "array", "maxItems": 2,
                                      "items": {"$ref": "#/$defs/city"}}},
              "required": ["city"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "weather", "parameters": params}}]
    for seed in range(3):
        r = _chat(http, tools=tools, tool_choice="required", max_tokens=200, seed=seed,
                  chat_template_kwargs={"enable_thinking": False})
        assert r.status_code == 200, r.text[:400]
        choice = r.json()["choices"][0]
        if choice["finish_reason"] == "tool_calls":
            for call in choice["message"]["tool_calls"]:
                jsonschema.validate(json.loads(call["function"]["arguments"]), params)
