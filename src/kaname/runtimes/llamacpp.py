"""GGUF models through llama-cpp-python's low-level API.

Low-level on purpose: logits are read with `llama_get_logits_ith` at the positions asked for
(the output layer is most of a small model's cost per position), or, for one sequence, a call
stops at the final hidden state and each row is computed from it when it is read (a few
tokens' logits, or the whole row by ggml's kernel: `output_layer.py`, `ggml_matvec.py`); a
sampled token and its drafts go to the model in one `llama_decode`, the KV cache is kept for
the longest common prefix of consecutive prompts, and several sequences (`n_seq`, each its own
`seq_id` and KV stream) share one `llama_decode` a step (`batched`).
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

from ..errors import ModelError
from .base import ModelCall, Only, OverRuntime, Rows
from .ggml_matvec import MatVec
from .output_layer import output_layer

try:
    import llama_cpp as lc
except ImportError as e:  # pragma: no cover - a declared dependency
    raise ModelError("llama-cpp-python is not installed (pip install llama-cpp-python)") from e

_SPECIAL_ATTRS = lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN | \
    lc.LLAMA_TOKEN_ATTR_UNUSED
_init_lock = threading.Lock()
_initialised = False


@lc.llama_log_callback
def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp logs to stderr by default; the CLI's stderr is for our own messages."""


def _backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            lc.llama_log_set(_quiet_log, ctypes.c_void_p(0))
            lc.llama_backend_init()
            _initialised = True


def _ggml_dir() -> Path:
    """Where llama-cpp-python keeps ggml's libraries (beside libllama)."""
    return Path(lc.llama_cpp._lib._name).parent


class _FinalHidden:
    """The final hidden state (llama.cpp's `result_norm`, just before the output layer) read
    out of the graph through ggml's eval callback, which can also end the computation there:
    a node whose callback answers false is the graph's last (the KV cells are written by
    then). Unarmed, the callback only answers "not needed" for each node."""

    NODE = b"result_norm"

    def __init__(self, n_embd: int):
        lib = ctypes.CDLL(str(_ggml_dir() / "libggml-base.so"))
        self._name = lib.ggml_get_name
        self._name.restype, self._name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        self._data = lib.ggml_get_data_f32
        self._data.restype = ctypes.POINTER(ctypes.c_float)
        self._data.argtypes = [ctypes.c_void_p]
        self._count = lib.ggml_nelements
        self._count.restype, self._count.argtypes = ctypes.c_int64, [ctypes.c_void_p]
        self.n_embd = n_embd
        self.armed = False
        self.stop = False
        self.parts: list[NDArray[np.float32]] = []
        self.callback = lc.ggml_backend_sched_eval_callback(self._on_node)

    def _on_node(self, tensor: int, ask: bool, _user: int) -> bool:
        if not self.armed:
            return not ask
        if ask:
            return self._name(tensor) == self.NODE
        n = self._count(tensor)
        self.parts.append(np.ctypeslib.as_array(self._data(tensor), shape=(n,)).reshape(
            -1, self.n_embd).copy())
        return not self.stop

    def take(self) -> NDArray[np.float32] | None:
        """The rows read since the last `take` (a call longer than `n_batch` is several
        `llama_decode`s, each its part), in order; None where the graph gave none."""
        parts, self.parts = self.parts, []
        return np.concatenate(parts) if parts else None


def _is_placeholder(piece: bytes) -> bool:
    """User-defined tokens that name a marker rather than text: `<unused12>`, `[multimodal]`."""
    return (piece.startswith(b"<") and piece.endswith(b">")) or (
        piece.startswith(b"[") and piece.endswith(b"]") and b" " not in piece and len(piece) > 2)


