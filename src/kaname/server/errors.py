"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from ..errors import ConstraintError, GrammarTooComplexError

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 422: "invalid_response_error",
          429: "rate_limit_error", 502: "upstream_error", 503: "overloaded_error",
          504: "timeout_error"}


class APIError(Exception):
    """An error answered to the client; never a 500 for anything the client sent."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def from_constraint_error(e: ConstraintError, *, prefix: str = "") -> APIError:
    """A schema, grammar or request problem: 400 naming the keyword and JSON pointer."""
    pointer = f"{prefix}{e.pointer or ''}" or None
    message = e.message
    if pointer and pointer not in message:
        message = f"{message} (at {pointer})"
    if e.keyword and f"'{e.keyword}'" not in message and e.keyword not in message:
        message = f"{message} (keyword '{e.keyword}')"
    return APIError(400, message, param=pointer, code=_code(e))


def _code(e: ConstraintError) -> str:
    """InvalidSchemaError -> invalid_schema; a plain ConstraintError -> invalid_request."""
    if isinstance(e, GrammarTooComplexError):
        return "grammar_too_complex"
    name = type(e).__name__.removesuffix("Error")
    if name == "Constraint":
        return "invalid_request"
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
