"""What a request body may be: at most `max_body_bytes` (chunked bodies included), and all in
by the request's read deadline (transport.py: `--read-timeout` from the request's first byte;
where no server of ours set one, from the moment the app sees the request). Both are enforced
while the body is read and answered in the error shape of the API the path belongs to: 413,
and 408 with `Connection: close` (a body that trickles in holds no worker, only this coroutine,
until its deadline)."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, shape_of
from .transport import READ_DEADLINE

# scope key: the APIError that ended the reading of the body. FastAPI turns errors while
# reading the body into a 400; the app's error handlers answer this instead.
BODY_REFUSED = "kaname.body_refused"


def too_large(limit: int) -> APIError:
    """The 413 for a body over `limit` bytes."""
    return APIError(413, f"request body exceeds {limit} bytes", code="body_too_large")


def too_slow(timeout: float) -> APIError:
    """The 408 for a body not all in within `timeout` seconds of the request's start."""
    return APIError(408, f"the request was not received within the read timeout of "
                         f"{timeout:g} s; send its body at once", code="read_timeout")


class _Refused(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, read_timeout: float):
        self.app = app
        self.limit = limit
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        shape = shape_of(scope.get("path", ""))
        if length.isdigit() and int(length) > self.limit:
            await too_large(self.limit).response(shape)(scope, receive, send)
            return
        deadline = scope.get(READ_DEADLINE) or \
            asyncio.get_running_loop().time() + self.read_timeout
        received = 0
        complete = False  # the whole body is in: later receives (a disconnect) are not bounded

        def refuse(error: APIError) -> _Refused:
            scope[BODY_REFUSED] = error
            return _Refused()

        async def limited() -> Message:
            nonlocal received, complete
            if complete:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise refuse(too_slow(self.read_timeout)) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise refuse(too_large(self.limit))
            return message

        try:
            await self.app(scope, limited, send)
        except _Refused:  # not turned into an answer on the way out (a route that did not)
            await scope[BODY_REFUSED].response(shape)(scope, receive, send)
