"""Errors in the shape of the API that was called: OpenAI's `{"error": {"message", "type",
"param", "code"}}` or Anthropic's `{"type": "error", "error": {"type", "message"}}`, and the one
table that maps kaname's exceptions to them (`api_error`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from starlette.responses import JSONResponse

from ..errors import (
    ConstraintError,
    ContextLengthError,
    FormatParseError,
    GrammarTooComplexError,
    KanameError,
    NotEnforcedError,
)

log = logging.getLogger("kaname.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 422: "invalid_response_error",
          429: "rate_limit_error", 502: "upstream_error", 503: "overloaded_error",
          504: "timeout_error"}


# Anthropic's error types by status (its API answers 529 where OpenAI's answers 503)
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error"}

Shape = Literal["openai", "anthropic"]


def shape_of(path: str) -> Shape:
    """Which API a path belongs to: Anthropic's Messages API, or OpenAI's."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


class APIError(KanameError):
    """An error answered to the client; never a 500 for anything the client sent."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error")

    def body(self, shape: Shape = "openai") -> dict[str, Any]:
        if shape == "anthropic":
            # Anthropic's errors have no param field: the message names it (from_constraint_
            # error and the validation handler write the pointer into it)
            return {"type": "error", "error": {
                "type": _ANTHROPIC_TYPES.get(self.status, "api_error"),
                "message": self.message}}
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self, shape: Shape = "openai") -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return JSONResponse(self.body(shape), status_code=self.status, headers=headers)


def api_error(e: BaseException) -> APIError:
    """The HTTP answer for an exception, wherever it was raised (a handler, a stream's tail).
    Anything not kaname's own is a bug: logged, and answered 500 without details."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ConstraintError):
        return from_constraint_error(e)
    if isinstance(e, ContextLengthError):
        return APIError(400, str(e), param=e.param or "messages",
                        code="context_length_exceeded")
    if isinstance(e, FormatParseError):  # only possible with strict_level "off"
        return APIError(422, f"the model's turn does not follow its chat format "
                             f"(strict_level off): {e}", code="format_parse_error")
    if isinstance(e, NotEnforcedError):
        return APIError(502, f"upstream did not enforce the grammar ({e}); is its "
                             "structured-output backend llguidance? Set allow_unenforced=true "
                             "to get the raw text marked as not enforced",
                        code="upstream_not_enforced")
    if isinstance(e, KanameError):  # the model failed (ModelError), not the request
        log.error("generation failed: %s", e)
        return APIError(500, f"generation failed: {e}", type="server_error")
    log.error("unhandled error", exc_info=e)
    return APIError(500, "internal error (logged on the server)", type="server_error")


def from_constraint_error(e: ConstraintError) -> APIError:
    """A schema, grammar or request problem: 400 naming the keyword and JSON pointer."""
    pointer = e.pointer or None
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


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}  # pydantic's union tags


def pointer_of(loc: Sequence[Any], body: Any) -> str | None:
    """The JSON pointer into `body` of a pydantic error location. Pydantic puts the names of
    union members and validators into locations (`tools/0/ToolDef/function`); only the steps
    that exist in the body are kept."""
    parts: list[str] = []
    node = body
    for step in loc:
        if isinstance(node, Mapping) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        elif isinstance(node, Mapping | list):
            # a key the body lacks (a missing required field) ends the pointer there
            if isinstance(step, str) and step.isidentifier() and step[:1].islower() \
                    and step not in _TYPE_TAGS and isinstance(node, Mapping):
                parts.append(step)
                break
            continue
        else:
            break
        parts.append(str(step).replace("~", "~0").replace("/", "~1"))
    return "/" + "/".join(parts) if parts else None
