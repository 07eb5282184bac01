"""Request body size limit, enforced while the body is read (chunked bodies included), answered
413 in the error shape of the API the path belongs to."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, shape_of


def too_large(limit: int) -> APIError:
    """The 413 for a body over `limit` bytes."""
    return APIError(413, f"request body exceeds {limit} bytes", code="body_too_large")


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    def _error(self) -> APIError:
        return too_large(self.limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        shape = shape_of(scope.get("path", ""))
        if length.isdigit() and int(length) > self.limit:
            await self._error().response(shape)(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # FastAPI turns errors while reading the body into a 400; the flag lets
                    # the error handlers answer 413 instead.
                    scope["kaname.body_too_large"] = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._error().response(shape)(scope, receive, send)