def build_tokenizer(vocab: lc.llama_vocab_p) -> llg.LLTokenizer:
    """An llguidance tokenizer for a llama.cpp vocabulary.

    Control, unknown and unused tokens, and user-defined placeholders, are marked special
    (llguidance's 0xff prefix): grammars never produce them inside text or JSON strings, only
    where a grammar names them as `<|...|>` / `<[id]>`.
    """
    n = lc.llama_vocab_n_tokens(vocab)
    buf = ctypes.create_string_buffer(16 * 1024)
    pieces: list[bytes] = []
    for token in range(n):
        size = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
        if size < 0:
            raise ModelError(f"token {token} does not fit a {len(buf)}-byte buffer")
        piece = buf.raw[:size]
        attr = lc.llama_vocab_get_attr(vocab, token)
        if attr & _SPECIAL_ATTRS or (attr & lc.LLAMA_TOKEN_ATTR_USER_DEFINED
                                     and _is_placeholder(piece)):
            piece = b"\xff" + piece
        pieces.append(piece)
    eos = sorted({t for t in (lc.llama_vocab_eos(vocab), lc.llama_vocab_eot(vocab)) if t >= 0})
    fptr = ctypes.cast(lc.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    return llg.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
        tokens=pieces, vocab_ptr=vocab, tokenize_fptr=fptr, eos_token=eos, slices=None)


@dataclass
class Vocab:
    """A GGUF's vocabulary without its weights: what tests and the random runtimes need."""

    path: Path
    model: lc.llama_model_p
    vocab: lc.llama_vocab_p
    tokenizer: llg.LLTokenizer
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    add_bos: bool

    markers: frozenset[str] = frozenset()  # control tokens' text (`<start_of_turn>`)

    def tokenize(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        """llama.cpp's tokenization of `text`, special tokens parsed. A long text is taken in
        pieces cut just before a control token (`_cuts`): llama.cpp splits the text at every
        special token before it tokenizes, which costs time quadratic in the markers it holds
        (a 4,000-turn conversation: 2.3 s in one call; 60,000 turns, minutes), and no token
        spans a special token, so the pieces give the very same ids."""
        add = self.add_bos if add_bos is None else add_bos
        cuts = self._cuts(text)
        if not cuts:
            return self._tokenize(text, add)
        out: list[int] = []
        for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
            out += self._tokenize(text[start:end], add and start == 0)
        return out

    _PIECE = 4096  # characters a piece has at least before it is cut at a marker

    def _cuts(self, text: str) -> list[int]:
        """Where to cut `text`: before a control token, every _PIECE characters or more."""
        if len(text) <= self._PIECE or not self.markers:
            return []
        cuts: list[int] = []
        last = 0
        for m in _MARKER.finditer(text, self._PIECE):
            if m.start() - last >= self._PIECE and m.group() in self.markers:
                cuts.append(m.start())
                last = m.start()
        return cuts

    def _tokenize(self, text: str, add: bool) -> list[int]:
        data = text.encode()
        cap = len(data) + 8
        out = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), out, cap, add, True)
        if n < 0:
            cap = -n
            out = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), out, cap, add, True)
        return list(out[:n])


# How chat formats' control tokens look (`<start_of_turn>`, `<|im_start|>`): where a long
# prompt may be cut for tokenizing; a format whose markers look otherwise is taken whole.
_MARKER = re.compile(r"<[^<>\s]{1,64}>")


def _markers(vocab: lc.llama_vocab_p) -> frozenset[str]:
    """The text of the vocabulary's control tokens that look like markers (_MARKER)."""
    buf = ctypes.create_string_buffer(256)
    out = set()
    for token in range(lc.llama_vocab_n_tokens(vocab)):
        if lc.llama_vocab_get_attr(vocab, token) & lc.LLAMA_TOKEN_ATTR_CONTROL:
            size = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
            if size > 0:
                piece = buf.raw[:size].decode("utf-8", errors="replace")
                if _MARKER.fullmatch(piece):
                    out.add(piece)
    return frozenset(out)


_vocab_cache: dict[tuple[str, bool, bool], Vocab] = {}
_vocab_lock = threading.Lock()


