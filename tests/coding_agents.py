"""Real coding agents (Claude Code, Codex CLI, the Claude Agent SDK) run against a local API.

The agents are npm packages that `bash scripts/agents.sh install [--latest]` puts under
.cache/agents/<name>-<version> (each with a `ready` stamp); every installed version is used.
Where none is, `require_agents()` skips with the reason the installer wrote.

Each agent runs non-interactively in a throwaway directory (a git repository holding
hello.txt), with a home of its own, default settings plus only the base URL, a dummy key and the
model name, its sandbox and permission checks as they come: Claude Code `-p`, `codex exec`
(read-only sandbox, the default), the SDK's `query()` through a small Node driver. HTTPS_PROXY
points at `OutboundLog`, which writes down every host an agent tries to reach beyond the API and
refuses it, so a run behaves the same on- and offline.

Used by tests/test_agents.py and scripts/record_agents.py; nothing here imports kaname.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AGENTS_DIR = ROOT / ".cache" / "agents"
DATA_DIR = ROOT / "tests" / "data" / "agent_requests"
KINDS = ("claude-code", "codex", "claude-agent-sdk")
ENTRY = {
    "claude-code": "node_modules/.bin/claude",
    "codex": "node_modules/.bin/codex",
    "claude-agent-sdk": "node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs",
}
API = {"claude-code": "messages", "codex": "responses", "claude-agent-sdk": "messages"}
API_KEY = "sk-kaname-dummy"
HELLO = "kaname-hello-4711"  # hello.txt's content: seen in the request carrying the tool result
PROMPT = "Show me what hello.txt in the current directory says. Read it with a tool."


@dataclass(frozen=True)
class Agent:
    kind: str
    version: str
    prefix: Path

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.version}"

    @property
    def entry(self) -> Path:
        return self.prefix / ENTRY[self.kind]

    @property
    def api(self) -> str:
        return API[self.kind]


def installed_agents() -> list[Agent]:
    """Every agent version under .cache/agents that scripts/agents.sh finished installing."""
    found = []
    for prefix in sorted(AGENTS_DIR.glob("*/ready")):
        prefix = prefix.parent
        kind, _, version = prefix.name.rpartition("-")
        if kind in ENTRY and (prefix / ENTRY[kind]).exists():
            found.append(Agent(kind, version, prefix))
    return found


def why_not_installed() -> str:
    failed = AGENTS_DIR / "failed"
    if failed.is_file():
        return failed.read_text().strip()
    if shutil.which("node") is None:
        return "node is not installed"
    return "not installed; run `bash scripts/agents.sh install` (scripts/test.sh should)"


def require_agents(kind: str | None = None) -> list[Agent]:
    """The installed agents (of `kind`), or a pytest skip saying why there are none."""
    import pytest

    found = [a for a in installed_agents() if kind is None or a.kind == kind]
    if not found:
        pytest.skip(f"coding agents cannot run here: {why_not_installed()}")
    return found


class OutboundLog:
    """An HTTP(S) proxy on 127.0.0.1 that records each CONNECT / absolute-URI request and refuses
    it (403): the agents' traffic beyond the API (telemetry, updates, feature flags) is written
    down and kept off the network."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        log = self.hosts

        class Handler(BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                log.append(f"{self.command} {self.path}")
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()

            do_CONNECT = do_GET = do_POST = do_PUT = do_HEAD = do_PATCH = do_DELETE = _refuse

            def log_message(self, *args: object) -> None:
                pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OutboundLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingProxy:
    """A pass-through HTTP server on 127.0.0.1 in front of `upstream` (a base URL without /v1):
    every request is forwarded as it came and its answer streamed back as it goes; the
    requests (method, path, headers, JSON body), the answers (status, text, whether the agent
    hung up before the end) are kept in order, so a test can see what the agent sent after its
    tool ran."""

    def __init__(self, upstream: str) -> None:
        self.requests: list[dict[str, Any]] = []
        target = urllib.parse.urlsplit(upstream)
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                entry: dict[str, Any] = {"method": self.command, "path": self.path,
                                         "headers": {k.lower(): v
                                                     for k, v in self.headers.items()},
                                         "body": body}
                recorded.append(entry)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "content-length",
                                                "transfer-encoding", "accept-encoding")}
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=600)
                try:
                    conn.request(self.command, self.path, body=raw or None, headers=headers)
                    resp = conn.getresponse()
                    entry["status"] = resp.status
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("connection", "content-length",
                                             "transfer-encoding", "date", "server"):
                            self.send_header(k, v)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    answer = b""
                    try:
                        while chunk := resp.read1(65536):
                            answer += chunk
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                    except (BrokenPipeError, ConnectionResetError):
                        # the agent hung up (the SDK drops its title request when the turn
                        # ends): written down, not an error of the proxy
                        entry["aborted"] = True
                        self.close_connection = True
                    entry["answer"] = answer.decode(errors="replace")
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Run:
    agent: Agent
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path
    outbound: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"{self.agent.name} exited {self.returncode} after {self.seconds:.1f} s\n"
                f"argv: {self.argv}\nstdout: {self.stdout[-3000:]}\n"
                f"stderr: {self.stderr[-3000:]}\noutbound: {self.outbound}")


