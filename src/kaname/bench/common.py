"""What the benchmarks share: the workload of `kaname bench engine` and `kaname bench e2e`
(schemas with prompts), the statistics and machine description of every report, the byte
vocabulary the byte-vocabulary peers (xgrammar, outlines-core) are given, and the one launcher
of servers (`kaname serve`, vLLM) that the benchmarks, scripts and tests start.

Standard library only, so any suite can import it at the top (the launcher imports httpx when
it waits for a server).
"""

from __future__ import annotations

import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

# ---------------------------------------------------------------------------------------------
# Workload: small realistic schemas, with prompts that get the base model to answer in JSON.


@dataclass(frozen=True)
class Case:
    name: str
    schema: dict[str, Any]
    prompt: str


INVOICE = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "customer": {"type": "string"},
        "currency": {"enum": ["USD", "EUR", "GBP", "JPY"]},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price": {"type": "number", "minimum": 0},
                },
                "required": ["description", "quantity", "unit_price"],
                "additionalProperties": False,
            },
        },
        "total": {"type": "number", "minimum": 0},
    },
    "required": ["invoice_number", "date", "customer", "currency", "items", "total"],
    "additionalProperties": False,
}

COMPANY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "founded_year": {"type": "integer", "minimum": 1800, "maximum": 2030},
        "location": {"type": "string"},
        "employees": {"type": "integer", "minimum": 0},
    },
    "required": ["name", "founded_year", "location", "employees"],
    "additionalProperties": False,
}

FLIGHT_ARGS = {
    "type": "object",
    "properties": {
        "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "date": {"type": "string", "format": "date"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "cabin": {"enum": ["economy", "premium_economy", "business", "first"]},
        "nonstop": {"type": "boolean"},
    },
    "required": ["origin", "destination", "date", "passengers", "cabin", "nonstop"],
    "additionalProperties": False,
}

TRIAGE = {
    "type": "object",
    "properties": {
        "category": {"enum": ["billing", "technical", "account", "shipping", "other"]},
        "priority": {"enum": ["low", "medium", "high", "urgent"]},
        "sentiment": {"enum": ["negative", "neutral", "positive"]},
        "language": {"enum": ["en", "fr", "de", "es", "ja"]},
        "needs_human": {"type": "boolean"},
        "tags": {
            "type": "array",
            "maxItems": 3,
            "items": {"enum": ["refund", "login", "delivery", "bug", "invoice", "cancellation",
                               "upgrade"]},
        },
    },
    "required": ["category", "priority", "sentiment", "language", "needs_human", "tags"],
    "additionalProperties": False,
}


CASES: tuple[Case, ...] = (
    Case("company", COMPANY,
         "Acme Robotics was founded in 1998 in Osaka, Japan. The company builds warehouse "
         "robots and today employs about 1,200 people.\n\nThe company as JSON: "),
    Case("invoice", INVOICE,
         "Invoice INV-2024-0457, dated 2024-03-15, billed to Blue Harbor Cafe.\n"
         "- 3 x Espresso beans 1 kg at 24.50 EUR each\n"
         "- 2 x Milk frother at 39.90 EUR each\n"
         "- 1 x Descaling kit at 12.00 EUR\n"
         "Total due: 165.30 EUR.\n\nThe invoice above as JSON:\n"),
    Case("tool_call", FLIGHT_ARGS,
         "User: Find me a nonstop business class flight from Boston (BOS) to Lisbon (LIS) on "
         "2025-06-12 for two people.\nAssistant: calling search_flights with arguments "),
    Case("triage", TRIAGE,
         "Support ticket: \"I was charged twice for my subscription this month and nobody "
         "answers my emails. I want a refund now!\"\n\nTriage of the ticket as JSON: "),
)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "role": {"type": "string"},
        "organization": {"type": "string"},
        "city": {"type": "string"},
        "award": {"type": "string"},
        "year": {"type": "integer"},
    },
    "required": ["name", "role", "organization", "city", "award", "year"],
    "additionalProperties": False,
}

ENTITIES = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kind": {"enum": ["person", "organization", "place"]},
                },
                "required": ["name", "kind"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["entities"],
    "additionalProperties": False,
}

SHOP = {
    "type": "object",
    "properties": {
        "店名": {"type": "string"},
        "開業年": {"type": "integer"},
        "所在地": {"type": "string"},
        "店主": {"type": "string"},
        "専門": {"type": "string"},
    },
    "required": ["店名", "開業年", "所在地", "店主", "専門"],
    "additionalProperties": False,
}

