"""One compiler: what the proxy sends upstream is, byte for byte, the grammar kaname compiles
locally for the same request, for every constraint kind, and the replay judges the upstream's
text by that grammar (a json_object reply with a fraction past the guard is refused exactly as
the local matcher refuses it)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from fake_upstreams import (
    LONG_FRACTION,
    SEPARATED_TEXT,
    SHORT_FRACTION,
    STOPPED_TEXT,
    FakeUpstream,
)
from serverproc import ServerProcess

from kaname.chat import prepare_turn
from kaname.edges.completions import CompletionRequest
from kaname.formats import get_format
from kaname.grammar import GrammarCompiler, JsonObject
from kaname.runtimes.synthetic import synthetic_tokenizer

MODEL = ("--model", "random", "--format", "qwen3")

# One request per constraint kind, each in the spelling a client would use. The regex has a
# `/` and an escaped `\/`, which an ad-hoc `/.../` serialisation would get wrong.
REQUESTS: dict[str, dict[str, Any]] = {
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "point", "strict": True, "schema": {
            "type": "object", "properties": {"x": {"type": "number"}, "tag": {
                "type": "string", "maxLength": 6}},
            "required": ["x", "tag"], "additionalProperties": False}}}},
    "json_object": {"response_format": {"type": "json_object"}},
    "regex": {"structured_outputs": {"regex": r"[a-z]{1,6}/[0-9]{2}(\/x)?"}},
    "lark": {"structured_outputs": {"grammar": 'start: "yes" | "no, " WORD\nWORD: /[a-z]{1,5}/\n'}},
    "choice": {"structured_outputs": {"choice": ["red", 'say "hi"', "a/b\\c"]}},
}


def _check_text(kind: str, text: str) -> None:
    if kind == "json_schema":
        value = json.loads(text)
        assert set(value) == {"x", "tag"} and len(value["tag"]) <= 6
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict)
    elif kind == "regex":
        assert re.fullmatch(r"[a-z]{1,6}/[0-9]{2}(/x)?", text), text
    elif kind == "lark":
        assert re.fullmatch(r"yes|no, [a-z]{1,5}", text), text
    else:
        assert text in REQUESTS["choice"]["structured_outputs"]["choice"], text


class Recorder:
    """A pass-through in front of the upstream that records every request body it forwards."""

    def __init__(self, target: str):
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                owner.requests.append(json.loads(raw))
                with httpx.stream("POST", target + self.path.removeprefix("/v1"),
                                  content=raw, timeout=120,
                                  headers={"content-type": "application/json"}) as r:
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("content-type", ""))
                    self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                    for chunk in r.iter_raw():
                        self.wfile.write(chunk)
                        self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def upstream():
    with ServerProcess(*MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def recorder(upstream):
    with Recorder(upstream.url + "/v1") as r:
        yield r


@pytest.fixture(scope="module")
def proxy(recorder):
    with ServerProcess(*MODEL, "--upstream", recorder.url, "--upstream-model", "random",
                       "--request-timeout", "120") as s:
        yield s


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    """The proxy's own vocabulary: the synthetic one `--model random` gives qwen3."""
    tok, _ = synthetic_tokenizer(get_format("qwen3").special_tokens)
    return GrammarCompiler(tok)


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_upstream_gets_the_local_grammar(kind, upstream, recorder, proxy, compiler):
    body = {"model": "random", "prompt": "go", "max_tokens": 200, "temperature": 0,
            **REQUESTS[kind]}
    local = compiler.compile(CompletionRequest(**body).constraint()[0])
    via_proxy = httpx.post(proxy.url + "/v1/completions", json=body, timeout=120)
    assert via_proxy.status_code == 200, via_proxy.text
    sent = recorder.requests[-1]
    assert sent["structured_outputs"]["grammar"] == local.grammar
    assert sent["return_token_ids"] is True  # the replay checks the upstream's own tokens
    direct = httpx.post(upstream.url + "/v1/completions", json=body, timeout=120).json()
    # both paths compiled the same grammar, and the upstream enforced it
    assert via_proxy.json()["kaname"]["grammar_hash"] == local.grammar_hash
    assert direct["kaname"]["grammar_hash"] == local.grammar_hash
    for answer in (via_proxy.json(), direct):
        choice = answer["choices"][0]
        if choice["finish_reason"] == "stop":
            _check_text(kind, choice["text"])
    assert via_proxy.json()["kaname"]["enforced"] is True


