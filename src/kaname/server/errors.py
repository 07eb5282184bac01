"""Errors as HTTP answers: one table from kaname's exceptions to (status, code, param), and
each API's shape to render them in, for plain and streamed answers alike: OpenAI's
`{"error": {"message", "type", "param", "code"}}`, Anthropic's `{"type": "error", "error":
{"type", "message"}}`, and the Responses API's stream `error` event."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from starlette.responses import JSONResponse

from ..errors import (
    ConstraintError,
    ContextLengthError,
    FormatParseError,
    GrammarTooComplexError,
    InvalidGrammarError,
    InvalidRegexError,
    InvalidSchemaError,
    KanameError,
    NotEnforcedError,
    RequestError,
    UnknownModelError,
    UnsupportedSchemaError,
)
from .access_log import note_error

log = logging.getLogger("kaname.server")

# Each API's error type by status; a status neither names is a client's fault or the
# server's by its class (`error_type`): a 405 is an invalid request, not a server error.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 422: "invalid_response_error",
          429: "rate_limit_error", 502: "upstream_error", 503: "overloaded_error",
          504: "timeout_error"}
# Anthropic's (its API answers 529 where OpenAI's answers 503)
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error"}
_SERVER_TYPES = {"openai": "server_error", "anthropic": "api_error"}

Shape = Literal["openai", "anthropic", "responses"]


def shape_of(path: str) -> Shape:
    """Which API's error shape a path answers in (before its route has run: 401, 413, an
    unknown path)."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def error_type(status: int, api: Literal["openai", "anthropic"]) -> str:
    """The `type` an error of `status` has in `api`'s shape: the API's own name for the
    status, else a client error (4xx) is an invalid request and anything else the server's."""
    named = (_ANTHROPIC_TYPES if api == "anthropic" else _TYPES).get(status)
    if named is not None:
        return named
    return "invalid_request_error" if 400 <= status < 500 else _SERVER_TYPES[api]


class APIError(KanameError):
    """An HTTP answer: the table's rendering of an exception, or one the server decides
    itself (401, 408, 413, 429, 504...). Never a 500 for anything the client sent.
    `headers`: those the status calls for beyond the usual (a 405's `Allow`); `response` adds
    `Retry-After` to a 429 / 503 and `Connection: close` to a 408."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None,
                 headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or error_type(status, "openai")
        self.headers = dict(headers or {})

    def body(self, shape: Shape = "openai") -> dict[str, Any]:
        if shape == "anthropic":
            # Anthropic's errors have no param field: the message names it
            return {"type": "error", "error": {
                "type": error_type(self.status, "anthropic"),
                "message": self.message}}
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def event(self, shape: Shape) -> dict[str, Any]:
        """The error as a stream event, once the 200 is sent."""
        if shape == "responses":
            return {"type": "error", "code": self.code or self.type, "message": self.message,
                    "param": self.param}
        return self.body(shape)

    def response(self, shape: Shape = "openai") -> JSONResponse:
        note_error(self.code or self.type, self.param)
        headers = dict(self.headers)
        if self.status in (429, 503):
            headers["Retry-After"] = "1"
        if self.status == 408:  # the server stops waiting for this connection (RFC 9110)
            headers["Connection"] = "close"
        return JSONResponse(self.body(shape), status_code=self.status, headers=headers)


# kaname's exceptions → (status, wire code); the first class an exception is an instance of
# decides (subclasses first). The param is the exception's pointer into the request.
ERRORS: tuple[tuple[type[KanameError], int, str], ...] = (
    (GrammarTooComplexError, 400, "grammar_too_complex"),
    (InvalidSchemaError, 400, "invalid_schema"),
    (UnsupportedSchemaError, 400, "unsupported_schema"),
    (InvalidRegexError, 400, "invalid_regex"),
    (InvalidGrammarError, 400, "invalid_grammar"),
    (ConstraintError, 400, "invalid_request"),
    (RequestError, 400, "invalid_request"),  # its own code where it gives one
    (ContextLengthError, 400, "context_length_exceeded"),
    (UnknownModelError, 404, "model_not_found"),
    (FormatParseError, 422, "format_parse_error"),
    (NotEnforcedError, 502, "upstream_not_enforced"),
)


def api_error(e: BaseException) -> APIError:
    """The HTTP answer for an exception, wherever it was raised (a handler, a stream's tail).
    Anything not kaname's own is a bug: logged, and answered 500 without details."""
    if isinstance(e, APIError):
        return e
    for cls, status, code in ERRORS:
        if isinstance(e, cls):
            return _render(e, status, code)
    if isinstance(e, KanameError):  # the model failed (ModelError), not the request
        log.error("generation failed: %s", e)
        return APIError(500, f"generation failed: {e}", type="server_error")
    log.error("unhandled error", exc_info=e)
    return APIError(500, "internal error (logged on the server)", type="server_error")


def _render(e: KanameError, status: int, code: str) -> APIError:
    if isinstance(e, ConstraintError):  # names keyword and pointer in the message too
        pointer = e.pointer or None
        message = e.message
        if pointer and pointer not in message:
            message = f"{message} (at {pointer})"
        if e.keyword and e.keyword not in message:
            message = f"{message} (keyword '{e.keyword}')"
        return APIError(status, message, param=pointer, code=code)
    if isinstance(e, RequestError):
        message = e.message if not e.pointer or e.pointer in e.message \
            else f"{e.pointer}: {e.message}"
        return APIError(status, message, param=e.pointer, code=e.code or code)
    if isinstance(e, ContextLengthError):
        return APIError(status, str(e), param=e.param or "messages", code=code)
    if isinstance(e, UnknownModelError):
        return APIError(status, str(e), param="/model", code=code)
    if isinstance(e, FormatParseError):  # expected with strict_level "off" only
        return APIError(status, f"the model's turn does not follow its chat format: {e}",
                        code=code)
    if isinstance(e, NotEnforcedError):
        return APIError(status, f"upstream did not enforce the grammar ({e}); is its "
                                "structured-output backend llguidance? Set "
                                "allow_unenforced=true to get the raw text marked as not "
                                "enforced", code=code)
    return APIError(status, str(e), code=code)  # pragma: no cover - every row is above
