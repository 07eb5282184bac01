"""Client input that Python's JSON readers once answered with a 500, now a 400 naming where
it is: JSON nested deeper than Python's parser reads inside a valid body (a past tool call's
arguments are a string of JSON, so the body itself parses), on the APIs that carry past
calls; a `$schema` that is not a string."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kaname.cli import _runtime_for_format
from kaname.server import ServerConfig, build_app

DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON, past any recursion limit


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = build_app(ServerConfig(model="random", format="hermes"), _runtime_for_format)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
BODIES: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": ("/v1/chat/completions", {
        "model": "random", "max_tokens": 2, "tools": [TOOL], "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "f", "arguments": DEEP}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]},
     "/messages/1/tool_calls/0/function/arguments"),
    "responses": ("/v1/responses", {
        "model": "random", "max_output_tokens": 2,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "input": [{"role": "user", "content": "hi"},
                  {"type": "function_call", "call_id": "c1", "name": "f", "arguments": DEEP},
                  {"type": "function_call_output", "call_id": "c1", "output": "ok"}]},
     "/input/1/arguments"),
}


@pytest.mark.parametrize("api", sorted(BODIES))
def test_deep_arguments_in_a_past_call_are_a_400(client, api):
    path, body, pointer = BODIES[api]
    r = client.post(path, json=body)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert error["param"] == pointer, error
    assert "deep" in error["message"], error


@pytest.mark.parametrize("where", ["response_format", "tool"])
@pytest.mark.parametrize("value", [[], 5, None, {"a": 1}])
def test_a_schema_uri_that_is_not_a_string_is_a_400(client, where, value):
    schema = {"$schema": value, "type": "object"}
    body: dict[str, Any] = {"model": "random", "max_tokens": 2,
                            "messages": [{"role": "user", "content": "hi"}]}
    if where == "tool":
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "a", "schema": schema}}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert r.json()["error"]["param"].endswith("/$schema"), r.json()
