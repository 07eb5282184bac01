"""Anthropic's Messages API routes (`POST /v1/messages`, `POST /v1/messages/count_tokens`):
the edge (`kaname.edges.messages`) translates, the one turn pipeline (`Turns`) runs."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from ..chat import TurnResult
from ..edges import messages as edge
from ..edges.messages import (
    BlockEvents,
    CountTokensRequest,
    Message,
    MessageReply,
    MessagesRequest,
    TokenCount,
)
from .bodies import read_body
from .openapi import route_doc
from .sse import EventStream
from .turn import Turn, Turns


def add_messages_routes(app: FastAPI, turns: Turns) -> None:
    """Register /v1/messages and /v1/messages/count_tokens on `app`."""

    @app.post("/v1/messages", **route_doc(Message, "turn", shape="anthropic",
                                          request=MessagesRequest, stream="messages",
                                          examples="messages"))
    async def messages(request: Request) -> Response:
        req = await read_body(request, MessagesRequest, turns)
        # tool_use ids as Anthropic writes them; they come back as tool_result.tool_use_id
        turn = await turns.prepare(edge.to_turn(req), deadline=turns.deadline(request),
                                   call_ids="toolu_")
        reply = MessageReply(req, turn.response_id, turns.backend.model_id)
        if req.stream:
            slot = await turns.admit(turn)
            return EventStream(_events(turns, turn, reply), slot, dialect="anthropic")
        return JSONResponse(reply.body(await turns.complete(request, turn)))

    @app.post("/v1/messages/count_tokens",
              **route_doc(TokenCount, "count_tokens", shape="anthropic",
                          request=CountTokensRequest, examples="count_tokens"))
    async def count_tokens(request: Request) -> dict[str, int]:
        """The prompt's tokens as the model sees them (rendered, tools included); nothing is
        generated."""
        req = await read_body(request, CountTokensRequest, turns)
        turn = await turns.prepare(edge.to_turn(req), deadline=turns.deadline(request))
        return {"input_tokens": turn.prompt_tokens}


async def _events(turns: Turns, turn: Turn, reply: MessageReply
                  ) -> AsyncGenerator[dict[str, Any], None]:
    """message_start, ping, the blocks' events, message_delta, message_stop."""
    yield {"type": "message_start", "message": reply.head(
        [], edge.usage(None, turn.prompt_tokens))}
    yield {"type": "ping"}
    blocks = BlockEvents(reply)
    async with aclosing(turns.stream(turn)) as items:
        async for item in items:
            if not isinstance(item, TurnResult):
                for event in blocks.feed(item):
                    yield event
                continue
            for event in [*blocks.close(), *reply.delta(item)]:
                yield event