def load_vocab(path: str | Path, *, vocab_only: bool = True, repack: bool = False) -> Vocab:
    """Load (once per process) a GGUF, weights included unless `vocab_only`; `repack`: let
    ggml repack the weights its CPU kernels can take several columns at a time (see
    `LlamaCppRuntime`)."""
    path = Path(path)
    key = (str(path.resolve()), vocab_only, repack and not vocab_only)
    with _vocab_lock:
        if key in _vocab_cache:
            return _vocab_cache[key]
        if not path.is_file():
            raise ModelError(f"no such model file: {path}")
        _backend()
        params = lc.llama_model_default_params()
        params.vocab_only = vocab_only
        params.use_extra_bufts = repack  # ggml's "extra buffer types": repacked weights
        model = lc.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise ModelError(f"llama.cpp could not load {path}")
        vocab = lc.llama_model_get_vocab(model)
        tokenizer = _tokenizer_for(str(path.resolve()), vocab)
        bos = lc.llama_vocab_bos(vocab)
        v = Vocab(path, model, vocab, tokenizer, tuple(tokenizer.eos_tokens),
                  bos if bos >= 0 else None, bool(lc.llama_vocab_get_add_bos(vocab)),
                  _markers(vocab))
        _vocab_cache[key] = v
        return v


_tokenizers: dict[str, llg.LLTokenizer] = {}


def _tokenizer_for(path: str, vocab: lc.llama_vocab_p) -> llg.LLTokenizer:
    # Building it walks the whole vocabulary (~4 s for 262k tokens): once per file.
    if path not in _tokenizers:
        _tokenizers[path] = build_tokenizer(vocab)
    return _tokenizers[path]


def default_vocab() -> Vocab:
    """The embedded Gemma 3 270M vocabulary (262,144 tokens)."""
    from .models import default_model_path

    return load_vocab(default_model_path())


# Gemma 3 270M (trained for 32,768 tokens), measured here (RSS of a process that loaded the
# weights, 459 MiB, then created a context): +64 MiB at n_ctx 4,096, +577 MiB at 32,768, i.e.
# 18 KiB a token: 18 layers x 1 KV head x (256 + 256) dims x 2 bytes, every layer in full
# (llama.cpp's `swa_full`, kept on so that consecutive prompts can share their prefix). So
# the trained context costs little on this model; the cap matters for larger models.
_CONTEXT_STEP = 256  # llama.cpp pads context sizes to multiples of 256
_MIN_CONTEXT = 512
_KV_SHARE = 0.5  # of the memory available when the context is created


def kv_bytes_per_token(model: lc.llama_model_p) -> int:
    """Bytes of KV cache one token takes: f16 keys and values (llama.cpp's default cache
    types) in every layer."""
    n_head = lc.llama_model_n_head(model)
    head_dim = lc.llama_model_n_embd(model) // max(n_head, 1)
    key = _metadata_int(model, "attention.key_length") or head_dim
    value = _metadata_int(model, "attention.value_length") or head_dim
    return lc.llama_model_n_layer(model) * lc.llama_model_n_head_kv(model) * (key + value) * 2


