"""Server-sent events: framing, and the one tail every stream ends with.

Once the 200 and its headers are sent an error can only travel in the stream: it becomes one
OpenAI-shaped error event (through the same table as every other error), then `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.responses import StreamingResponse

from .admission import Slot
from .errors import api_error

DONE = "data: [DONE]\n\n"


# Characters str.splitlines (and so clients such as httpx) take for line breaks that JSON
# leaves raw: escaped, so that no generated text can split an event.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False).translate(_LINE_BREAKS)}\n\n"


async def framed(events: AsyncGenerator[dict[str, Any], None]) -> AsyncGenerator[str, None]:
    """`events` as SSE lines; an exception ends them with its error event; always `[DONE]`."""
    try:
        async with aclosing(events):
            async for obj in events:
                yield event(obj)
    except Exception as e:  # headers are sent: the error goes in the stream
        yield event(api_error(e).body())
    yield DONE


class EventStream(StreamingResponse):
    """SSE that always closes its event generator (so a generation whose client went away is
    cancelled even when the response was cut while sending) and frees a slot the generation
    never took."""

    def __init__(self, events: AsyncGenerator[dict[str, Any], None], slot: Slot):
        self._lines = framed(events)
        super().__init__(self._lines, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self._slot = slot

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._lines.aclose()
            if not self._slot.taken:
                self._slot.release()
