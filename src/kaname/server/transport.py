"""The read deadline: a request's headers and body must arrive within `--read-timeout`
seconds of its first byte (of the connection's opening, for its first request), or the
connection is closed.

uvicorn has no such bound: h11 waits for headers as long as they keep coming under its size
limit (`h11_max_incomplete_event_size` bounds their bytes, not their time), and
`timeout_keep_alive` covers only the idle time between requests, so a client sending a byte a
second holds a connection for as long as it likes. `ReadDeadlineProtocol` is uvicorn's h11
protocol with one timer more, run while the connection waits for the client's request:

    connection opened / a request's first byte ──► timer armed (deadline in the scope)
    request complete (h11: their side DONE)     ──► timer cancelled
    timer fires, headers incomplete             ──► connection closed (no answer is possible)
    timer fires, headers in, body still coming  ──► the app answers 408 (limits.py bounds its
                                                    reads by the same deadline) with
                                                    `Connection: close`; the connection is
                                                    closed `ANSWER_GRACE` s later regardless
                                                    (a route that reads no body, a response
                                                    already under way)

The deadline goes into the request's scope (`READ_DEADLINE`, the event loop's clock), so that
the app's 408 and the protocol's close agree on the instant.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

READ_DEADLINE = "kaname.read_deadline"  # scope key: when the request must be all in
# seconds the app gets, past the deadline, to write its 408 before the connection is closed
ANSWER_GRACE = 2.0
# their side of the connection while the client still owes the request
_RECEIVING = (h11.IDLE, h11.SEND_BODY)


class ReadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a request's reading bounded by `read_timeout` seconds
    (set by `read_deadline_protocol`)."""

    read_timeout: float = 30.0

    def __init__(self, config: uvicorn.Config, server_state: ServerState,
                 app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None):
        super().__init__(config, server_state, app_state, _loop)
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        """h11's events as uvicorn handles them (called on data and once a response is done,
        for a request already buffered), the timer following the client's side."""
        if self._timer is None and self.conn.their_state is h11.IDLE \
                and self.conn.trailing_data[0]:  # (a copy of at most h11's 16 KiB of headers)
            self._arm()  # a request's first bytes
        super().handle_events()
        if self.conn.their_state is h11.SEND_BODY:
            self._arm()  # a request buffered whole but for its body
        elif self.conn.their_state not in _RECEIVING:
            self._disarm()  # the request is in (or the connection is done)
        scope = cast(dict[str, Any] | None, self.scope)  # the latest request's
        if scope is not None and READ_DEADLINE not in scope:
            # a new request (its headers came with this call): the deadline armed at its
            # first byte, read by the app's task, which starts after this returns
            scope[READ_DEADLINE] = self._deadline

    def _arm(self) -> None:
        if self._timer is None:
            self._deadline = self.loop.time() + self.read_timeout
            self._timer = self.loop.call_at(self._deadline, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        if self.transport.is_closing() or self.conn.their_state not in _RECEIVING:
            self._timer = None
            return
        cycle = self.cycle
        if self.conn.their_state is h11.SEND_BODY and cycle is not None \
                and not cycle.response_started:
            # the app's 408 is due now; the timer stays set, so that nothing re-arms it
            self._timer = self.loop.call_later(ANSWER_GRACE, self._close)
            return
        self._timer = None
        self._close()

    def _close(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self.transport.close()  # connection_lost then ends the app's reads


def read_deadline_protocol(read_timeout: float) -> type[ReadDeadlineProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, bounding reads by `read_timeout`."""
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,),
                {"read_timeout": read_timeout})