def _metadata_int(model: lc.llama_model_p, key: str) -> int | None:
    """`{architecture}.{key}` of the GGUF's metadata as an int; None where absent."""
    buf = ctypes.create_string_buffer(128)

    def value(name: str) -> str | None:
        n = lc.llama_model_meta_val_str(model, name.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else None

    arch = value("general.architecture")
    text = value(f"{arch}.{key}") if arch else None
    return int(text) if text is not None and text.isdigit() else None


def available_memory() -> int:
    """Bytes the kernel could give without swapping (MemAvailable), else free physical."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def context_size(n_ctx_train: int, kv_per_token: int, available: int) -> int:
    """The context `n_ctx=0` gets: the trained one, capped so that the KV cache takes at most
    half of the available memory (the weights, compute buffers and the server need the
    rest), in llama.cpp's steps of 256; never under 512 tokens (or the trained context where
    that is smaller), and 4,096 where the model does not say what it was trained for."""
    trained = n_ctx_train if n_ctx_train > 0 else 4096
    fits = int(available * _KV_SHARE) // max(kv_per_token, 1) // _CONTEXT_STEP * _CONTEXT_STEP
    return min(trained, max(fits, _MIN_CONTEXT))


# The most tokens a call may hold and still give each token's logits bit for bit as a call of
# one token does, with repacked weights or without. Measured on Gemma 3 270M Q4_K_M: repacked
# kernels take 4 columns at a time from a call of 4 tokens (logits move by up to ~1.5, enough
# to flip a near tie); plain ones change path from 8 tokens (by up to ~1.7). What it costs
# (2 cores, one sequence, logits at every position, ms): plain 1: 21, 4: 51, 7: 86; repacked
# 1: 22, 3: 51-56, 16: 113 (plain 160), and a 400-token prefill 1.4 s (plain 1.5-1.9 s).
_EXACT_BATCH = {False: 7, True: 3}
# ...within a sequence's first 256 KV cells only. Beyond them ggml's attention computes a call
# of several tokens otherwise than a call of one (measured on an AVX-512 machine, flash
# attention on or off: from the 257th cell every row of a 2-7 token call differs, by up to
# ~0.7), so a call that would reach past them checks one token.
_EXACT_CELLS = 256


class LlamaCppRuntime:
    """A GGUF model on the CPU (or whatever llama.cpp was built for)."""

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_batch: int = 512,
                 n_threads: int | None = None, n_seq: int = 1, kv_cells: int | None = None,
                 few_rows: bool = True):
        """`n_ctx`: tokens of context of a sequence; 0 is the model's trained context where
        memory allows it (`context_size`), as llama.cpp's server reads `-c 0`. `n_seq`:
        sequences `batched` can run at once, in one pool of `kv_cells` KV cells (default
        `n_ctx`: the memory of one sequence's context, whatever `n_seq`) where a cell holding a
        prompt prefix serves every sequence that shares it; the batch's scheduler admits
        sequences while their prompts and budgets fit the pool (`LlamaCppBatch.capacity`).
        `few_rows`: `evaluate` (and the steps of a batch of one) stops at the final hidden
        state and computes each row from it when it is read: `only` rows without the output
        layer, whole ones by ggml (one sequence, a Q8_0 output layer; else llama.cpp's rows,
        all computed in the call)."""
        if n_ctx < 0:
            raise ValueError(f"n_ctx must be >= 0, got {n_ctx}")
        if n_seq < 1:
            raise ValueError(f"n_seq must be >= 1, got {n_seq}")
        # Repacked weights where steps carry many tokens (a batch: several sequences, prompts
        # taken 128 tokens a step), where ggml's repacked kernels are faster; plain weights
        # for one sequence, whose calls are one token or a draft, so that drafts are checked
        # up to 7 tokens a call (`exact_batch`).
        self.repack = n_seq > 1
        self._v = load_vocab(path, vocab_only=False, repack=self.repack)
        self._exact = _EXACT_BATCH[self.repack]
        params = lc.llama_context_default_params()
        per_seq = n_ctx or context_size(
            lc.llama_model_n_ctx_train(self._v.model), kv_bytes_per_token(self._v.model),
            available_memory())
        cells = max(kv_cells or per_seq, per_seq)  # one sequence's whole context fits
        params.n_ctx = -(-cells // _CONTEXT_STEP) * _CONTEXT_STEP
        params.n_seq_max = n_seq
        params.kv_unified = True  # one pool of cells: a prefix is shared, not copied
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        # All cores by default; on a shared machine llama.cpp's spinning threads collapse
        # throughput (0.5-3.5 tok/s measured beside another busy process), so let it be set.
        threads = n_threads or int(os.environ.get("KANAME_THREADS") or os.cpu_count() or 1)
        params.n_threads = threads
        params.n_threads_batch = threads
        # A few tokens' logits from the hidden state (`evaluate`'s `only`, and the steps of a
        # batch of one): one sequence on plain weights, a Q8_0 output layer (output_layer.py),
        # checked below. Not for several sequences: the eval callback it takes, unarmed, made a
        # 4-sequence batch's steps ~10% slower under the server's scheduler (69.6 vs 75.9 ms a
        # step of 9 tokens), which a lone sequence's faster steps would not repay under load.
        self._layer = output_layer(path) if few_rows and n_seq == 1 else None
        self._final: _FinalHidden | None = None
        self._matvec: MatVec | None = None
        if self._layer is not None:
            try:
                self._final = _FinalHidden(self._layer.n_embd)
                self._matvec = MatVec(_ggml_dir(), self._layer.weights, self._layer.n_embd,
                                      threads)
                params.cb_eval = self._final.callback
            except (OSError, AttributeError):  # ggml's library not where this build keeps it
                self._layer = None
        self._ctx = lc.llama_init_from_model(self._v.model, params)
        if not self._ctx:
            raise ModelError(f"llama.cpp could not create a context for {path}")
        self._mem = lc.llama_get_memory(self._ctx)
        # what llama.cpp made of the request (it may round it), not what was asked
        self.n_seq = n_seq
        self.kv_cells: int = lc.llama_n_ctx(self._ctx)
        self.n_ctx: int = min(per_seq, self.kv_cells)
        self._n_batch = n_batch
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self._n_vocab = lc.llama_vocab_n_tokens(self._v.vocab)
        # per sequence, the tokens whose keys/values are in its KV stream
        self._cached: list[list[int]] = [[] for _ in range(n_seq)]
        self.few_rows: int = 0  # rows answered from the hidden state (`only`)
        if self._layer is not None and not self._layer_agrees():
            self._layer = None

    def _layer_agrees(self) -> bool:
        """Whether the rows from the hidden state are the output layer's on one token: the
        whole row bit for bit, a few within their error bounds. A model whose last layers are
        not what output_layer.py assumes (a logit soft cap, a scale) gets llama.cpp's rows."""
        assert self._final is not None and self._layer is not None
        assert self._matvec is not None
        token = max(lc.llama_vocab_bos(self._v.vocab), 0)  # (-1: the model has no BOS)
        self._final.take()
        try:
            self._final.armed = True
            row = self._decode([(0, token, True)])[0]
            hidden = self._final.take()
        finally:
            self._final.armed = False
            self._rollback(0, 1)
        if hidden is None or hidden.shape != (1, self._layer.n_embd):
            return False
        ids = np.concatenate([np.argsort(row)[-64:],
                              np.linspace(0, self._n_vocab - 1, 64).astype(np.int64)])
        rows = self._layer.rows(hidden[0], ids)
        return bool(np.all(np.abs(rows.logits - row[ids]) <= rows.error)
                    and np.array_equal(self._matvec(hidden[0]), row))

    @property
    def answers_only(self) -> bool:
        return self._layer is not None

    @property
    def exact_batch(self) -> int:
        """The most tokens a call may hold and give the rows of one token a call, within the
        sequence's first `exact_cells` cells (see `_EXACT_BATCH` and `_EXACT_CELLS`)."""
        return self._exact

    @property
    def exact_cells(self) -> int:
        return _EXACT_CELLS

    @classmethod
    def default(cls, **kwargs: Any) -> LlamaCppRuntime:
        from .models import default_model_path

        return cls(default_model_path(), **kwargs)

    def __del__(self) -> None:
        try:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
        except Exception:
            pass

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        return self._v.tokenizer

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def eos_token_ids(self) -> Sequence[int]:
        return self._v.eos_token_ids

    def tokenize(self, text: str) -> list[int]:
        return self._v.tokenize(text)

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        if not prompt:
            raise ValueError("prompt must have at least one token")
        # The last prompt token in a call of its own: its logits (and the answer) are then the
        # same whether the rest of the prompt was evaluated now, in a batch, or kept from a
        # previous request (a larger call takes other kernels: see `exact_batch`).
        rest = self._keep_prefix(0, prompt)
        if rest:
            self._decode([(0, t, False) for t in rest])
        return self.advance(prompt[-1:])

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        return self.evaluate(tokens, [len(tokens) - 1])[0]

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int],
                 only: Only = None) -> Rows:
        few = only is not None and any(ids is not None for ids in only)
        want = set(logits_at)
        if self._layer is None or (len(logits_at) <= 1 and not few):
            rows = self._decode([(0, t, i in want) for i, t in enumerate(tokens)])
            return _as_asked(rows, logits_at)
        # One call up to the final hidden state; each row from it when it is read (a draft's
        # rows past its first rejected token never are).
        if only is not None and len(only) != len(logits_at):
            raise ValueError(f"only has {len(only)} entries for {len(logits_at)} rows")
        hidden = self._hidden([(0, t, i in want) for i, t in enumerate(tokens)])
        return _RowsFromHidden(self, _as_asked(hidden, logits_at),
                               list(only) if only is not None else [None] * len(logits_at))

    def _row(self, hidden: NDArray[np.float32], ids: NDArray[np.int64] | None
             ) -> NDArray[np.float32]:
        """The logits row of a final hidden state: where greedy reads only `ids`, their logits
        alone (-inf elsewhere) if those decide the argmax; else the whole row."""
        assert self._layer is not None and self._matvec is not None
        if ids is not None:
            scored = self._layer.rows(hidden, ids)
            if scored.decided():
                self.few_rows += 1
                row = np.full(self._n_vocab, -np.inf, dtype=np.float32)
                row[ids] = scored.logits
                return row
        return self._matvec(hidden)

    def _hidden(self, items: Sequence[tuple[int, int, bool]]) -> NDArray[np.float32]:
        """Decode `items` (one call) up to the final hidden state: its rows wanted."""
        assert self._final is not None
        final = self._final
        final.take()
        try:
            final.armed = final.stop = True
            self._decode(items, read=False)
        finally:
            final.armed = final.stop = False
        hidden = final.take()
        if hidden is None or len(hidden) != sum(w for _, _, w in items):
            raise ModelError("llama.cpp's graph has no final hidden state to read")
        return hidden

    def rollback(self, n: int) -> None:
        self._rollback(0, n)

    def batched(self, max_sequences: int) -> LlamaCppBatch:
        return LlamaCppBatch(self, max_sequences)

    def _keep_prefix(self, seq: int, prompt: Sequence[int]) -> Sequence[int]:
        """Start `seq` on `prompt` from the longest prefix of `prompt[:-1]` any sequence
        holds (its own, or another's cells shared: no copy, no evaluation), dropping the rest
        of its cache; the prompt tokens (but the last) still to evaluate."""
        source = max(range(self.n_seq), key=lambda s: (self._common(s, prompt), s == seq))
        shared = self._common(source, prompt)
        if source != seq and shared > self._common(seq, prompt):
            lc.llama_memory_seq_rm(self._mem, seq, -1, -1)
            lc.llama_memory_seq_cp(self._mem, source, seq, 0, shared)
            self._cached[seq] = self._cached[source][:shared]
        cached = self._cached[seq]
        common = self._common(seq, prompt)
        if not lc.llama_memory_seq_rm(self._mem, seq, common, -1):
            # e.g. a sliding-window cache that cannot drop a suffix: start over
            lc.llama_memory_seq_rm(self._mem, seq, -1, -1)
            common = 0
        del cached[common:]
        return prompt[common:-1]

    def _common(self, seq: int, prompt: Sequence[int]) -> int:
        """Tokens of `prompt` the sequence holds, short of the last (evaluated for logits)."""
        common = 0
        for a, b in zip(self._cached[seq], prompt, strict=False):
            if a != b:
                break
            common += 1
        return min(common, len(prompt) - 1)

    def _rollback(self, seq: int, n: int) -> None:
        if n <= 0:
            return
        cached = self._cached[seq]
        keep = len(cached) - n
        if keep < 0 or not lc.llama_memory_seq_rm(self._mem, seq, keep, -1):
            raise ModelError(f"llama.cpp cannot drop the last {n} tokens of its cache")
        del cached[keep:]

    def _decode(self, items: Sequence[tuple[int, int, bool]], *, read: bool = True
                ) -> NDArray[np.float32]:
        """Append each (sequence, token, logits wanted) in order, in `llama_decode` calls of
        at most n_batch tokens; the logits rows wanted, in the order of `items` (none unless
        `read`)."""
        added: dict[int, int] = {}
        for seq, _, _ in items:
            added[seq] = added.get(seq, 0) + 1
        for seq, n in added.items():
            if len(self._cached[seq]) + n > self.n_ctx:
                raise ModelError(f"context of {self.n_ctx} tokens exceeded")
        rows = np.empty((sum(w for _, _, w in items) if read else 0, self._n_vocab),
                        dtype=np.float32)
        b = self._batch
        row = 0
        for start in range(0, len(items), self._n_batch):
            chunk = items[start:start + self._n_batch]
            for i, (seq, t, wanted) in enumerate(chunk):
                cached = self._cached[seq]
                b.token[i] = t
                b.pos[i] = len(cached)
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = wanted
                cached.append(t)
            b.n_tokens = len(chunk)
            rc = lc.llama_decode(self._ctx, b)
            if rc != 0:
                for seq, _, _ in reversed(chunk):  # not in the cache after all
                    self._cached[seq].pop()
                raise ModelError(f"llama_decode failed with code {rc}")
            for i, (_, _, wanted) in enumerate(chunk):
                if wanted and read:
                    ptr = lc.llama_get_logits_ith(self._ctx, i)
                    rows[row] = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))
                    row += 1
        return rows


