"""One log line per request, at the default log level: what was asked, what came of it.

`AccessLog` is the outermost of the app's middleware (inside only Starlette's own error
handler): it opens a `RequestRecord` for each HTTP request
(a context variable, so the code that serves the request fills it in wherever it runs: the
generation's usage and finish reason in `calls.py` and `turn.py`, an error's code where it is
rendered) and writes the line when the response's last byte is sent, or when the request ends
without it (the client went away: "cancelled"). A 5xx, a timeout or a cancel is a warning, the
rest info (probes that succeed, /health, /metrics and /api/hello, debug). `--log-format
json` writes each line as one JSON object.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("kaname.requests")

LogFormat = Literal["text", "json"]

_record: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "kaname_request_record", default=None)

# error codes that say the request did not run to its end (a warning, like a 5xx)
_CUT = frozenset({"timeout", "upstream_timeout", "client_closed", "shutting_down",
                  "read_timeout"})
# probes (a load balancer's every few seconds, Prometheus' scrapes): a line each only at the
# debug level, unless they fail
_PROBES = frozenset({"/health", "/metrics", "/api/hello"})


@dataclass
class RequestRecord:
    """What one request did, as the line reports it (None: not known, or not a generation)."""

    method: str
    path: str
    started: float  # time.monotonic() at arrival
    status: int | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    draft_tokens: int | None = None
    draft_accepted: int | None = None
    first_token: float | None = None  # time.monotonic() of the first generated text
    finish_reason: str | None = None
    error: str | None = None  # the error's code (or type), also for one sent in a stream
    error_param: str | None = None  # the request field it names, where it names one
    cancelled: bool = False  # the response never finished: the client went away

    def fields(self, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "path": self.path,
                               "status": self.status, "model": self.model,
                               "prompt_tokens": self.prompt_tokens,
                               "completion_tokens": self.completion_tokens,
                               "draft_tokens": self.draft_tokens,
                               "draft_accepted": self.draft_accepted,
                               "ttft_s": _seconds(self.first_token, self.started),
                               "total_s": round(now - self.started, 3),
                               "finish_reason": self.finish_reason, "error": self.error,
                               "error_param": self.error_param}
        if self.cancelled:
            out["cancelled"] = True
        return out

    @property
    def level(self) -> int:
        if self.cancelled or (self.status or 0) >= 500 or self.error in _CUT:
            return logging.WARNING
        if self.path in _PROBES and self.status == 200:
            return logging.DEBUG
        return logging.INFO


def _seconds(at: float | None, since: float) -> float | None:
    return None if at is None else round(at - since, 3)


def current() -> RequestRecord | None:
    """The record of the request being served here (None outside a request)."""
    return _record.get()


def note_error(code: str | None, param: str | None = None) -> None:
    """An error answered (or sent in a stream) for the current request, and the request field
    it names."""
    if (r := _record.get()) is not None and r.error is None:
        r.error, r.error_param = code, param


def note_cancelled() -> None:
    """The current request's answer was cut: its client went away before its end."""
    if (r := _record.get()) is not None:
        r.cancelled = True


def text_line(f: dict[str, Any]) -> str:
    """`POST /v1/chat/completions 200 model=m prompt=12 completion=30 drafts=8/10 ttft=0.21s
    total=1.40s finish=stop`; fields not known are left out."""
    parts = [f["method"], f["path"], str(f["status"] if f["status"] is not None else "-")]
    if f.get("cancelled"):
        parts.append("cancelled")
    for key, name in (("model", "model"), ("prompt_tokens", "prompt"),
                      ("completion_tokens", "completion")):
        if f[key] is not None:
            parts.append(f"{name}={f[key]}")
    if f["draft_tokens"]:
        parts.append(f"drafts={f['draft_accepted']}/{f['draft_tokens']}")
    if f["ttft_s"] is not None:
        parts.append(f"ttft={f['ttft_s']:.2f}s")
    parts.append(f"total={f['total_s']:.2f}s")
    if f["finish_reason"] is not None:
        parts.append(f"finish={f['finish_reason']}")
    if f["error"] is not None:
        parts.append(f"error={f['error']}")
    if f["error_param"] is not None:
        parts.append(f"param={f['error_param']}")
    return " ".join(parts)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"kaname: {level}{record.getMessage()}"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "request", None)
        body = fields if fields is not None else {"message": record.getMessage()}
        return json.dumps({"time": round(record.created, 3), "level": record.levelname.lower(),
                           **body}, ensure_ascii=False)


def configure(fmt: LogFormat = "text") -> None:
    """Send the request lines to stderr (kaname serve calls this once)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


class AccessLog:
    """ASGI middleware writing one line per HTTP request (see the module's text)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(scope["method"], scope["path"], time.monotonic())
        token = _record.set(record)
        finished = False

        async def sending(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                record.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if record.status is None:  # Starlette's outer handler answers it 500
                record.status, finished = 500, True
                record.error = record.error or "internal_error"
            raise
        finally:
            _record.reset(token)
            record.cancelled = record.cancelled or not finished
            level = record.level
            if log.isEnabledFor(level):  # /health every few seconds builds no line unshown
                fields = record.fields(time.monotonic())
                log.log(level, "%s", text_line(fields), extra={"request": fields})
