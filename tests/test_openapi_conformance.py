"""/openapi.json judges the server: schemathesis against `kaname serve --model random`.

Every answer must have a documented status, a documented content type and headers, and a
body (every event of a stream too) that the document's schema for it accepts; and no 5xx.
First the document's own request examples (each API, streamed and not, tools and schemas),
then schemathesis' coverage and fuzzing phases over every operation, as its CLI runs them in
CI. The seed is fixed so CI is reproducible; KANAME_SCHEMATHESIS_SEED picks another
(`random` for a fresh one) to explore, KANAME_SCHEMATHESIS_EXAMPLES more cases per
operation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis import checks as st_checks
from serverproc import ServerProcess

CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance")
# a small budget keeps random-model answers short; any model name reaches the generation
SERVE = ("--model", "random", "--any-model-name", "--max-tokens-limit", "16")


@pytest.fixture(scope="module")
def server():
    with ServerProcess(*SERVE) as s:
        yield s


def _document(url: str, headers: dict[str, str] | None = None) -> dict:
    return httpx.get(f"{url}/openapi.json", timeout=10, headers=headers).json()


def _examples(doc: dict) -> list[tuple[str, str, str, dict]]:
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, example in body.get("examples", {}).items():
                out.append((path, method.upper(), name, example["value"]))
    return out


def test_success_answers_are_documented(server):
    """No operation documents its success as `{}`; streams document their events."""
    doc = _document(server.url)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            ok = op["responses"]["200"]["content"]
            for media, content in ok.items():
                if media == "text/event-stream":
                    assert content["itemSchema"]["properties"]["data"], (method, path)
                else:
                    assert content["schema"], (method, path, media)
            if method == "post":
                assert "400" in op["responses"], (method, path)
            assert "422" not in op["responses"] or path != "/v1/completions", path
    for streaming in ("/v1/chat/completions", "/v1/completions", "/v1/responses",
                      "/v1/messages"):
        assert "text/event-stream" in doc["paths"][streaming]["post"]["responses"]["200"][
            "content"], streaming
    assert list(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == \
        ["text/plain"]


def test_documented_examples_conform(server):
    """Every request example the document gives is answered 200 (a stream where it asks for
    one) in the documented shape: each SSE event is validated against its schema."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    checks = [getattr(st_checks, name) for name in CHECKS]
    examples = _examples(_document(server.url))
    assert {path for path, *_ in examples} == {
        "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
        "/v1/messages/count_tokens"}
    streams = stored = 0
    for path, method, name, body in examples:
        case = schema[path][method].Case(body=body)
        response = case.call(timeout=60)
        assert response.status_code == 200, (path, name, response.text[:500])
        streamed = response.headers["content-type"][0].startswith("text/event-stream")
        assert streamed == bool(body.get("stream")), (path, name)
        streams += streamed
        case.validate_response(response, checks=checks)
        if path == "/v1/responses" and not streamed:
            stored += _follow_links(schema, response.json()["id"], checks)
    assert streams >= 4
    assert stored >= 1


def _follow_links(schema, response_id: str, checks: list) -> int:
    """What the document's links say a created response leads to: it can be read, deleted,
    and then is gone (each answer checked like any other)."""
    by_id = schema["/v1/responses/{response_id}"]
    for method, status in (("GET", 200), ("DELETE", 200), ("GET", 404), ("DELETE", 404)):
        case = by_id[method].Case(path_parameters={"response_id": response_id})
        response = case.call(timeout=60)
        assert response.status_code == status, (method, response.text[:300])
        case.validate_response(response, checks=checks)
        if status == 200:
            assert response.json()["id"] == response_id
    return 1


def _run_schemathesis(url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    seed = os.environ.get("KANAME_SCHEMATHESIS_SEED", "1")
    command = [str(Path(sys.executable).parent / "schemathesis"), "run",
               f"{url}/openapi.json", "--no-color",
               "--continue-on-failure", "--request-timeout", "60", "--workers", "1",
               *(["--seed", seed] if seed != "random" else []), *args]
    # (in `cwd`: the CLI keeps its example database in ./.schemathesis)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)


def test_schemathesis_finds_nothing(server, tmp_path):
    """Examples, coverage, fuzzing and stateful phases over every operation: no 5xx, no
    undocumented status, content type or header, no body (or event) the document does not
    describe."""
    examples = os.environ.get("KANAME_SCHEMATHESIS_EXAMPLES", "15")
    start = time.monotonic()
    # stateful: the links (a created response is read, deleted, then gone: use_after_free)
    run = _run_schemathesis(server.url, tmp_path, "--phases",
                            "examples,coverage,fuzzing,stateful", "--max-examples", examples,
                            "--checks", ",".join((*CHECKS, "use_after_free")))
    report = run.stdout[-15000:] + run.stderr[-3000:]
    assert run.returncode == 0, f"schemathesis found problems:\n{report}\n" \
                                f"server log:\n{server.log()}"
    operations = sum(len(item) for item in _document(server.url)["paths"].values())
    assert f"Tested: {operations}" in run.stdout, report  # every operation was reached
    print(f"schemathesis: {time.monotonic() - start:.0f} s")


def test_unauthorized_answers_are_documented():
    """With --api-key, what a client without the key gets is documented too (401 in each
    API's shape; /health stays open)."""
    key = {"Authorization": "Bearer sk-test"}
    with ServerProcess(*SERVE, "--api-key", "sk-test") as s:
        schema = schemathesis.openapi.from_url(f"{s.url}/openapi.json", headers=key)
        checks = [getattr(st_checks, name) for name in CHECKS]
        examples = _examples(_document(s.url, key))
        for path, method, _, body in examples:
            case = schema[path][method].Case(body=body)
            response = case.call(timeout=60)
            assert response.status_code == 401, (path, response.text[:300])
            case.validate_response(response, checks=checks)
        for path in ("/v1/models", "/metrics"):
            case = schema[path]["GET"].Case()
            response = case.call(timeout=60)
            assert response.status_code == 401, path
            case.validate_response(response, checks=checks)