def _as_asked(rows: NDArray[np.float32], logits_at: Sequence[int]) -> NDArray[np.float32]:
    """Rows decoded in ascending position, one per position, in the order `logits_at` asks
    for them (a position asked twice gets its row twice)."""
    order = sorted(set(logits_at))
    return rows if list(logits_at) == order else rows[[order.index(i) for i in logits_at]]


class _RowsFromHidden:
    """A call's logits rows, each computed from its final hidden state when first read: the
    few allowed tokens' logits (`output_layer.py`) where they decide the argmax, else the
    whole row (`ggml_matvec.py`, the same bits as llama.cpp's)."""

    def __init__(self, runtime: LlamaCppRuntime, hidden: NDArray[np.float32],
                 ids: list[NDArray[np.int64] | None]):
        self._runtime = runtime
        self._hidden = hidden
        self._ids = ids
        self._rows: dict[int, NDArray[np.float32]] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, k: int) -> NDArray[np.float32]:
        if not -len(self._ids) <= k < len(self._ids):
            raise IndexError(k)
        k %= len(self._ids)
        row = self._rows.get(k)
        if row is None:
            row = self._rows[k] = self._runtime._row(self._hidden[k], self._ids[k])
        return row

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray[np.float32]:
        return np.stack([self[k] for k in range(len(self))]).astype(dtype or np.float32)


