"""GGUF models through llama-cpp-python's low-level API.

Low-level on purpose: logits are read with `llama_get_logits_ith(ctx, -1)` (the high-level
`Llama.scores` row is not the last logits unless `logits_all` is on), a sampled token and its
forced followers go to the model in one `llama_decode`, and the KV cache is kept for the
longest common prefix of consecutive prompts.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

from ..errors import ModelError

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

    def tokenize(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        data = text.encode()
        add = self.add_bos if add_bos is None else add_bos
        cap = len(data) + 8
        out = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), out, cap, add, True)
        if n < 0:
            cap = -n
            out = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), out, cap, add, True)
        return list(out[:n])


_vocab_cache: dict[tuple[str, bool], Vocab] = {}
_vocab_lock = threading.Lock()


def load_vocab(path: str | Path, *, vocab_only: bool = True) -> Vocab:
    """Load (once per process) a GGUF, weights included unless `vocab_only`."""
    path = Path(path)
    key = (str(path.resolve()), vocab_only)
    with _vocab_lock:
        if key in _vocab_cache:
            return _vocab_cache[key]
        if not path.is_file():
            raise ModelError(f"no such model file: {path}")
        _backend()
        params = lc.llama_model_default_params()
        params.vocab_only = vocab_only
        model = lc.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise ModelError(f"llama.cpp could not load {path}")
        vocab = lc.llama_model_get_vocab(model)
        tokenizer = _tokenizer_for(str(path.resolve()), vocab)
        bos = lc.llama_vocab_bos(vocab)
        v = Vocab(path, model, vocab, tokenizer, tuple(tokenizer.eos_tokens),
                  bos if bos >= 0 else None, bool(lc.llama_vocab_get_add_bos(vocab)))
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


class LlamaCppRuntime:
    """A GGUF model on the CPU (or whatever llama.cpp was built for)."""

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_batch: int = 512,
                 n_threads: int | None = None):
        """`n_ctx`: tokens of context; 0 is the model's trained context where memory allows it
        (`context_size`), as llama.cpp's server reads `-c 0`."""
        if n_ctx < 0:
            raise ValueError(f"n_ctx must be >= 0, got {n_ctx}")
        self._v = load_vocab(path, vocab_only=False)
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx or context_size(
            lc.llama_model_n_ctx_train(self._v.model), kv_bytes_per_token(self._v.model),
            available_memory())
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        # All cores by default; on a shared machine llama.cpp's spinning threads collapse
        # throughput (0.5-3.5 tok/s measured beside another busy process), so let it be set.
        threads = n_threads or int(os.environ.get("KANAME_THREADS") or os.cpu_count() or 1)
        params.n_threads = threads
        params.n_threads_batch = threads
        self._ctx = lc.llama_init_from_model(self._v.model, params)
        if not self._ctx:
            raise ModelError(f"llama.cpp could not create a context for {path}")
        self._mem = lc.llama_get_memory(self._ctx)
        # what llama.cpp made of the request (it may round it), not what was asked
        self.n_ctx: int = lc.llama_n_ctx(self._ctx)
        self._n_batch = n_batch
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self._n_vocab = lc.llama_vocab_n_tokens(self._v.vocab)
        self._cached: list[int] = []  # tokens whose keys/values are in the KV cache

    @classmethod
    def default(cls, **kwargs: int) -> LlamaCppRuntime:
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
        common = 0
        for a, b in zip(self._cached, prompt, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, len(prompt) - 1)  # re-evaluate at least one token for logits
        if not lc.llama_memory_seq_rm(self._mem, 0, common, -1):
            # e.g. a sliding-window cache that cannot drop a suffix: start over
            lc.llama_memory_clear(self._mem, True)
            common = 0
        self._cached = self._cached[:common]
        # The last prompt token in a call of its own: its logits (and the answer) are then the
        # same whether the rest of the prompt was evaluated now, in a batch, or kept from a
        # previous request (a batch of 4+ tokens takes other kernels: see `exact_batch`).
        if len(prompt) - common > 1:
            self._decode(prompt[common:-1], set())
        return self.advance(prompt[-1:])

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        self._decode(tokens, {len(tokens) - 1})
        ptr = lc.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    # Measured on Gemma 3 270M Q4_K_M: a call of 1-3 tokens gives each token's logits bit for
    # bit as a call of one does; from 4 tokens on, ggml's CPU matrix kernels take another path
    # (4 columns at a time) and logits move by up to ~1.0, enough to flip a near tie.
    exact_batch = 3

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> NDArray[np.float32]:
        rows = np.empty((len(logits_at), self._n_vocab), dtype=np.float32)
        self._decode(tokens, set(logits_at), rows, list(logits_at))
        return rows

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        keep = len(self._cached) - n
        if keep < 0 or not lc.llama_memory_seq_rm(self._mem, 0, keep, -1):
            raise ModelError(f"llama.cpp cannot drop the last {n} tokens of its cache")
        self._cached = self._cached[:keep]

    def _decode(self, tokens: Sequence[int], want: set[int],
                rows: NDArray[np.float32] | None = None, order: list[int] | None = None) -> None:
        """Evaluate `tokens` in batches of at most n_batch, logits computed only at the
        indices in `want` (the output layer is most of a small model's cost per position);
        with `rows`, those logits are copied out in the order of `order`."""
        if len(self._cached) + len(tokens) > self.n_ctx:
            raise ModelError(f"context of {self.n_ctx} tokens exceeded")
        b = self._batch
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start:start + self._n_batch]
            for i, t in enumerate(chunk):
                b.token[i] = t
                b.pos[i] = len(self._cached) + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = start + i in want
            b.n_tokens = len(chunk)
            rc = lc.llama_decode(self._ctx, b)
            if rc != 0:
                raise ModelError(f"llama_decode failed with code {rc}")
            self._cached += chunk
            if rows is not None and order is not None:
                for j, at in enumerate(order):
                    if start <= at < start + len(chunk):
                        ptr = lc.llama_get_logits_ith(self._ctx, at - start)
                        rows[j] = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))
