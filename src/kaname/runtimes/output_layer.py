"""A few tokens' logits from the final hidden state, without the model's full output layer.

Where the grammar leaves a handful of tokens (it forces some bytes, and only the tokens
spelling a prefix of them are allowed), greedy decoding needs the argmax of their logits
alone, yet llama.cpp computes all 262k rows of Gemma's output layer for every position it
returns logits for: about half of a token's cost on Gemma 3 270M. Here those few rows are
computed from the hidden state llama.cpp's graph produced just before that layer.

Exact where it decides: the output layer is Q8_0 (int8 weights, one f16 scale per 32), and
ggml multiplies it by the hidden state quantized the same way, so each logit is a sum of
per-block products of integers (exact) and two scales. Computed here in float64 from the
same quantized operands, it differs from ggml's float32 sum only by that sum's rounding,
bounded by `_ROUNDING` times the sum of the terms' magnitudes (and, for an element whose
quantization is within a hair of a rounding tie, by that element's whole term). A row is
used only where its largest logit is apart from every other by more than the two bounds:
then the argmax is ggml's, whatever its summation order. Elsewhere the caller computes the
full row.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.typing import NDArray

_Q8_0 = 8  # ggml_type
_QK = 32  # values per Q8_0 block
_BLOCK = np.dtype([("d", "<f2"), ("q", "i1", _QK)])
# float32 rounding of a sum of ~20 block terms, with ample room (2^-24 is float32's unit
# roundoff; each term and each addition rounds once, in any order)
_ROUNDING = 64 * 2.0**-24
# an element this close (in quantization steps, ~13 float32 ulps at 127) to a rounding tie may
# round either way in ggml (its SIMD and scalar code compute the scale apart): its term is
# counted as unknown
_TIE = 1e-4


@dataclass(frozen=True)
class Rows:
    """Estimated logits of some token ids and a bound on each one's error."""

    logits: NDArray[np.float64]
    error: NDArray[np.float64]

    def decided(self) -> bool:
        """Whether the argmax is certain: the best estimate is ahead of every other by more
        than both errors."""
        if len(self.logits) < 2:
            return True
        best = int(np.argmax(self.logits))
        low = self.logits[best] - self.error[best]
        others = np.delete(self.logits + self.error, best)
        return bool(low > others.max())


class OutputLayer:
    """The rows of a Q8_0 output layer, read from the GGUF file (memory-mapped)."""

    def __init__(self, weights: NDArray[np.void], n_embd: int):
        self.weights = weights  # (n_vocab, n_embd / 32) Q8_0 blocks
        self.n_embd = n_embd

    def rows(self, hidden: NDArray[np.float32], ids: NDArray[np.integer]) -> Rows:
        """The logits of `ids` given the final hidden state `hidden` (n_embd float32)."""
        x = hidden.reshape(-1, _QK)
        amax = np.abs(x).max(axis=1)
        scale = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0)
        y = (x * scale[:, None].astype(np.float32)).astype(np.float32)
        q = np.rint(y)  # ggml's AVX code rounds to nearest even, as rint does
        near_tie = np.abs(np.abs(y - np.trunc(y)) - 0.5) < _TIE
        d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)  # stored as f16
        w = self.weights[np.asarray(ids)]
        wd = w["d"].astype(np.float64) * d[None]  # (ids, blocks)
        wq = w["q"].astype(np.int32)
        terms = wd * np.einsum("kbi,bi->kb", wq, q.astype(np.int32))
        unsure = wd * np.einsum("kbi,bi->kb", np.abs(wq), near_tie.astype(np.int32))
        error = _ROUNDING * np.abs(terms).sum(axis=1) + unsure.sum(axis=1)
        return Rows(terms.sum(axis=1), error)


def output_layer(path: str | Path) -> OutputLayer | None:
    """The output layer of a GGUF model where it is Q8_0 (`output.weight`, or the tied
    `token_embd.weight`); None otherwise."""
    try:
        tensors = _tensors(str(path))
    except (OSError, struct.error, ValueError, UnicodeDecodeError):  # not a GGUF we can read
        return None
    name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    if name not in tensors:
        return None
    dims, kind, offset = tensors[name]
    if kind != _Q8_0 or len(dims) != 2 or dims[0] % _QK:
        return None
    n_embd, n_vocab = dims
    weights = np.memmap(path, dtype=_BLOCK, mode="r", offset=offset,
                        shape=(n_vocab, n_embd // _QK))
    return OutputLayer(weights, n_embd)


@functools.lru_cache(maxsize=4)
def _tensors(path: str) -> dict[str, tuple[tuple[int, ...], int, int]]:
    """Each tensor's (dims, ggml type, file offset), from the GGUF header."""
    with open(path, "rb") as f:
        magic, _version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            return {}
        alignment = 32
        for _ in range(n_kv):
            key = _string(f)
            (kind,) = struct.unpack("<I", f.read(4))
            value = _skip_value(f, kind)
            if key == b"general.alignment" and value is not None:
                alignment = value
        info: dict[str, tuple[tuple[int, ...], int, int]] = {}
        for _ in range(n_tensors):
            name = _string(f).decode()
            (n_dims,) = struct.unpack("<I", f.read(4))
            dims = struct.unpack(f"<{n_dims}Q", f.read(8 * n_dims))
            kind, offset = struct.unpack("<IQ", f.read(12))
            info[name] = (dims, kind, offset)
        data = -(-f.tell() // alignment) * alignment
    return {k: (dims, kind, data + offset) for k, (dims, kind, offset) in info.items()}


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}


def _string(f: BinaryIO) -> bytes:
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n)


def _skip_value(f: BinaryIO, kind: int) -> int | None:
    """Read past one metadata value; an integer scalar's value is returned."""
    read = f.read
    if kind == 8:
        _string(f)
        return None
    if kind == 9:
        item, n = struct.unpack("<IQ", read(12))
        if item in _SCALARS and item != 8:
            read(struct.calcsize(_SCALARS[item]) * n)
        else:
            for _ in range(n):
                _skip_value(f, item)
        return None
    value = struct.unpack(_SCALARS[kind], read(struct.calcsize(_SCALARS[kind])))[0]
    return value if isinstance(value, int) else None