class LlamaCppBatch(OverRuntime):
    """`BatchRuntime` over a runtime's `n_seq` sequences (slot i is `seq_id` i), in its pool
    of `capacity` KV cells.

    A step is at most two `llama_decode` calls: the prompts coming in (a chunk of at most
    `prefill_chunk` tokens a step, without logits, so a long prompt does not stall the
    others), then every sequence's tokens. A prompt's last token is in the second, as
    `start` takes it alone; a sequence alone in a step gets the very logits it gets from the
    runtime itself. With others in the call its rows take the batched kernels (`exact_batch`),
    as in any batching engine: a near tie may then go the other way.

    A batch of one over a runtime with lazy rows (`few_rows`: a runtime of one sequence, so a
    server of `--max-concurrency 1`) makes each call but a prompt's the runtime's own
    `evaluate`: each row computed when read, so a draft's rows past its first rejected token
    never are, and greedy reads a few tokens' logits where few are allowed (`only`). A batch
    of several sequences takes llama.cpp's rows in the step, one pass over the output
    weights for all of them."""

    runtime: LlamaCppRuntime

    def __init__(self, runtime: LlamaCppRuntime, max_sequences: int, *,
                 prefill_chunk: int = 128):
        if not 1 <= max_sequences <= runtime.n_seq:
            raise ValueError(f"max_sequences must be in 1..{runtime.n_seq} (the runtime's "
                             f"n_seq), got {max_sequences}")
        self.runtime = runtime
        self.max_sequences = max_sequences
        self.prefill_chunk = prefill_chunk
        # Drafts of a sequence alone in its steps are checked with one token's numerics: in
        # calls of `exact_batch` tokens within its first `exact_cells` cells, one token past
        # them (the loop counts its sequence's cells; with others in the step, the batched
        # kernels apply anyway).
        self.exact_batch = runtime._exact
        self.exact_cells = _EXACT_CELLS
        self.answers_only = runtime.answers_only  # (a runtime of one sequence: `step`)
        self.n_ctx: int | None = runtime.n_ctx
        self.capacity: int | None = runtime.kv_cells
        self._prefilling: set[int] = set()  # slots whose fresh prompt is partly in

    def step(self, calls: Sequence[tuple[int, ModelCall]]) -> list[Rows | None]:
        rt = self.runtime
        if rt._layer is not None and len(calls) == 1 and not calls[0][1].fresh:
            # a batch of one (lazy rows need a runtime of one sequence): its call is the
            # runtime's own `evaluate`, rows computed when read
            _, call = calls[0]
            return [rt.evaluate(call.tokens, call.logits_at, call.only)]
        budget = self.prefill_chunk
        prefill: list[tuple[int, int, bool]] = []
        items: list[tuple[int, int, bool]] = []
        ready: list[bool] = []
        for slot, call in calls:
            if call.fresh:
                if slot not in self._prefilling:  # the first time this prompt is sent
                    rt._keep_prefix(slot, call.tokens)
                    self._prefilling.add(slot)
                held = len(rt._cached[slot])
                rest = call.tokens[held:len(call.tokens) - 1]
                take = rest[:budget]
                budget -= len(take)
                prefill += [(slot, t, False) for t in take]
                if len(take) < len(rest):
                    ready.append(False)
                    continue
                self._prefilling.discard(slot)
                items.append((slot, call.tokens[-1], True))
            else:
                want = set(call.logits_at)
                items += [(slot, t, i in want) for i, t in enumerate(call.tokens)]
            ready.append(True)
        if prefill:
            rt._decode(prefill)
        rows = rt._decode(items) if items else None
        out: list[Rows | None] = []
        at = 0
        for (_, call), done in zip(calls, ready, strict=True):
            if not done:
                out.append(None)
                continue
            n = 1 if call.fresh else len(set(call.logits_at))  # one row a position decoded
            assert rows is not None
            mine = rows[at:at + n]
            at += n
            out.append(mine if call.fresh else _as_asked(mine, call.logits_at))
        return out

    def rollback(self, slot: int, n: int) -> None:
        self.runtime._rollback(slot, n)

    def release(self, slot: int) -> None:
        self._prefilling.discard(slot)  # the KV stream stays, for a prompt that shares it

    def reuse(self, slot: int, prompt: Sequence[int]) -> int:
        return self.runtime._common(slot, prompt)

    def held(self, slot: int) -> int:
        return len(self.runtime._cached[slot])

    def forget(self, slot: int) -> None:
        lc.llama_memory_seq_rm(self.runtime._mem, slot, -1, -1)
        self.runtime._cached[slot].clear()
