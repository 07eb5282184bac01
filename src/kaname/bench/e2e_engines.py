"""The engines of `kaname bench e2e`: one driver each, all on the same GGUF and the same prompt
token ids, in one process.

- `kaname` / `kaname_unconstrained`: `Engine.generate` on kaname's own `LlamaCppRuntime`
  (llama-cpp-python's low-level API), with the schema / with none.
- `llamacpp_grammar`, `xgrammar`, `outlines`, `unconstrained`: one shared high-level
  `llama_cpp.Llama` and its `create_completion`: llama.cpp's own grammar sampler on
  llama-cpp-python's JSON-schema-to-GBNF converter; xgrammar's `GrammarMatcher` / outlines-core's
  `Guide` masking the logits through a `logits_processor`; nothing.

Every driver answers three calls:

- `prepare(case)` (untimed): compile the schema into what the engine needs, as a server would
  cache it between requests (kaname's compile cache, xgrammar's `CompiledGrammar`, outlines'
  `Index`, llama.cpp's GBNF text; llama.cpp parses the GBNF into its sampler per request, inside
  the timer, because that is where llama-cpp-python does it);
- `prime(prompt)` (untimed): leave the prompt in the model's KV cache, followed by one more
  token, so that every timed run re-evaluates exactly the prompt's last token, whichever engine
  ran before;
- `generate(prepared, case, prompt, max_tokens)` (timed): one greedy generation.

A driver may also answer `before_timing(prepared, case, prompt, max_tokens)`, called for every
prompt before the warm-up (kaname_ceiling generates there the answer its drafts will be).

A peer that cannot be imported (or set up) raises `Unavailable` with the reason, at setup.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import Case, PeerVocabulary, first_line, version_of

clock = time.perf_counter_ns


class Unavailable(Exception):
    """The engine cannot run here; the message says why."""


@dataclass
class Generation:
    """One timed generation."""

    text: str
    tokens: int  # generated tokens (kaname: sampled + forced), end-of-sequence not counted
    seconds: float  # wall time of the whole call
    ttft_s: float | None  # call start -> first token available
    finish_reason: str
    sample_ns: int  # the whole sampling steps (logits -> chosen token), summed
    constraint_ns: int | None  # time in the constraint, measured directly (None: not separable)
    forced: int = 0
    drafted: int = 0  # draft tokens proposed (kaname's verified drafts)
    accepted: int = 0  # of which the model kept
    error: str | None = None


def threads_default() -> int:
    return int(os.environ.get("KANAME_THREADS") or os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# kaname


# kaname's engines by name: how each decodes under the schema (`Engine.generate`'s
# `drafting`), or None: no constraint at all.
KANAME_MODES: dict[str, str | None] = {"kaname": "verify", "kaname_full_rows": "verify",
                                       "kaname_ceiling": "verify", "kaname_forced": "force",
                                       "kaname_none": "off", "kaname_unconstrained": None}
_KANAME_METHODS = {
    "verify": "drafts (the grammar's forced tokens and prompt n-grams) the model verifies, "
              "each kept only where its greedy pick agrees: the default",
    "force": "forced tokens committed without the model's say (kaname before verified "
             "drafts: may change answers)",
    "off": "one token per model call, neither forcing nor drafting: the reference the "
           "other two must match",
}


_CEILING = ("drafter=KnownAnswer(answer)), greedy: drafts that are the answer itself (its "
            "tokens from an untimed generation one token a call, made before any timed run), "
            "verified like any draft: no drafter can do better, so this is the ceiling of "
            "verified drafts on this runtime")


class KanameDriver:
    def __init__(self, engine: Any, name: str):
        self.engine = engine
        self.name = name
        self.answers: dict[tuple[Any, ...], list[int]] = {}  # kaname_ceiling's
        self.drafting = KANAME_MODES[name]
        self.constrained = self.drafting is not None
        self.version = version_of("kaname")
        if self.drafting is not None:
            how = (_CEILING if name == "kaname_ceiling" else
                   f"drafting={self.drafting!r}), greedy: {_KANAME_METHODS[self.drafting]}")
            self.method = (f"Engine.generate(prompt ids, schema, {how}; constraint time = the "
                           "decode loop's constraint_ns (pick incl. its argmax over the "
                           "logits, commit, drafts), measured directly"
                           + ("; every logits row in full (LlamaCppRuntime(few_rows=False))"
                              if name == "kaname_full_rows" else ""))
        else:
            self.method = ("Engine.generate(prompt ids, None), greedy: kaname's decode loop on "
                           "its LlamaCppRuntime with no matcher; sampling time = its argmax")

    def prepare(self, case: Case) -> Any:
        return self.engine.compile(case.schema) if self.constrained else None

    def prime(self, prompt: Sequence[int]) -> None:
        self.engine.runtime.start([*prompt, prompt[-1]])

    def before_timing(self, prepared: Any, case: Case, prompt: Sequence[int],
                      max_tokens: int) -> None:
        """kaname_ceiling: the answer its drafts will be, one token a call (untimed)."""
        if self.name == "kaname_ceiling":
            self.answers[case.name, tuple(prompt), max_tokens] = self.engine.generate(
                list(prompt), prepared, max_tokens=max_tokens, drafting="off").tokens

    def generate(self, prepared: Any, case: Case, prompt: Sequence[int],
                 max_tokens: int) -> Generation:
        first = [0]

        def on_tokens(new: list[int]) -> None:
            if not first[0]:
                first[0] = clock()

        drafter = None
        if self.name == "kaname_ceiling":
            from ..decoding.drafts import KnownAnswer

            drafter = KnownAnswer(self.engine.runtime.tokenizer,
                                  self.answers[case.name, tuple(prompt), max_tokens])
        t0 = clock()
        r = self.engine.generate(list(prompt), prepared, max_tokens=max_tokens,
                                 temperature=0.0, drafting=self.drafting or "off",
                                 on_tokens=on_tokens, drafter=drafter)
        t1 = clock()
        ns = int(sum(r.constraint_ns))
        u = r.usage
        return Generation(r.text, u.completion_tokens, (t1 - t0) / 1e9,
                          (first[0] - t0) / 1e9 if first[0] else None, r.finish_reason,
                          sample_ns=ns, constraint_ns=ns if self.constrained else None,
                          forced=u.forced_tokens, drafted=u.draft_tokens,
                          accepted=u.draft_accepted)


def load_kaname(path: Path, threads: int, *, few_rows: bool = True) -> Any:
    from ..engine import Engine
    from ..runtimes.llamacpp import LlamaCppRuntime

    return Engine(LlamaCppRuntime(path, n_threads=threads, few_rows=few_rows))


# ---------------------------------------------------------------------------------------------
# llama-cpp-python's high-level Llama, shared by the peers


class SharedLlama:
    """One `llama_cpp.Llama` for every peer, its `sample` (the whole sampler chain: candidates,
    custom logits processors, grammar, greedy, accept) timed per call."""

    def __init__(self, path: Path, threads: int, n_ctx: int = 4096, n_batch: int = 512):
        try:
            import llama_cpp
            from llama_cpp import Llama
        except Exception as e:
            raise Unavailable(f"llama-cpp-python cannot be imported ({first_line(e)})") from e
        self.lc = llama_cpp
        # Context as kaname's runtime has it: same n_ctx / n_batch / threads, and flash attention
        # on (kaname leaves llama.cpp's default, "auto", which enables it on this CPU; the
        # high-level Llama would otherwise turn it off).
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                         n_threads=threads, n_threads_batch=threads, flash_attn=True,
                         verbose=False)
        self.n_vocab = int(self.llm.n_vocab())
        self.calls: list[tuple[int, int]] = []
        original = self.llm.sample
        calls = self.calls

        def timed_sample(*args: Any, **kwargs: Any) -> int:
            t0 = clock()
            token = original(*args, **kwargs)
            calls.append((t0, clock()))
            return token

        self.llm.sample = timed_sample  # type: ignore[method-assign]

    def prime(self, prompt: Sequence[int]) -> None:
        llm = self.llm
        common = 0
        for a, b in zip(llm.input_ids[:llm.n_tokens], prompt, strict=False):
            if int(a) != b:
                break
            common += 1
        llm.n_tokens = min(common, len(prompt))  # `eval` drops the cache beyond n_tokens
        llm.eval([*prompt[llm.n_tokens:], prompt[-1]])

    def complete(self, prompt: Sequence[int], max_tokens: int, *, grammar: Any = None,
                 processor_factory: Callable[[], Any] | None = None) -> tuple[Generation, Any]:
        """One greedy create_completion; the processor (if any) is made inside the timer."""
        from llama_cpp import LogitsProcessorList

        self.calls.clear()
        t0 = clock()
        processor = processor_factory() if processor_factory is not None else None
        out = self.llm.create_completion(
            prompt=list(prompt), max_tokens=max_tokens, temperature=0.0, repeat_penalty=1.0,
            grammar=grammar,
            logits_processor=LogitsProcessorList([processor]) if processor is not None else None)
        t1 = clock()
        choice = out["choices"][0]  # type: ignore[index]
        calls = self.calls
        gen = Generation(
            text=choice["text"], tokens=int(out["usage"]["completion_tokens"]),  # type: ignore[index]
            seconds=(t1 - t0) / 1e9, ttft_s=(calls[0][1] - t0) / 1e9 if calls else None,
            finish_reason=str(choice["finish_reason"]),
            sample_ns=sum(b - a for a, b in calls), constraint_ns=None)
        return gen, processor


class LlamaPyDriver:
    """`unconstrained` and `llamacpp_grammar`: create_completion with no grammar / with
    llama-cpp-python's `LlamaGrammar.from_json_schema`."""

    def __init__(self, shared: SharedLlama, *, grammar: bool):
        self.shared = shared
        self.grammar = grammar
        self.name = "llamacpp_grammar" if grammar else "unconstrained"
        self.version = version_of("llama-cpp-python")
        if grammar:
            from llama_cpp.llama_grammar import LlamaGrammar

            self.LlamaGrammar = LlamaGrammar
            self.method = ("Llama.create_completion(grammar=LlamaGrammar.from_json_schema(schema)"
                           "), greedy: llama.cpp's grammar sampler in llama-cpp-python's sampler "
                           "chain; constraint time = its Llama.sample time per token minus the "
                           "unconstrained engine's (the grammar runs inside llama.cpp's sampler "
                           "chain and cannot be timed on its own)")
        else:
            self.method = ("Llama.create_completion, no grammar, greedy: the baseline of the "
                           "peers (same driver); sampling time = Llama.sample")

    def prepare(self, case: Case) -> Any:
        if not self.grammar:
            return None
        return self.LlamaGrammar.from_json_schema(json.dumps(case.schema), verbose=False)

    def prime(self, prompt: Sequence[int]) -> None:
        self.shared.prime(prompt)

    def generate(self, prepared: Any, case: Case, prompt: Sequence[int],
                 max_tokens: int) -> Generation:
        gen, _ = self.shared.complete(prompt, max_tokens, grammar=prepared)
        return gen


