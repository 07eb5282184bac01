"""What the compiler remembers: compiled constraints and refused ones, each in an LRU bounded
by bytes (cachetools' `LRUCache` with a size per entry), keyed by the hash of the canonical
constraint and its guards.

An entry's size is an estimate of what it keeps alive. For a compiled constraint that is
mostly llguidance's matcher (its lexer and parser tables), which Python cannot see; the
estimate is fitted above the RSS growth measured per compiled grammar on the 262k Gemma
vocabulary (`scripts/bench_prepare.py memory`, docs/benchmarks.md):

    shape                                grammar chars   RSS per entry   estimate
    regex, a few characters                         19         0.04 MB    0.27 MB
    schema, 1 property                             559         0.22 MB    0.35 MB
    schema, 100 properties                       8,800         0.69 MB    1.76 MB
    schema, 500 properties                      42,204         2.70 MB    7.45 MB
    schema, 2,000 string properties             59,422         9.58 MB   11.01 MB
    regex, alternation of 10k words            100,011         7.23 MB   18.36 MB
    schema, enum of 3,000 strings               32,011         1.44 MB    6.05 MB

The estimate (`compiled_size`) is above every measured case; still, an entry is counted as
the larger of its estimate and what the process's resident memory grew by while it compiled
(`resident_bytes`), so that a shape the table does not foresee is counted as it costs.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import LRUCache

from ..errors import ConstraintError

V = TypeVar("V")

MATCHER_BASE_BYTES = 256 * 1024  # a matcher's fixed part (its JSON lexer for schemas)
MATCHER_BYTES_PER_CHAR = 160     # and what it grows by per character of grammar
SOURCE_BYTES_PER_CHAR = 20       # a schema as Python objects, twice (the user's and a copy)


def compiled_size(grammar: str, source_chars: int, mask_bytes: int = 0) -> int:
    """Bytes a compiled constraint keeps alive, estimated from its grammar's length and its
    canonical constraint's (`source_chars`): matcher + grammar text + the schema objects,
    plus its first mask (`mask_bytes`, one bit per token: 32 kB on Gemma's vocabulary)."""
    return (MATCHER_BASE_BYTES + (MATCHER_BYTES_PER_CHAR + 1) * len(grammar)
            + SOURCE_BYTES_PER_CHAR * source_chars + mask_bytes)


def resident_bytes() -> int:
    """The process's resident memory (Linux's /proc; 0 elsewhere, where estimates alone
    count)."""
    return _statm(1)


def address_space() -> int:
    """The process's address space (VmSize; 0 where /proc is not there)."""
    return _statm(0)


def _statm(field: int) -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[field]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def key_hash(key: str) -> str:
    """The cache key of a canonical constraint: its hash, so that a 1 MB schema is not kept
    a second time as its key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class ByteLRU(Generic[V]):
    """A thread-safe LRU of at most `max_bytes`, each value's size given when it is put. A
    value larger than the whole budget is not kept.

    An exception may interrupt an update half-way (the server stops an abandoned compile by
    raising one in its thread, server/workers.py), which would leave cachetools' entries and
    their order apart; the LRU then starts afresh rather than keep an entry it cannot evict."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._lru = self._new()
        self._lock = threading.Lock()

    def _new(self) -> LRUCache[str, tuple[V, int]]:
        return LRUCache(self.max_bytes, getsizeof=_size)

    def get(self, key: str) -> V | None:
        with self._lock:
            try:
                hit = self._lru.get(key)  # an LRU's get moves the key to the front
            except BaseException:
                self._lru = self._new()
                raise
        return None if hit is None else hit[0]

    def put(self, key: str, value: V, size: int) -> bool:
        """Keep `value` (evicting the least recently used); False if it alone is over
        budget."""
        size = max(size, 1)
        with self._lock:
            try:
                if size > self.max_bytes:
                    self._lru.pop(key, None)
                    return False
                self._lru[key] = (value, size)
            except BaseException:
                self._lru = self._new()
                raise
        return True

    @property
    def bytes(self) -> int:
        with self._lock:
            return int(self._lru.currsize)

    def __contains__(self, key: str) -> bool:  # a look that does not refresh the key
        with self._lock:
            return key in self._lru

    def __len__(self) -> int:
        with self._lock:
            return len(self._lru)


def _size(entry: tuple[object, int]) -> int:
    return entry[1]


@dataclass(frozen=True)
class Refusal:
    """A refused constraint's error, enough to raise it again (a fresh exception each time:
    re-raising one object would grow its traceback and share it between threads)."""

    kind: type[ConstraintError]
    message: str
    keyword: str | None
    pointer: str | None

    @classmethod
    def of(cls, e: ConstraintError) -> Refusal:
        return cls(type(e), e.message, e.keyword, e.pointer)

    def error(self) -> ConstraintError:
        return self.kind(self.message, keyword=self.keyword, pointer=self.pointer)

    @property
    def size(self) -> int:
        """Bytes kept: the strings, the key and the objects around them."""
        return 512 + len(self.message) + len(self.pointer or "") + len(self.keyword or "")
