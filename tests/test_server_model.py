"""The embedded Gemma 3 270M behind `kaname serve`: a chat request with a json_schema
response format comes back valid."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
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
