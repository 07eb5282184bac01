"""`kaname serve`: an OpenAI-compatible server on the embedded model, a test model, a GGUF, or
in front of an upstream (vLLM / SGLang / another kaname) that enforces the grammar it is sent."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import llguidance as llg
from fastapi import FastAPI

from ..engine import Engine
from ..errors import ConstraintError, ModelError
from ..formats import get_format
from ..grammar import GrammarCompiler
from .app import create_app
from .backend import Backend
from .config import ServerConfig
from .lifecycle import serve
from .local import LocalBackend, batch_of
from .metrics import Metrics
from .upstream import UpstreamBackend, discover_model


def build_app(config: ServerConfig, runtime_factory: Any) -> FastAPI:
    """`runtime_factory(model, fmt, seed, ctx_size, n_seq)` makes the runtime: `ctx_size` is
    `config.ctx_size` (0 meaning the model's own), `n_seq` the sequences it must hold at once
    (the local batch's size; 1 for the upstream's tokenizer)."""
    fmt = get_format(config.format)
    if config.reasoning in ("on", "required") and fmt.reasoning is None:
        raise ConstraintError(f"--reasoning {config.reasoning}: format {fmt.name} has no "
                              "reasoning block")
    if config.reasoning == "off":
        fmt.opening("off")  # a model whose prompt always opens the block cannot be switched off

    def make_runtime(n_seq: int = 1) -> Any:
        return runtime_factory(config.model, fmt, config.seed, config.ctx_size, n_seq)

    if config.upstream and not config.upstream_model:
        config = dataclasses.replace(
            config, upstream_model=discover_model(config.upstream, config.upstream_api_key))
    if config.upstream:
        assert config.upstream_model is not None  # given, or discovered above
        # The grammar's special tokens are ids of this vocabulary: it must be the upstream's.
        tokenizer = _load_tokenizer(config.tokenizer) if config.tokenizer else \
            make_runtime().tokenizer
        compiler = GrammarCompiler(tokenizer, guards=config.guards,
                                   cache_bytes=config.compile_cache_bytes())
        metrics = Metrics(lambda: (compiler.hits, compiler.misses), lambda: compiler.cache.bytes)
        backend: Backend = UpstreamBackend(
            config.upstream, config.upstream_model, config.model_id(),
            tokenizer, compiler, metrics, api_key=config.upstream_api_key,
            max_concurrency=config.concurrency(), max_queue=config.max_queue,
            request_timeout=config.request_timeout, dialect=config.upstream_dialect,
            end_marker=fmt.end_of_turn)
    else:
        size = config.concurrency()
        engine = Engine(make_runtime(size), guards=config.guards,
                        cache_bytes=config.compile_cache_bytes())
        compiler = engine.compiler
        metrics = Metrics(lambda: (compiler.hits, compiler.misses), lambda: compiler.cache.bytes)
        backend = LocalBackend(engine, batch_of(engine, size), config.model_id(), metrics,
                               max_queue=config.max_queue,
                               request_timeout=config.request_timeout)
    app = create_app(config, backend, metrics)
    app.state.config = config  # as resolved here (the upstream's model discovered)
    app.state.n_ctx = backend.n_ctx  # the runtime's real context (None: unbounded or upstream)
    return app


def _load_tokenizer(path: str) -> llg.LLTokenizer:
    """The upstream's vocabulary from a Hugging Face tokenizer.json (the model's own file)."""
    try:
        return llg.LLTokenizer(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"--tokenizer: cannot load {path}: {e}") from e


__all__ = ["ServerConfig", "build_app", "create_app", "serve"]
