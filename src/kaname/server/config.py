"""Server settings; the defaults are the secure ones (loopback only, bounded everything)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..grammar import Guards


@dataclass
class ServerConfig:
    model: str = "default"          # default | random | adversarial | scripted:PATH | PATH.gguf
    format: str = "gemma3"
    format_why: str = "the default"  # how the format was chosen (the start-up line says)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    upstream: str | None = None     # base URL of an OpenAI-compatible server, e.g. .../v1
    upstream_model: str | None = None
    upstream_api_key: str | None = None
    tokenizer: str | None = None    # HF tokenizer.json of the upstream model (proxy mode)
    upstream_dialect: Literal["vllm", "sglang"] = "vllm"  # where the grammar goes in the body
    # names clients may use, the first being the id /v1/models lists (--served-model-name A B)
    served_model_names: tuple[str, ...] = ()
    any_model_name: bool = False    # answer whatever model name a request gives (one model)
    strict_level: Literal["full", "names", "off"] = "full"
    # generations at once: local, the batch's size (default 8: on 2 cores a step of 8
    # sequences gives ~2x the tokens/s of one, docs/benchmarks.md); upstream, requests in
    # flight (default 64: the upstream batches them)
    max_concurrency: int | None = None
    max_queue: int = 64             # requests waiting beyond those; more get 429
    request_timeout: float = 300.0  # seconds without progress (lifecycle.py)
    # seconds for a request's headers and body to arrive (a slow client: closed, or 408)
    read_timeout: float = 30.0
    max_body_bytes: int = 4 * 1024 * 1024
    max_tools: int = 128
    max_tokens_limit: int = 8192
    compile_cache_mb: int = 256     # compiled grammars kept (an LRU bounded by bytes)
    # the output budget of a request that sends none; None: what fits, up to
    # max_tokens_limit (Codex sends none, and an apply_patch call runs to thousands of tokens)
    default_max_tokens: int | None = None
    chat_template: str | None = None  # the model's Jinja template (else the format's spec)
    seed: int = 0                   # seed of the random/adversarial test models
    # tokens of context of a local model (llama.cpp's -c); 0: the model's own trained context
    # where memory allows it (the test models: unbounded)
    ctx_size: int = 0
    guards: Guards = field(default_factory=Guards)  # defaults; a request's kaname.guards
    # reasoning where a request does not say: "on" (the model may reason), "required" (every
    # turn starts with a reasoning block) or "off" (the model does not reason: no request can
    # switch it on). None: "on" for formats with a reasoning block.
    reasoning: Literal["on", "off", "required"] | None = None
    # local models: drafts the model verifies (forced tokens, prompt n-grams); the same answers
    # either way, so on unless a request says `kaname.draft: false` (--no-draft: off for all)
    draft: bool = True

    def compile_cache_bytes(self) -> int:
        return self.compile_cache_mb << 20

    def concurrency(self) -> int:
        return self.max_concurrency or (64 if self.upstream else 8)

    def model_id(self) -> str:
        """The id /v1/models lists and responses carry."""
        return self.served_names()[0]

    def served_names(self) -> list[str]:
        """Every name a request may give ("default" too, see `accepts_model`), the id first:
        --served-model-name's, else the one the model is known by."""
        if self.served_model_names:
            return list(dict.fromkeys(self.served_model_names))
        if self.upstream and self.upstream_model:
            return [self.upstream_model]
        if self.model == "default":
            return ["gemma-3-270m"]
        if self.model in ("random", "adversarial"):
            return [self.model]
        if self.model.startswith("scripted:"):
            return ["scripted"]
        return [self.model.rsplit("/", 1)[-1].removesuffix(".gguf")]

    def accepts_model(self, name: str) -> bool:
        """Whether a request naming model `name` is answered: any name with
        --any-model-name (clients such as Claude Code send their own default model name),
        else a served name or "default"."""
        return self.any_model_name or name == "default" or name in self.served_names()
