"""Start `kaname serve` as a subprocess on 127.0.0.1 with a free port; stop it by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ManagedProcess:
    """A server started as `argv` (its "{port}" replaced by a free port on 127.0.0.1) in a
    session of its own, ready once GET /health answers 200; stopped by PID (its process
    group, so that children such as vLLM's engine core go with it)."""

    name = "server"

    def __init__(self, argv: list[str], *, startup_timeout: float = 180.0,
                 env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"{self.name}-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [a.replace("{port}", str(self.port)) for a in argv], cwd=ROOT, stdout=self._log,
            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start within {startup_timeout:.0f} s: "
                                   f"{self.log()}")
            time.sleep(0.3)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerProcess(ManagedProcess):
    """`kaname serve ARGS` (the port is chosen here)."""

    name = "kaname-serve"

    def __init__(self, *args: str, startup_timeout: float = 180.0, env: dict | None = None):
        super().__init__([sys.executable, "-m", "kaname.cli", "serve", "--port", "{port}",
                          *args], startup_timeout=startup_timeout, env=env)