def test_chat_turn_grammar_is_sent_as_built(recorder, proxy, compiler):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"], "additionalProperties": False}}}]
    messages = [{"role": "user", "content": "weather in Kyoto?"}]
    r = httpx.post(proxy.url + "/v1/chat/completions", timeout=120, json={
        "model": "random", "messages": messages, "tools": tools, "max_tokens": 200,
        "response_format": {"type": "json_object"}})
    assert r.status_code == 200, r.text
    turn = prepare_turn(get_format("qwen3"), messages, compiler.tokenizer, compiler,
                        tools=tools, response_format={"type": "json_object"}, reasoning="on")
    assert recorder.requests[-1]["structured_outputs"]["grammar"] == turn.grammar
    assert recorder.requests[-1]["prompt"] == turn.prompt_without_bos


@pytest.mark.parametrize("stream", [False, True])
def test_completion_token_ids(upstream, compiler, stream):
    """vLLM's `return_token_ids`: the ids of the generated tokens, which decode to the text."""
    body = {"model": "random", "prompt": "go", "max_tokens": 30, "stream": stream,
            "return_token_ids": True, **REQUESTS["regex"]}
    r = httpx.post(upstream.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n")
                  if b.startswith("data: {")]
        choices = [c["choices"][0] for c in chunks if c["choices"]]
        text = "".join(c["text"] for c in choices)
        ids = [i for c in choices for i in c["token_ids"]]
    else:
        [choice] = r.json()["choices"]
        text, ids = choice["text"], choice["token_ids"]
    assert ids and compiler.tokenizer.decode_str(ids) == text
    _check_text("regex", text)


@pytest.fixture(scope="module")
def fake_proxy():
    with FakeUpstream() as up, ServerProcess(*MODEL, "--upstream", up.url, "--upstream-model",
                                             "random", "--request-timeout", "10") as s:
        yield s


@pytest.mark.parametrize("fault,text,accepted", [("long-fraction", LONG_FRACTION, False),
                                                 ("short-fraction", SHORT_FRACTION, True)])
def test_json_object_fraction_guard_is_one_rule(fake_proxy, compiler, fault, text, accepted):
    """json_object is guarded the same way on both paths: the local matcher and the proxy's
    replay accept 8 fraction digits and refuse 9 (the upstream was sent that very grammar)."""
    local = compiler.compile(JsonObject())
    m = local.new_matcher()
    assert (m.accept_tokens(compiler.tokenizer.tokenize_str(text))
            and m.is_accepting()) is accepted
    r = httpx.post(fake_proxy.url + "/v1/completions", timeout=30, json={
        "model": "random", "prompt": f"FAULT:{fault}", "max_tokens": 50,
        "response_format": {"type": "json_object"}})
    if accepted:
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == text
    else:
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "upstream_not_enforced"


def test_upstream_400_reaches_the_client_as_400(fake_proxy):
    """An upstream's 400 is about the request (here: a prompt over its context), not a fault of
    the upstream: the client gets it as a 400 in OpenAI's shape, not a 502."""
    r = httpx.post(fake_proxy.url + "/v1/chat/completions", timeout=30, json={
        "model": "random", "max_tokens": 20,
        "messages": [{"role": "user", "content": "FAULT:http-400"}]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and "2048" in err["message"], err


def test_stop_string_inside_constrained_output(fake_proxy):
    """The upstream stopped at the request's stop string inside the JSON (vLLM says which in
    stop_reason): a 200 with finish "stop" and the text so far, as on the local path — not a
    502 blaming the upstream for a grammar it did enforce."""
    r = httpx.post(fake_proxy.url + "/v1/completions", timeout=30, json={
        "model": "random", "prompt": "FAULT:stop-string", "max_tokens": 50, "stop": [","],
        "response_format": {"type": "json_object"}})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (STOPPED_TEXT, "stop")
    # without the stop string in the request, stopping short of the grammar is not enforced
    r = httpx.post(fake_proxy.url + "/v1/completions", timeout=30, json={
        "model": "random", "prompt": "FAULT:stop-string", "max_tokens": 50,
        "response_format": {"type": "json_object"}})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_not_enforced"


def test_unicode_line_separators_do_not_split_events(fake_proxy):
    """U+2028 and U+0085 are line breaks to str.splitlines (and httpx's aiter_lines) but not to
    SSE; an upstream writes them raw in JSON. The proxy reads the event whole, and its own
    events escape them, so a client splitting lines that way reads them whole too."""
    body = {"model": "random", "max_tokens": 50,
            "messages": [{"role": "user", "content": "FAULT:line-separator"}]}
    r = httpx.post(fake_proxy.url + "/v1/chat/completions", timeout=30, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == SEPARATED_TEXT
    r = httpx.post(fake_proxy.url + "/v1/chat/completions", timeout=30,
                   json={**body, "stream": True})
    assert r.status_code == 200
    lines = [ln for ln in r.text.splitlines() if ln]  # the splitting a careless client does
    assert all(ln.startswith("data: ") for ln in lines), lines
    events = [json.loads(ln[6:]) for ln in lines if ln != "data: [DONE]"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == SEPARATED_TEXT