# Extraction: the answer is mostly copied from a longer prompt (names, dates, places), which
# verified drafts take from the prompt (a paragraph to a record; a text to its entities; the
# same in Japanese).
EXTRACTION: tuple[Case, ...] = (
    Case("extract_record", PERSON,
         "Dr. Margaret Okonkwo-Hastings, chief research scientist at the Northfield Institute "
         "for Marine Robotics in Halifax, Nova Scotia, received the Atlantic Engineering "
         "Innovation Prize in 2023 for her work on autonomous underwater gliders that map "
         "coral reefs.\n\nThe person above as JSON: "),
    Case("extract_entities", ENTITIES,
         "On Tuesday, Helena Marchetti, the mayor of Bologna, met representatives of "
         "Fincantieri Marine Group and the University of Genoa at the Palazzo d'Accursio to "
         "discuss a new harbour research centre. Professor Tomasz Wieczorek from the Gdansk "
         "University of Technology joined the meeting by video from Warsaw.\n\n"
         "Every person, organization and place named above, as JSON: "),
    Case("extract_ja", SHOP,
         "ほしぞら書店は2011年に横浜市中区で開業した古書店です。店主の白石はるかさんは、"
         "天文学と宇宙の古い図鑑を専門に集めています。\n\n上の文の店をJSONで: "),
)


# ---------------------------------------------------------------------------------------------
# Reports


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), interpolating linearly between ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("q must be in [0, 100]")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores ({cpu}), "
            f"CPU only, Python {platform.python_version()}")


def version_of(dist: str) -> str:
    """The installed version of distribution `dist`, or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def first_line(e: BaseException) -> str:
    """`Type: first non-empty line of the message`, at most 300 characters, for a report (a
    peer's error can run to pages, llguidance's with its parser state after the message)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


# ---------------------------------------------------------------------------------------------
# The peers' byte vocabulary


class PeerVocabulary:
    """A tokenizer as the byte-vocabulary peers (xgrammar, outlines-core) are given it: each
    token id's bytes, with special tokens (control tokens, placeholders, EOS) as b"", so those
    engines never emit them inside JSON, as llguidance does not."""

    def __init__(self, tokenizer: Any, eos: Sequence[int]) -> None:
        self.tokenizer = tokenizer  # llguidance.LLTokenizer
        self.eos: tuple[int, ...] = tuple(int(e) for e in eos)
        self._pieces: list[bytes] | None = None

    @property
    def n_vocab(self) -> int:
        return int(self.tokenizer.vocab_size)

    def pieces(self) -> list[bytes]:
        """Token id -> bytes (b"" for a special token), computed once."""
        if self._pieces is None:
            tok = self.tokenizer
            self._pieces = [b"" if tok.is_special_token(i) else tok.decode_bytes([i])
                            for i in range(self.n_vocab)]
        return self._pieces

    def token_ids_by_bytes(self) -> dict[bytes, list[int]]:
        """outlines-core's vocabulary: bytes -> the token ids spelling them, special tokens and
        EOS left out (outlines-core takes EOS apart)."""
        table: dict[bytes, list[int]] = {}
        for i, piece in enumerate(self.pieces()):
            if piece and i not in self.eos:
                table.setdefault(piece, []).append(i)
        return table


# ---------------------------------------------------------------------------------------------
# Servers started for a benchmark (or a test): a free port, ready on /health, stopped by PID


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ManagedProcess:
    """A server started as `argv` (each "{port}" in it replaced by a free port on 127.0.0.1) in
    a session of its own, its stdout and stderr in a log file; ready once GET /health answers
    200. Stopped by PID: SIGTERM to its process group (so that children such as vLLM's engine
    core go with it), SIGKILL after 30 s. A server that exits or does not get ready within
    `startup_timeout` raises RuntimeError with the tail of its log, which is `log_path` (by
    default NAME-PORT.log in the temporary folder). Subclasses set `name` (in messages and the
    log's file name) and `cwd` (where argv runs; None: here)."""

    name: ClassVar[str] = "server"
    cwd: ClassVar[Path | None] = None

    def __init__(self, argv: Sequence[str], *, startup_timeout: float = 180.0,
                 env: Mapping[str, str] | None = None, log_path: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"{self.name}-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [a.replace("{port}", str(self.port)) for a in argv], cwd=self.cwd,
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True)
        try:
            self._wait_ready(startup_timeout)
        except BaseException:  # not ready, or interrupted while waiting: nothing left running
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start within {timeout:.0f} s: "
                                   f"{self.log()}")
            time.sleep(0.3)

    def log(self, chars: int = 3000) -> str:
        """The last `chars` characters of what the server wrote."""
        return self.log_path.read_text(errors="replace")[-chars:]

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

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class ServerProcess(ManagedProcess):
    """`kaname serve ARGS` on 127.0.0.1 and a free port (chosen here), run by this Python."""

    name = "kaname-serve"

    def __init__(self, *args: str, startup_timeout: float = 180.0,
                 env: Mapping[str, str] | None = None, log_path: Path | None = None) -> None:
        super().__init__([sys.executable, "-m", "kaname.cli", "serve", "--host", "127.0.0.1",
                          "--port", "{port}", *args], startup_timeout=startup_timeout, env=env,
                         log_path=log_path)
