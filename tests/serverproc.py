"""Start `kaname serve` (or another server) as a subprocess on 127.0.0.1 with a free port; stop
it by PID: the launcher of `kaname.bench.common`, run from the repository root."""

from __future__ import annotations

from pathlib import Path

from kaname.bench import common
from kaname.bench.common import free_port

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "ManagedProcess", "ServerProcess", "free_port"]


class ManagedProcess(common.ManagedProcess):
    cwd = ROOT


class ServerProcess(common.ServerProcess):
    cwd = ROOT
