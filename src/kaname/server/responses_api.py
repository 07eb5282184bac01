"""OpenAI's Responses API routes (`POST /v1/responses`, JSON and SSE; GET and DELETE of a
stored response): the edge (`kaname.edges.responses`) translates, the one turn pipeline
(`Turns`) runs.

Stored responses (`store`, on by default as in OpenAI's API) live in a bounded in-memory LRU
(`ResponseStore`) for the life of the process, so `previous_response_id` continues a
conversation and `GET /v1/responses/{id}` finds one.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, cast

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from ..chat import TurnResult
from ..edges import responses as edge
from ..edges.responses import (
    Context,
    DeletedResponse,
    Located,
    Output,
    ResponseObject,
    ResponsesRequest,
    input_items,
)
from ..errors import RequestError
from .access_log import note_error
from .bodies import read_body
from .errors import APIError, api_error
from .openapi import route_doc
from .sse import EventStream
from .turn import Turn, Turns

STORE_MAX_RESPONSES = 256
STORE_MAX_BYTES = 64 * 1024 * 1024  # what the stored responses hold in memory, summed


# ---- the store ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """A stored response, kept as compact JSON bytes: as Python objects the same conversation
    held ~10x its JSON size (110 responses of 0.68 MB took ~730 MB), so the bound counted
    one thing and memory held another. Bytes are what they weigh."""

    response_json: bytes
    own_json: bytes  # the items this response added to the conversation: [[item, at], ...]
    # the response it continues: kept alive by this one, so counted in its size
    parent: Stored | None
    size: int  # bytes held: this entry's JSON and its parents'

    @property
    def response(self) -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(self.response_json))

    @property
    def chain(self) -> tuple[Located, ...]:
        """The conversation up to and including this response's output (instructions are
        not carried over, as in OpenAI's API)."""
        entries: list[Stored] = []
        entry: Stored | None = self
        while entry is not None:
            entries.append(entry)
            entry = entry.parent
        return tuple((item, at) for e in reversed(entries) for item, at in json.loads(e.own_json))


@dataclass
class ResponseStore:
    """The last `max_responses` stored responses (least recently used goes first), within
    `max_bytes` of what they hold in memory, for the life of the process."""

    max_responses: int = STORE_MAX_RESPONSES
    max_bytes: int = STORE_MAX_BYTES
    _entries: OrderedDict[str, Stored] = field(default_factory=OrderedDict)
    _bytes: int = 0

    def get(self, response_id: str) -> Stored | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def put(self, response: dict[str, Any], history: Sequence[Located],
            new: Sequence[Located], parent: Stored | None) -> None:
        """Keep `response`, which continued `parent` (whose chain is `history`, or the
        conversation `history` where there is no parent) with the input items `new`."""
        # a call cut short by max_output_tokens has no JSON arguments: continuing the
        # conversation leaves it out rather than failing on the server's own output
        own = (*(() if parent else history), *new,
               *((item, "/previous_response_id") for item in response["output"]
                 if _replayable(item)))
        response_json = _compact(response)
        own_json = _compact([[item, at] for item, at in own])
        entry = Stored(response_json, own_json, parent,
                       len(response_json) + len(own_json) + (parent.size if parent else 0))
        if entry.size > self.max_bytes:
            return  # too big to keep; continuing from it is then a 400, not a memory leak
        self._entries[response["id"]] = entry
        self._bytes += entry.size
        while len(self._entries) > self.max_responses or self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.size

    def delete(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is not None:
            self._bytes -= entry.size
        return entry is not None


def _compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass")


def _replayable(item: Mapping[str, Any]) -> bool:
    if item.get("type") != "function_call":
        return True
    try:
        json.loads(item.get("arguments", ""))
    except (ValueError, RecursionError):
        return False
    return True


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"No response found with id '{response_id}'.",
                    param="/response_id", code="not_found")


# ---- the routes -----------------------------------------------------------------------------

