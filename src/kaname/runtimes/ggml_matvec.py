"""A whole logits row from the final hidden state, by ggml's own CPU kernel.

llama.cpp computes the output layer for every position of a call it is asked logits for, in
the call. Computing it here instead, from the hidden state the call stopped at, lets a caller
take a row only when it reads it: a draft's rows past its first rejected token are never
computed (on Gemma 3 270M the output layer is ~8 ms of a ~13 ms token). The product is ggml's
`mul_mat` of the Q8_0 weights (memory-mapped from the GGUF) by one column, the very kernel
llama.cpp runs for a call of one token, so the row is the same bit for bit; the runtime checks
that at load (`LlamaCppRuntime._layer_agrees`).

Through ggml's C API (ctypes), on buffers that wrap our own memory: no copy of the weights.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

_F32, _Q8_0 = 0, 8  # ggml_type
_ALIGN = 64  # bytes; ggml asks 32 of a buffer it does not allocate

_vp = ctypes.c_void_p


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", _vp), ("no_alloc", ctypes.c_bool)]


def _bind(lib: ctypes.CDLL, name: str, restype: object, *argtypes: object
          ) -> Callable[..., Any]:
    fn = getattr(lib, name)  # AttributeError where this ggml lacks it: the caller falls back
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def _aligned(n: int) -> NDArray[np.float32]:
    raw = np.empty(n + _ALIGN // 4, dtype=np.float32)
    skip = (-raw.ctypes.data % _ALIGN) // 4
    return raw[skip:skip + n]


class MatVec:
    """`weights` (a Q8_0 matrix: rows of blocks, as `output_layer` maps it) times a vector of
    `n_embd` float32, on ggml's CPU backend with `n_threads` threads."""

    def __init__(self, lib_dir: Path, weights: NDArray[np.void], n_embd: int, n_threads: int):
        base = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
        cpu = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"))
        sz = ctypes.c_size_t
        overhead = _bind(base, "ggml_tensor_overhead", sz)
        graph_overhead = _bind(base, "ggml_graph_overhead", sz)
        init = _bind(base, "ggml_init", _vp, _InitParams)
        new_2d = _bind(base, "ggml_new_tensor_2d", _vp, _vp, ctypes.c_int, ctypes.c_int64,
                       ctypes.c_int64)
        new_1d = _bind(base, "ggml_new_tensor_1d", _vp, _vp, ctypes.c_int, ctypes.c_int64)
        mul_mat = _bind(base, "ggml_mul_mat", _vp, _vp, _vp, _vp)
        new_graph = _bind(base, "ggml_new_graph", _vp, _vp)
        expand = _bind(base, "ggml_build_forward_expand", None, _vp, _vp)
        from_ptr = _bind(base, "ggml_backend_cpu_buffer_from_ptr", _vp, _vp, sz)
        alloc = _bind(base, "ggml_backend_tensor_alloc", ctypes.c_int, _vp, _vp, _vp)
        self._compute = _bind(base, "ggml_backend_graph_compute", ctypes.c_int, _vp, _vp)
        self._free = _bind(base, "ggml_free", None, _vp)
        self._free_buffer = _bind(base, "ggml_backend_buffer_free", None, _vp)
        self._free_backend = _bind(base, "ggml_backend_free", None, _vp)
        cpu_init = _bind(cpu, "ggml_backend_cpu_init", _vp)
        set_threads = _bind(cpu, "ggml_backend_cpu_set_n_threads", None, _vp, ctypes.c_int)

        n_rows = weights.shape[0]
        self._w = weights  # kept alive: ggml reads it in place
        self._lock = threading.Lock()  # one input, output and work buffer for all callers
        self._x = _aligned(n_embd)
        self._y = _aligned(n_rows)
        self._ctx = init(_InitParams(overhead() * 4 + graph_overhead(), None, True))
        self._buffers: list[int] = []
        self._backend = None
        if not self._ctx:
            raise OSError("ggml_init failed")
        w = new_2d(self._ctx, _Q8_0, n_embd, n_rows)
        x = new_1d(self._ctx, _F32, n_embd)
        y = mul_mat(self._ctx, w, x)
        self._graph = new_graph(self._ctx)
        expand(self._graph, y)
        for tensor, array in ((w, weights), (x, self._x), (y, self._y)):
            address = array.ctypes.data
            if address % 32:
                raise OSError("a tensor's memory is not aligned as ggml needs")
            buffer = from_ptr(address, array.nbytes)
            self._buffers.append(buffer)
            if not buffer or alloc(buffer, tensor, address) != 0:
                raise OSError("ggml could not place a tensor in its buffer")
        self._backend = cpu_init()
        if not self._backend:
            raise OSError("ggml's CPU backend did not start")
        set_threads(self._backend, n_threads)

    def __call__(self, vector: NDArray[np.float32]) -> NDArray[np.float32]:
        """The product, as a fresh array."""
        with self._lock:
            self._x[:] = vector
            if self._compute(self._backend, self._graph) != 0:
                raise OSError("ggml could not compute the output layer")
            return self._y.copy()

    def __del__(self) -> None:
        try:
            if self._backend:
                self._free_backend(self._backend)
            for buffer in self._buffers:
                if buffer:
                    self._free_buffer(buffer)
            if self._ctx:
                self._free(self._ctx)
        except Exception:
            pass
