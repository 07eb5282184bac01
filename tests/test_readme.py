"""The README's examples answer what the README says they answer, on the embedded model: the
company curl (sent as written), the tool call through the official `openai` SDK, `kaname
generate` and the Python API. Greedy decoding, so a change of model, kernels or grammar that
changes an answer fails here until the README says what the model writes now."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from serverproc import ServerProcess

pytestmark = pytest.mark.model

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _after(marker: str) -> str:
    at = README.index(marker)
    return README[at + len(marker):]


def _curl_body() -> dict[str, Any]:
    block = _after("curl -s http://127.0.0.1:8000/v1/chat/completions")
    return json.loads(block[block.index("-d '") + 4:block.index("}'\n") + 1])


def _said_answer() -> tuple[dict[str, Any], str]:
    """The content (as JSON) and finish_reason the README says the curl answers."""
    text = _after("answers (abridged) `")
    said = text[:text.index("`")].replace("\n", " ")
    m = re.fullmatch(r'"message": \{"role": "assistant", "content": (".*")\}, '
                     r'"finish_reason": "(\w+)"', said)
    assert m, said
    return json.loads(json.loads(m.group(1))), m.group(2)


def _said_arguments() -> str:
    m = re.search(r"tool_calls\[0\]\.function  # name='get_weather', arguments='(.*)'", README)
    assert m
    return m.group(1)


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as s:  # `kaname serve`, as the README's first command runs it
        yield s


def test_the_company_curl_answers_what_the_readme_says(server):
    r = httpx.post(f"{server.url}/v1/chat/completions", json=_curl_body(), timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    content, finish = _said_answer()
    assert (json.loads(choice["message"]["content"]), choice["finish_reason"]) == \
        (content, finish)


def test_the_sdk_tool_call_answers_what_the_readme_says(server):
    code = README[README.index("from openai import OpenAI"):]
    code = code[:code.index("```")]
    lines = [ln.split("#")[0].rstrip() if ln.strip().startswith("r.choices") else ln
             for ln in code.replace("http://127.0.0.1:8000/v1", f"{server.url}/v1")
             .splitlines()]
    scope: dict[str, Any] = {"openai": openai}
    exec("\n".join(lines), scope)  # the README's own lines, against this server
    r = scope["r"]
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0].function
    assert (call.name, call.arguments) == ("get_weather", _said_arguments())


def test_kaname_generate_prints_what_the_readme_says():
    block = _after(".venv/bin/kaname generate --json --json-schema examples/company.schema.json "
                   '"')
    prompt = block[:block.index('"\n```')]
    said = json.loads(_after("prints\n`")[:_after("prints\n`").index("`")])
    p = subprocess.run([sys.executable, "-m", "kaname.cli", "generate", "--json",
                        "--json-schema", "examples/company.schema.json", prompt],
                       capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert (got["text"], got["finish_reason"], got["valid"]) == \
        (said["text"], said["finish_reason"], said["valid"])


def test_the_python_api_answers_what_the_readme_says():
    from kaname import Engine

    m = re.search(r'engine\.generate\("(.*)", response_format=Company\)\n'
                  r"r\.text +# '(.*)'", README)
    assert m
    prompt = m.group(1).encode().decode("unicode_escape").encode("latin-1").decode()
    from pydantic import BaseModel, ConfigDict

    class Company(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str
        founded_year: int

    r = Engine.default().generate(prompt, response_format=Company)
    assert r.text == m.group(2)