def add_responses_routes(app: FastAPI, turns: Turns) -> None:
    """Register /v1/responses on `app`."""
    store = ResponseStore()

    @app.post("/v1/responses", **route_doc(ResponseObject, "turn", stream="responses",
                                           request=ResponsesRequest, examples="responses",
                                           links="created_response"))
    async def create_response(request: Request) -> Response:
        req = await read_body(request, ResponsesRequest, turns)
        parent = None
        if req.previous_response_id is not None:
            parent = store.get(req.previous_response_id)
            if parent is None:
                raise APIError(400, f"Previous response with id '{req.previous_response_id}' "
                                    "not found.", param="/previous_response_id",
                               code="previous_response_not_found")
        history = parent.chain if parent else ()
        if not history and not input_items(req):
            raise RequestError("give at least one input item (or a previous_response_id)",
                               pointer="/input")
        turn = await turns.prepare(edge.to_turn(req, history), deadline=turns.deadline(request))
        ctx = Context(req, turn.response_id, turn.created, turns.backend.model_id, history)
        namespaces = {t.name: t.namespace for t in turn.request.tools if t.namespace}
        if req.stream:
            slot = await turns.admit(turn)
            return EventStream(_stream(turns, turn, ctx, store, parent, namespaces), slot,
                               dialect="responses")
        result = await turns.complete(request, turn)
        output = Output(namespaces)
        output.finish(result.turn, result.finish)
        body = ctx.response(edge.status(result), output.items, result)
        _keep(store, ctx, body, parent)
        return JSONResponse(body)

    @app.get("/v1/responses/{response_id}",
             **route_doc(ResponseObject, "stored_response", links="stored_response",
                         operation_id="get_response"))
    async def get_response(response_id: str) -> Response:
        entry = store.get(response_id)
        if entry is None:
            raise _not_found(response_id)
        return Response(entry.response_json, media_type="application/json")

    @app.delete("/v1/responses/{response_id}",
                **route_doc(DeletedResponse, "stored_response",
                            operation_id="delete_response"))
    async def delete_response(response_id: str) -> dict[str, Any]:
        if not store.delete(response_id):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}


def _keep(store: ResponseStore, ctx: Context, body: dict[str, Any],
          parent: Stored | None) -> None:
    if ctx.req.store is not False:
        store.put(body, ctx.history, input_items(ctx.req), parent)


async def _stream(turns: Turns, turn: Turn, ctx: Context, store: ResponseStore,
                  parent: Stored | None, namespaces: Mapping[str, str]
                  ) -> AsyncGenerator[dict[str, Any], None]:
    """The documented event sequence: created, in_progress, each item's events, then
    completed / incomplete; an error once the stream has started is `response.failed`."""
    seq = itertools.count()

    def numbered(event: dict[str, Any]) -> dict[str, Any]:
        return {"type": event["type"], "sequence_number": next(seq),
                **{k: v for k, v in event.items() if k != "type"}}

    yield numbered({"type": "response.created", "response": ctx.response("in_progress")})
    yield numbered({"type": "response.in_progress", "response": ctx.response("in_progress")})
    output = Output(namespaces)
    try:
        result: TurnResult | None = None
        async with aclosing(turns.stream(turn)) as items:
            async for item in items:
                if isinstance(item, TurnResult):
                    result = item
                    continue
                for event in output.feed(item):
                    yield numbered(event)
        if result is None:  # pragma: no cover - Turns.stream ends with its result or raises
            raise RuntimeError("the turn ended without a result")
        for event in output.finish(result.turn, result.finish):
            yield numbered(event)
    except Exception as e:  # the 200 is sent: the error goes in the stream
        err = api_error(e)
        note_error(err.code or err.type, err.param)
        yield numbered({"type": "response.failed", "response": ctx.response(
            "failed", output.items, error={"code": err.code or err.type,
                                           "message": err.message})})
        return
    body = ctx.response(edge.status(result), output.items, result)
    _keep(store, ctx, body, parent)
    yield numbered({"type": f"response.{body['status']}", "response": body})