# The Agent SDK's side of a run: one query(), every message printed as a JSON line, the result's
# text last; exit 1 when the result is an error.
SDK_DRIVER = """\
import { query } from %(sdk)s;
const [prompt, model] = process.argv.slice(2);
let failed = true;
for await (const message of query({ prompt, options: { model, cwd: process.cwd() } })) {
  console.log(JSON.stringify(message));
  if (message.type === "result") failed = message.is_error || message.subtype !== "success";
}
process.exit(failed ? 1 : 0);
"""

CODEX_CONFIG = """\
model = "%(model)s"
model_provider = "kaname"

[model_providers.kaname]
name = "kaname"
base_url = "%(base_url)s/v1"
env_key = "KANAME_API_KEY"
wire_api = "responses"
"""


def make_workdir(parent: Path) -> Path:
    """A throwaway git repository holding hello.txt (codex exec wants a git repository)."""
    work = parent / "work"
    work.mkdir(parents=True)
    (work / "hello.txt").write_text(HELLO + "\n")
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    return work


def run_agent(agent: Agent, base_url: str, *, model: str, prompt: str = PROMPT,
              timeout: float = 120.0, tmp: Path | None = None,
              extra_env: dict[str, str] | None = None, proxy: bool = True) -> Run:
    """Run `agent` once against the API at `base_url` (no /v1) in a fresh throwaway directory
    under `tmp` (a new temporary directory if None), with a home of its own; the proxy of an
    OutboundLog refuses and records everything else it tries to reach (with proxy=False it goes
    wherever the machine's network lets it)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"kaname-{agent.name}-")) if tmp is None else tmp
    work = make_workdir(tmp)
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE", "CODEX_", "OPENAI_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_CACHE_HOME=str(home / ".cache"), NO_COLOR="1", TERM="dumb",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if agent.kind == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(CODEX_CONFIG % {"model": model,
                                                               "base_url": base_url})
        env.update(CODEX_HOME=str(codex_home), KANAME_API_KEY=API_KEY)
        argv = [str(agent.entry), "exec", prompt]
    else:
        env.update(ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=API_KEY)
        if agent.kind == "claude-code":
            argv = [str(agent.entry), "-p", prompt, "--model", model]
        else:
            driver = tmp / "driver.mjs"
            driver.write_text(SDK_DRIVER % {"sdk": json.dumps(agent.entry.as_uri())})
            argv = ["node", str(driver), prompt, model]
    env.update(extra_env or {})
    with OutboundLog() as outbound:
        if proxy:
            env.update(HTTPS_PROXY=outbound.url, HTTP_PROXY=outbound.url,
                       https_proxy=outbound.url, http_proxy=outbound.url)
        start = time.monotonic()
        # A session of its own: on a timeout the whole group goes (the SDK's claude binary,
        # codex's sandboxed commands), stopped by the PID of its leader.
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            rc = -1
            err += f"\n[timed out after {timeout:.0f} s]"
        try:  # whatever the agent left running in its group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        seconds = time.monotonic() - start
        hosts = list(outbound.hosts)
    return Run(agent, argv, rc, out, err, seconds, work, hosts)
