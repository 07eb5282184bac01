"""Server-sent events: framing, and the one tail every stream ends with.

Once the 200 and its headers are sent an error can only travel in the stream: it becomes one
error event in the API's shape (through the same table as every other error). OpenAI's chat
and completions streams are unnamed `data:` events ending in `[DONE]`; the Responses API and
Anthropic's Messages API name each event after its `type` and have no `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Literal

import anyio
from starlette.responses import StreamingResponse

from .access_log import note_cancelled, note_error
from .admission import Slot
from .errors import api_error

DONE = "data: [DONE]\n\n"


# Characters str.splitlines (and so clients such as httpx) take for line breaks that JSON
# leaves raw: escaped, so that no generated text can split an event.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


Dialect = Literal["openai", "responses", "anthropic"]


def event(obj: dict[str, Any], name: str | None = None) -> str:
    data = json.dumps(obj, ensure_ascii=False).translate(_LINE_BREAKS)
    return f"event: {name}\ndata: {data}\n\n" if name else f"data: {data}\n\n"


async def framed(events: AsyncGenerator[dict[str, Any], None], dialect: Dialect = "openai"
                 ) -> AsyncGenerator[str, None]:
    """`events` as SSE lines; an exception ends them with its error event; OpenAI's chat and
    completions streams always end with `[DONE]`."""
    named = dialect != "openai"
    try:
        async with aclosing(events):
            async for obj in events:
                yield event(obj, obj.get("type") if named else None)
    except Exception as e:  # headers are sent: the error goes in the stream
        err = api_error(e)
        note_error(err.code or err.type, err.param)
        if dialect == "anthropic":
            yield event(err.body("anthropic"), "error")
        elif dialect == "responses":
            yield event({"type": "error", "code": err.code, "message": err.message,
                         "param": err.param}, "error")
        else:
            yield event(err.body())
    if not named:
        yield DONE


class EventStream(StreamingResponse):
    """SSE that always closes its event generator (so a generation whose client went away is
    cancelled even when the response was cut while sending) and frees a slot the generation
    never took."""

    def __init__(self, events: AsyncGenerator[dict[str, Any], None], slot: Slot,
                 dialect: Dialect = "openai"):
        self._lines = framed(events, dialect)
        self._sent_all = False
        super().__init__(self._until_the_end(), media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self._slot = slot

    async def _until_the_end(self) -> AsyncGenerator[str, None]:
        async for line in self._lines:
            yield line
        self._sent_all = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self._sent_all:  # the client went away (or the server stopped) first
                note_cancelled()
            with anyio.CancelScope(shield=True):
                await self._lines.aclose()
            if not self._slot.taken:
                self._slot.release()
