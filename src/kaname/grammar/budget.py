"""A compile's memory budget: a large constraint is first compiled in a forked child whose
address space is capped, and only compiled here once the child has done it within the cap.

A call into llguidance cannot be stopped from outside, and some of its constructions are
built whole before its own limits are checked (costs.py names those known; this bounds the
rest): a process that runs past its memory takes every client's connection with it. A child
that runs out of memory dies alone; the request gets a 400 naming the budget, and the
server's memory is as it was. The child's outcome is also what the compile here would be, so
a constraint the child refused is refused without a second compile.

The price is a second compile, for constraints of at least `MIN_BYTES` (canonical JSON) only,
once per constraint (the cache keeps the result): measured in docs/benchmarks.md ("A
compile's memory budget"). Forking a process that runs other threads is safe here because the
child only compiles (Rust and Python of this package, no lock another thread may hold: the
GIL is the caller's, glibc's malloc is made fork-safe by glibc) and leaves with `os._exit`.
Where `os.fork` does not exist, nothing is probed.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import pickle
import resource
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConstraintError, GrammarTooComplexError
from .cache import address_space

MEMORY_BYTES = 1 << 30  # what one compile may add to the process
MIN_BYTES = 16 << 10  # constraints smaller than this are compiled without a probe
SECONDS = 120.0  # a child still compiling after this is stopped (the request's own deadline
# usually stops it first: the caller's thread is interrupted while it waits, and the child
# is killed on the way out)
_POLL = 0.05  # seconds between looks at the child: how soon an abandoned wait notices


@dataclass(frozen=True)
class Budget:
    """How much memory and time one compile may take."""

    memory_bytes: int = MEMORY_BYTES
    min_bytes: int = MIN_BYTES
    seconds: float = SECONDS


DEFAULT_BUDGET = Budget()


def probe(compile_: Callable[[], object], budget: Budget, extra_reserved: int = 0) -> object:
    """Run `compile_` in a child capped at the parent's address space plus
    `budget.memory_bytes` (and `extra_reserved`: address space reserved, not used, such as a
    big thread stack). Returns what it returned (picklable) where it finished; re-raises the
    ConstraintError it raised; raises GrammarTooComplexError where it ran out of memory or
    time, or failed otherwise. Where no child can be made (no fork, no /proc, no fd or
    process left), returns None without running it: the compile runs here, as before."""
    if not hasattr(os, "fork") or not address_space():
        return None
    read = write = pid = -1
    try:
        # one fork at a time: another probe's child would inherit this pipe's write end
        # (before the child closes it) and hold this one's answer back until it ends
        with _fork_lock:
            try:
                read, write = os.pipe()
                pid = os.fork()
            except OSError:
                return None
            if pid == 0:
                _child(compile_, budget, extra_reserved, write)  # never returns
            os.close(write)
            write = -1
        data = _read_all(read, time.monotonic() + budget.seconds)
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
        if pid > 0:
            _reap(pid)
    if data is None:
        raise GrammarTooComplexError(
            f"constraint is too costly to compile: it took more than {budget.seconds:.0f} s")
    outcome: Any
    try:
        outcome = pickle.loads(data) if data else "memory"  # no word: it died (an abort)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
        outcome = "memory"  # a word cut short: it died while writing
    if outcome == "memory":
        raise GrammarTooComplexError(
            "constraint is too costly to compile: it needs more than the compile memory "
            f"budget of {budget.memory_bytes >> 20} MB; simplify it")
    if outcome[0] == "ok":
        return outcome[1]
    if outcome[0] == "other":  # e.g. a thread it could not start within the budget
        raise GrammarTooComplexError(
            f"constraint cannot be compiled within the compile budget ({outcome[1]})")
    kind, message, keyword, pointer = outcome
    raise kind(message, keyword=keyword, pointer=pointer)


_fork_lock = threading.Lock()
# Python 3.12+ warns on a fork in a process with threads: this one is made safe above
warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                        category=DeprecationWarning)


def _child(compile_: Callable[[], object], budget: Budget, extra_reserved: int,
           write: int) -> None:
    """The child: capped, alone with its pipe, it compiles, reports and leaves without
    running the parent's cleanup."""
    outcome: object = "memory"
    try:
        # nothing of the parent's but the pipe: its sockets close when the parent closes
        # them, and no other probe's pipe is held open from here
        os.closerange(3, write)
        os.closerange(write + 1, _MAX_FD)
        # an allocation failure aborts: its message, and a fault handler's dump of the
        # stacks (pytest enables one, on a copy of stderr), are not the server's output
        faulthandler.disable()
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        _die_with_parent()
        seconds = int(budget.seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        cap = address_space() + budget.memory_bytes + extra_reserved
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        for limit in (soft, hard):  # under a cap of the parent's own, that one
            if limit != resource.RLIM_INFINITY:
                cap = min(cap, limit)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        outcome = ("ok", compile_())
    except ConstraintError as e:
        outcome = (type(e), e.message, e.keyword, e.pointer)
    except MemoryError:
        outcome = "memory"
    except BaseException as e:  # reported to the parent, which answers it
        outcome = ("other", f"{type(e).__name__}: {e}"[:300])
    try:
        data = pickle.dumps(outcome)
        while data:
            data = data[os.write(write, data):]
    finally:
        os._exit(0)


_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536


def _die_with_parent() -> None:
    """Linux: the child is killed if the parent dies (a server killed outright leaves no
    compile running, holding nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read_all(fd: int, deadline: float) -> bytes | None:
    """What the child wrote until it closed the pipe; None past `deadline`."""
    chunks: list[bytes] = []
    poller = select.poll()  # (select() refuses descriptors past 1023)
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not poller.poll(int(min(left, _POLL) * 1000)):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _reap(pid: int) -> None:
    """Kill the child if it still runs, and wait for it (no zombie). Killed before any wait:
    until it is waited for, its pid cannot be another process's."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
