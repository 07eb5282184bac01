"""Runtime settings that need no model: the context size `n_ctx=0` resolves to, and the
`--ctx-size` option reaching the runtimes the command line and the server build."""

from __future__ import annotations

import pytest

from kaname.cli import _runtime_for_format, build_parser
from kaname.formats import get_format
from kaname.runtimes.llamacpp import context_size
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.synthetic import synthetic_tokenizer

GIB = 1 << 30
GEMMA_KV = 18 * 1 * (256 + 256) * 2  # Gemma 3 270M: bytes of KV cache a token


def test_context_size_is_the_trained_one_where_memory_allows():
    assert context_size(32768, GEMMA_KV, 16 * GIB) == 32768


def test_context_size_is_capped_by_memory():
    # 64 MiB available: half of it for the cache is 1,820 tokens of 18 KiB, in steps of 256
    n = context_size(32768, GEMMA_KV, 64 << 20)
    assert n == 1792
    assert n * GEMMA_KV <= (64 << 20) // 2 < (n + 256) * GEMMA_KV


def test_context_size_bounds():
    assert context_size(32768, GEMMA_KV, 0) == 512        # never under 512 tokens...
    assert context_size(300, GEMMA_KV, 0) == 300          # ...unless the model holds fewer
    assert context_size(0, GEMMA_KV, 16 * GIB) == 4096    # a model that does not say


@pytest.mark.parametrize("model", ["random", "adversarial"])
def test_ctx_size_reaches_the_test_runtimes(model):
    fmt = get_format("qwen3")  # a synthetic vocabulary: no GGUF loaded
    assert _runtime_for_format(model, fmt, 0, 1234).n_ctx == 1234
    assert _runtime_for_format(model, fmt, 0, 0).n_ctx is None  # 0: their own, unbounded


def test_random_runtime_refuses_a_zero_context():
    tok, eos = synthetic_tokenizer(get_format("qwen3").special_tokens)
    with pytest.raises(ValueError, match="n_ctx"):
        RandomLogitsRuntime(tok, eos_token_ids=eos, n_ctx=0)


@pytest.mark.parametrize("command", [["serve"], ["chat", "--messages", "[]"],
                                     ["generate", "prompt"]])
def test_ctx_size_option(command):
    parser = build_parser()
    assert parser.parse_args([*command]).ctx_size == 0
    assert parser.parse_args([*command, "--ctx-size", "32768"]).ctx_size == 32768
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--ctx-size", "-1"])


@pytest.mark.parametrize("ctx_size", [64, 0])
def test_served_context_is_ctx_size(ctx_size):
    """`ServerConfig.ctx_size` reaches the runtime `build_app` makes: a 500-token prompt does
    not fit a 64-token context (a 400 naming it), and fits the test model's own (unbounded)."""
    from fastapi.testclient import TestClient

    from kaname.server import ServerConfig, build_app

    config = ServerConfig(model="random", format="qwen3", ctx_size=ctx_size)
    app = build_app(config, _runtime_for_format)
    assert app.state.n_ctx == (ctx_size or None)  # what `kaname serve` says it serves
    with TestClient(app) as client:
        r = client.post("/v1/completions", json={"model": "random", "prompt": "word " * 100,
                                                 "max_tokens": 4})
    if ctx_size:
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert f"maximum context length is {ctx_size} tokens" in r.json()["error"]["message"]
    else:
        assert r.status_code == 200, r.text
