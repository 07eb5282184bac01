"""The embedded Gemma 3 270M behind `kaname serve`: a chat request with a json_schema
response format comes back valid; a request that cannot fit the model's context is a 400
`context_length_exceeded` before anything is generated."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serverproc import ServerProcess

COMPANY = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "founded_year": {"type": "integer", "minimum": 1800, "maximum": 2030},
    "city": {"type": "string", "maxLength": 40}},
    "required": ["name", "founded_year", "city"], "additionalProperties": False}


@pytest.mark.model
def test_embedded_model_answers_with_valid_json():
    with ServerProcess("--model", "default") as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        [model] = [m.id for m in client.models.list()]
        r = client.chat.completions.create(
            model=model, temperature=0, max_tokens=120,
            messages=[{"role": "system", "content": "Extract the company as JSON."},
                      {"role": "user", "content": "Hoshizora Books was founded in 2011 in "
                                                  "Yokohama."}],
            response_format={"type": "json_schema", "json_schema": {
                "name": "company", "schema": COMPANY, "strict": True}})
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        value = json.loads(choice.message.content)
        jsonschema.validate(value, COMPANY)
        assert r.usage.prompt_tokens > 10


# ---- the embedded model's context window (--ctx-size 4,096 tokens) --------------------------

# Set below the model's own 32,768 (the default) so that prompts around the limit stay short to
# evaluate on a CPU.
N_CTX = 4096


@pytest.fixture(scope="module")
def gemma_server():
    with ServerProcess("--model", "default", "--ctx-size", str(N_CTX)) as server:
        yield server


def _context_error(r: httpx.Response, param: str) -> tuple[int, int]:
    """Assert an OpenAI context_length_exceeded 400; return (prompt tokens, completion tokens)
    as its message states them."""
    assert r.status_code == 400, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == param, err
    assert err["type"] == "invalid_request_error", err
    m = re.search(r"maximum context length is (\d+) tokens.*requested (\d+) tokens "
                  r"\((\d+) in the messages, (\d+) in the completion\)", err["message"])
    assert m, err["message"]
    context, total, prompt, completion = map(int, m.groups())
    assert context == N_CTX and total == prompt + completion > N_CTX
    return prompt, completion


@pytest.mark.model
def test_overlong_prompt_is_context_length_exceeded(gemma_server):
    url = gemma_server.url + "/v1"
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    long_text = "word " * 5000
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="default", max_tokens=16,
                                       messages=[{"role": "user", "content": long_text}])
    assert e.value.code == "context_length_exceeded" and e.value.param == "/messages"
    for stream in (False, True):  # a stream is refused before it starts: a 400, not an event
        r = httpx.post(f"{url}/chat/completions", timeout=120, json={
            "model": "default", "stream": stream,
            "messages": [{"role": "user", "content": long_text}]})
        prompt, _ = _context_error(r, "/messages")
        assert prompt > 5000
    r = httpx.post(f"{url}/completions", timeout=120,
                   json={"model": "default", "prompt": long_text, "max_tokens": 4})
    _context_error(r, "/prompt")
    # a completion asked larger than the context (Claude Code asks 32,000) is served up to
    # what fits, and says so; a prompt near the window keeps the generation short
    r = httpx.post(f"{url}/chat/completions", timeout=300, json={
        "model": "default", "max_tokens": 32_000, "temperature": 0,
        "messages": [{"role": "user", "content": "word " * 3990}]})
    assert r.status_code == 200, r.text
    body = r.json()
    served = body["kaname"]["budget"]["served"]
    assert body["kaname"]["budget"]["asked"] == 32_000
    assert served == N_CTX - body["usage"]["prompt_tokens"] > 0
    assert body["usage"]["completion_tokens"] <= served
    assert body["choices"][0]["finish_reason"] == (
        "length" if body["usage"]["completion_tokens"] == served else "stop")


@pytest.mark.model
@settings(max_examples=6, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(words=st.integers(4070, 4100), max_tokens=st.one_of(st.none(), st.integers(1, 40)))
def test_fuzz_around_the_context_limit(gemma_server, words, max_tokens):
    """Prompts and max_tokens around the 4,096-token window: a 200 that fits (an unset
    max_tokens is what is left of the context), or a context_length_exceeded 400 — never a 5xx,
    never a generation cut by the model's context."""
    body: dict = {"model": "default", "prompt": "word " * words, "temperature": 0}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    r = httpx.post(gemma_server.url + "/v1/completions", json=body, timeout=300)
    if r.status_code == 200:  # served up to what fits
        usage = r.json()["usage"]
        served = r.json()["kaname"]["budget"]["served"]
        assert served == min(max_tokens or 16, N_CTX - usage["prompt_tokens"]), usage
        assert usage["completion_tokens"] <= served, usage
    else:  # refused only where the prompt leaves no room for one token
        assert _context_error(r, "/prompt")[1] == 1