# ---------------------------------------------------------------------------------------------
# Logits processors (xgrammar, outlines-core) on llama-cpp-python


class _Processor:
    """Commits the tokens generated since its last call, then masks `scores`. Called by
    llama-cpp-python with (input ids so far, the logits of all candidates as a strided view)."""

    def __init__(self) -> None:
        self.seen: int | None = None
        self.ns = 0
        self.error: str | None = None

    def _commit(self, token: int) -> None:
        raise NotImplementedError

    def _mask(self, scores: Any) -> Any:
        raise NotImplementedError

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0 = clock()
        n = len(input_ids)
        if self.seen is not None and self.error is None:
            for token in input_ids[self.seen:n]:
                try:
                    self._commit(int(token))
                except Exception as e:  # ctypes callbacks swallow exceptions: keep it
                    self.error = first_line(e)
                    break
        self.seen = n
        out = scores if self.error is not None else self._mask(scores)
        self.ns += clock() - t0
        return out


class _XGrammarProcessor(_Processor):
    def __init__(self, xgr: Any, torch: Any, np: Any, compiled: Any, n_vocab: int):
        super().__init__()
        self.xgr, self.torch, self.np = xgr, torch, np
        self.matcher = xgr.GrammarMatcher(compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, n_vocab)

    def _commit(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise ValueError(f"xgrammar refused token {token}")

    def _mask(self, scores: Any) -> Any:
        if not self.matcher.fill_next_token_bitmask(self.bitmask):
            return scores  # all tokens allowed: nothing to apply
        # xgrammar's CPU kernel needs contiguous logits (on the strided view llama-cpp-python
        # passes it masks the wrong entries), so it masks a copy.
        logits = self.np.ascontiguousarray(scores)
        self.xgr.apply_token_bitmask_inplace(self.torch.from_numpy(logits), self.bitmask)
        return logits


class XGrammarDriver:
    name = "xgrammar"

    def __init__(self, shared: SharedLlama | None, vocab: PeerVocabulary) -> None:
        try:
            import numpy as np
            import torch
            import xgrammar as xgr
        except Exception as e:
            raise Unavailable(f"xgrammar cannot be imported ({first_line(e)}); "
                              "pip install xgrammar (it needs torch)") from e
        self.shared, self.xgr, self.torch, self.np = shared, xgr, torch, np
        self.version = version_of("xgrammar")
        self.n_vocab = shared.n_vocab if shared is not None else vocab.n_vocab
        info = xgr.TokenizerInfo(vocab.pieces(), vocab_type=xgr.VocabType.RAW,
                                 vocab_size=self.n_vocab, stop_token_ids=list(vocab.eos),
                                 add_prefix_space=False)
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        torch.set_num_threads(1)  # llama.cpp has the cores; xgrammar's kernel is its own C++
        self.method = ("Llama.create_completion(logits_processor=[xgrammar GrammarMatcher]), "
                       "greedy; compile_json_schema(any_whitespace=False: separators ', ' ': ', "
                       "as kaname's); per call: accept the new token, fill_next_token_bitmask, "
                       "apply_token_bitmask_inplace on a contiguous copy of the logits; "
                       "constraint time = time inside the processor, measured directly "
                       "(llama-cpp-python's own wrapping and write-back not counted)")

    def prepare(self, case: Case) -> Any:
        return self.compiler.compile_json_schema(json.dumps(case.schema), any_whitespace=False)

    def prime(self, prompt: Sequence[int]) -> None:
        assert self.shared is not None
        self.shared.prime(prompt)

    def processor(self, prepared: Any) -> _XGrammarProcessor:
        return _XGrammarProcessor(self.xgr, self.torch, self.np, prepared, self.n_vocab)

    def generate(self, prepared: Any, case: Case, prompt: Sequence[int],
                 max_tokens: int) -> Generation:
        assert self.shared is not None
        gen, proc = self.shared.complete(prompt, max_tokens,
                                         processor_factory=lambda: self.processor(prepared))
        gen.constraint_ns, gen.error = proc.ns, proc.error
        return gen


class _OutlinesProcessor(_Processor):
    def __init__(self, oc: Any, kernels: Any, index: Any, n_vocab: int):
        super().__init__()
        self.guide = oc.Guide(index)
        self.kernels = kernels
        self.mask = kernels.allocate_token_bitmask(n_vocab)

    def _commit(self, token: int) -> None:
        self.guide.advance(token, return_tokens=False)

    def _mask(self, scores: Any) -> Any:
        self.kernels.fill_next_token_bitmask(self.guide, self.mask)
        self.kernels.apply_token_bitmask_inplace(scores, self.mask)  # numba: strided is fine
        return scores


class OutlinesDriver:
    name = "outlines"
    WHITESPACE = r"[ ]?"

    def __init__(self, shared: SharedLlama | None, vocab: PeerVocabulary) -> None:
        try:
            import outlines_core as oc
            from outlines_core.json_schema import build_regex_from_schema
        except Exception as e:
            raise Unavailable(f"outlines-core cannot be imported ({first_line(e)}); "
                              "pip install outlines-core") from e
        try:
            import outlines_core.kernels.numpy as kernels
        except Exception as e:
            raise Unavailable(f"outlines-core's numpy kernels cannot be imported "
                              f"({first_line(e)}); pip install numba") from e
        self.shared, self.oc, self.kernels = shared, oc, kernels
        self.build_regex = build_regex_from_schema
        self.version = version_of("outlines-core")
        self.n_vocab = shared.n_vocab if shared is not None else vocab.n_vocab
        self.vocabulary = oc.Vocabulary(vocab.eos[0], vocab.token_ids_by_bytes())
        self.method = ("Llama.create_completion(logits_processor=[outlines-core Guide]), greedy "
                       "(what outlines' llama.cpp model does); Index(build_regex_from_schema("
                       f"schema, whitespace_pattern={self.WHITESPACE!r})); per call: "
                       "Guide.advance on the new token, kernels.numpy fill_next_token_bitmask + "
                       "apply_token_bitmask_inplace (numba) on the logits; constraint time = "
                       "time inside the processor, measured directly (llama-cpp-python's own "
                       "wrapping and write-back not counted)")

    def prepare(self, case: Case) -> Any:
        regex = self.build_regex(json.dumps(case.schema), self.WHITESPACE)
        return self.oc.Index(regex, self.vocabulary)

    def prime(self, prompt: Sequence[int]) -> None:
        assert self.shared is not None
        self.shared.prime(prompt)

    def processor(self, prepared: Any) -> _OutlinesProcessor:
        return _OutlinesProcessor(self.oc, self.kernels, prepared, self.n_vocab)

    def generate(self, prepared: Any, case: Case, prompt: Sequence[int],
                 max_tokens: int) -> Generation:
        assert self.shared is not None
        gen, proc = self.shared.complete(prompt, max_tokens,
                                         processor_factory=lambda: self.processor(prepared))
        gen.constraint_ns, gen.error = proc.ns, proc.error
        return gen


# ---------------------------------------------------------------------------------------------
# Setup


def load_drivers(names: Sequence[str], threads: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The drivers of `names` that can run here, and a reason for each that cannot."""
    from ..runtimes.models import default_model_path

    path = default_model_path()
    drivers: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    engine = None
    if set(KANAME_MODES) & set(names):
        engine = load_kaname(path, threads)
    # the verified path with every logits row in full, on a context of its own
    full_rows = load_kaname(path, threads, few_rows=False) if "kaname_full_rows" in names \
        else None
    peers = [n for n in names if n in ("llamacpp_grammar", "xgrammar", "outlines",
                                       "unconstrained")]
    shared: SharedLlama | None = None
    if peers:
        try:
            shared = SharedLlama(path, threads)
        except Unavailable as e:
            unavailable.update(dict.fromkeys(peers, str(e)))
        except Exception as e:
            unavailable.update(dict.fromkeys(
                peers, f"llama-cpp-python's Llama could not load the model ({first_line(e)})"))
    vocab: PeerVocabulary | None = None  # one byte table for xgrammar and outlines
    if {"xgrammar", "outlines"} & set(names):
        from ..runtimes.llamacpp import default_vocab

        v = default_vocab()
        vocab = PeerVocabulary(v.tokenizer, v.eos_token_ids)
    for name in names:
        if name in unavailable:
            continue
        try:
            if name in KANAME_MODES:
                drivers[name] = KanameDriver(full_rows if name == "kaname_full_rows" else engine,
                                             name)
            elif shared is None:
                continue
            elif name in ("llamacpp_grammar", "unconstrained"):
                drivers[name] = LlamaPyDriver(shared, grammar=name == "llamacpp_grammar")
            elif name == "xgrammar":
                assert vocab is not None
                drivers[name] = XGrammarDriver(shared, vocab)
            elif name == "outlines":
                assert vocab is not None
                drivers[name] = OutlinesDriver(shared, vocab)
        except Unavailable as e:
            unavailable[name] = str(e)
        except Exception as e:
            unavailable[name] = f"setup failed: {first_line(e)}"
    if shared is not None and engine is not None and shared.n_vocab != engine.runtime.n_vocab:
        raise RuntimeError("kaname's runtime and llama-cpp-python disagree on the vocabulary "
                           f"size ({engine.runtime.n_vocab} vs {shared.n_vocab})")
    return drivers, unavailable
