"""OpenAI's Responses API (`POST /v1/responses`, JSON and SSE), as a translation onto the one turn
pipeline (turn.Turns): the request becomes a chat request (responses_protocol), the turn's chat
deltas (or its final message) become output items and the events that build them (`Output`).

Stored responses (`store`, on by default as in OpenAI's API) live in a bounded in-memory LRU
(`ResponseStore`) for the life of the process, so `previous_response_id` continues a
conversation and `GET /v1/responses/{id}` finds one.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from .errors import APIError, api_error
from .responses_protocol import Located, ResponsesRequest, input_items, reasoning_effort, to_chat
from .sse import EventStream
from .turn import Turn, TurnResult, Turns

STORE_MAX_RESPONSES = 256
STORE_MAX_BYTES = 64 * 1024 * 1024  # the JSON size of the stored conversations, summed


# ---- chat deltas -> output items and their events -------------------------------------------

# Each kind of output item: (its content part's type, or the field a call's text accumulates
# in; the prefix of its delta and done events; the done event's text key)
_KINDS: dict[str, tuple[str, str, str]] = {
    "reasoning": ("reasoning_text", "response.reasoning_text", "text"),
    "message": ("output_text", "response.output_text", "text"),
    "function_call": ("arguments", "response.function_call_arguments", "arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input", "input"),
}
_ID_PREFIX = {"reasoning": "rs", "message": "msg", "function_call": "fc",
              "custom_tool_call": "ctc"}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Output:
    """A turn's output items, built from chat deltas, with the stream events that build them.

    The one translation of a turn's result in both modes: a stream feeds the deltas as they
    come and then `finish`es with the final message; a non-streamed response only
    `finish`es, which brings the (empty) items to the final message."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self._index: dict[str, int] = {}  # item id -> output_index

    # the text an item accumulates, wherever its kind keeps it
    @staticmethod
    def _get(item: dict[str, Any]) -> str:
        if item["type"] in ("reasoning", "message"):
            return str(item["content"][0]["text"]) if item["content"] else ""
        return str(item[_KINDS[item["type"]][0]])

    def feed(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chat delta."""
        events: list[dict[str, Any]] = []
        if delta.get("reasoning_content"):
            events += self._text("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            events += self._text("message", delta["content"])
        for call in delta.get("tool_calls") or ():
            events += self._call(call)
        return events

    def finish(self, message: dict[str, Any], finish: str) -> list[dict[str, Any]]:
        """The events that bring the items to `message` (the turn's final one: after a cut
        turn it may hold text no delta carried) and close the last item."""
        events: list[dict[str, Any]] = []
        for key, kind in (("reasoning_content", "reasoning"), ("content", "message")):
            rest = self._rest(message.get(key), [i for i in self.items if i["type"] == kind])
            if rest:
                events += self.feed({key: rest})
        for j, call in enumerate(message.get("tool_calls") or ()):
            kind = "custom" if call.get("type") == "custom" else "function"
            value = "input" if kind == "custom" else "arguments"
            inner = call.get(kind) or {}
            item = self._calls.get(j)
            if item is None:
                events += self._call({"index": j, "id": call.get("id"), "type": kind,
                                      kind: {"name": inner.get("name"), value: ""}})
                item = self._calls[j]
            rest = self._rest(inner.get(value), [item])
            if rest:
                events += self._call({"index": j, kind: {value: rest}})
        events += self._close("incomplete" if finish == "length" else "completed")
        return events

    def _rest(self, final: Any, items: list[dict[str, Any]]) -> str:
        """What `final` adds to the text already streamed into `items`. Events that were
        sent cannot be taken back: a final text that does not extend them adds nothing."""
        sent = "".join(self._get(i) for i in items)
        if not isinstance(final, str) or not final.startswith(sent):
            return ""
        return final[len(sent):]

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        events = []
        item = self._open
        if item is None or item["type"] != kind:
            events += self._close("completed")
            item = {"id": _new_id(_ID_PREFIX[kind]), "type": kind, "content": []}
            if kind == "reasoning":
                item["summary"] = []
            else:
                item["role"] = "assistant"
            item["status"] = "in_progress"
            events += self._add(item)
            part: dict[str, Any] = {"type": _KINDS[kind][0], "text": ""}
            if kind == "message":
                part |= {"annotations": [], "logprobs": []}
            item["content"].append(part)
            events.append({"type": "response.content_part.added", **self._at(item),
                           "content_index": 0, "part": copy.deepcopy(part)})
        item["content"][0]["text"] += text
        delta = {"type": f"{_KINDS[kind][1]}.delta", **self._at(item), "content_index": 0,
                 "delta": text}
        if kind == "message":
            delta["logprobs"] = []
        return [*events, delta]

    def _call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events = []
        index = call.get("index", 0)
        item = self._calls.get(index)
        custom = call.get("type") == "custom" or "custom" in call
        inner = call.get("custom" if custom else "function") or {}
        value = "input" if custom else "arguments"
        if item is None:
            events += self._close("completed")
            kind = "custom_tool_call" if custom else "function_call"
            item = {"id": _new_id(_ID_PREFIX[kind]), "type": kind, "call_id": call.get("id"),
                    "name": inner.get("name"), value: ""}
            if not custom:  # OpenAI's custom tool calls have no status
                item["status"] = "in_progress"
            self._calls[index] = item
            events += self._add(item)
        fragment = inner.get(value)
        if fragment:
            if item is not self._open:
                raise RuntimeError(f"a delta for tool call {index} after it was closed")
            item[value] += fragment
            events.append({"type": f"{_KINDS[item['type']][1]}.delta", **self._at(item),
                           "delta": fragment})
        return events

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self._index[item["id"]] = len(self.items)
        self.items.append(item)
        self._open = item
        return [{"type": "response.output_item.added", "output_index": len(self.items) - 1,
                 "item": copy.deepcopy(item)}]

    def _at(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self._index[item["id"]]}

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        kind = item["type"]
        _, name, key = _KINDS[kind]
        done: dict[str, Any] = {"type": f"{name}.done", **self._at(item), key: self._get(item)}
        events = [done]
        if kind in ("reasoning", "message"):
            done["content_index"] = 0
            if kind == "message":
                done["logprobs"] = []
            events.append({"type": "response.content_part.done", **self._at(item),
                           "content_index": 0, "part": copy.deepcopy(item["content"][0])})
        elif kind == "function_call":
            done["name"] = item["name"]
        if "status" in item:
            item["status"] = status
        events.append({"type": "response.output_item.done",
                       "output_index": self._index[item["id"]], "item": copy.deepcopy(item)})
        return events


# ---- the response object --------------------------------------------------------------------

@dataclass
class Context:
    """One response being made: its id, what it echoes of the request, where it is stored."""

    req: ResponsesRequest
    turn: Turn
    model: str
    history: Sequence[Located]

    @property
    def id(self) -> str:
        return f"resp_{self.turn.response_id}"

    def response(self, status: str, output: list[dict[str, Any]] | None = None,
                 result: TurnResult | None = None, reasoning_tokens: int = 0,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        req = self.req
        done = status in ("completed", "incomplete", "failed")
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.turn.created,
            "status": status, "completed_at": int(time.time()) if done else None,
            "background": False, "error": error,
            "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                   else None),
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls, "model": self.model,
            "output": copy.deepcopy(output or []),
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "prompt_cache_key": req.prompt_cache_key,
            "reasoning": {"effort": reasoning_effort(req.reasoning or {}),
                          "summary": (req.reasoning or {}).get("summary")},
            "safety_identifier": req.safety_identifier,
            "service_tier": req.service_tier or "default",
            "store": req.store is not False,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": req.text if req.text is not None else {"format": {"type": "text"}},
            "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
            "tools": [_echo_tool(t) for t in req.tools or ()],
            "top_logprobs": 0, "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": req.truncation or "disabled", "user": req.user,
            "metadata": req.metadata or {}, "usage": None,
        }
        if result is not None:
            gen = result.gen
            body["usage"] = {
                "input_tokens": gen.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": gen.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": gen.prompt_tokens + gen.completion_tokens}
            body["kaname"] = result.kaname
        return body


def _echo_tool(tool: Any) -> Any:
    """A tool as the response echoes it: as sent, a function's strict default filled in."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return {"description": None, "parameters": None, **tool,
                "strict": tool.get("strict") is not False}
    return tool


def _status(result: TurnResult) -> str:
    return "incomplete" if result.finish == "length" else "completed"


# ---- the store ------------------------------------------------------------------------------

@dataclass
class Stored:
    response: dict[str, Any]
    # the conversation up to and including this response's output (instructions are not
    # carried over, as in OpenAI's API); shares its items with the response it continues
    chain: tuple[Located, ...]
    size: int  # JSON bytes of the whole chain: a bound on what keeping it holds alive


@dataclass
class ResponseStore:
    """The last `max_responses` stored responses (least recently used goes first), within
    `max_bytes` of conversation JSON, for the life of the process."""

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
        # a call cut short by max_output_tokens has no JSON arguments: continuing the
        # conversation leaves it out rather than failing on the server's own output
        chain = (*history, *new, *((item, "/previous_response_id")
                                   for item in response["output"] if _replayable(item)))
        own = len(json.dumps([item for item, _ in new])) + len(json.dumps(response["output"]))
        entry = Stored(response, chain, own + (parent.size if parent else 0))
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


def _replayable(item: Mapping[str, Any]) -> bool:
    if item.get("type") != "function_call":
        return True
    try:
        json.loads(item.get("arguments", ""))
    except ValueError:
        return False
    return True


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"No response found with id '{response_id}'.", param="response_id",
                    code="not_found")


# ---- the routes -----------------------------------------------------------------------------

def add_responses_routes(app: FastAPI, turns: Turns) -> None:
    """Register /v1/responses on `app`."""
    store = ResponseStore()

    @app.post("/v1/responses")
    async def create_response(req: ResponsesRequest, request: Request) -> Response:
        req.refuse_unsupported()
        parent = None
        if req.previous_response_id is not None:
            parent = store.get(req.previous_response_id)
            if parent is None:
                raise APIError(400, f"Previous response with id '{req.previous_response_id}' "
                                    "not found.", param="previous_response_id",
                               code="previous_response_not_found")
        history = parent.chain if parent else ()
        if not history and not input_items(req):
            raise APIError(400, "input: give at least one input item (or a "
                                "previous_response_id)", param="input", code="invalid_request")
        chat = to_chat(req, history)
        turn = turns.prepare(turns.chat_request(chat.body, chat.where), chat.where)
        ctx = Context(req, turn, turns.backend.model_id, history)
        if req.stream:
            slot = await turns.admit(turn)
            return EventStream(_stream(turns, ctx, store, parent), slot, dialect="responses")
        result = await turns.complete(request, turn)
        output = Output()
        output.finish(result.message, result.finish)
        body = ctx.response(_status(result), output.items, result,
                            _reasoning_tokens(turns, result))
        _keep(store, ctx, body, parent)
        return JSONResponse(body)

    @app.get("/v1/responses/{response_id}")
    async def get_response(response_id: str) -> dict[str, Any]:
        entry = store.get(response_id)
        if entry is None:
            raise _not_found(response_id)
        return entry.response

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(response_id: str) -> dict[str, Any]:
        if not store.delete(response_id):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}


def _keep(store: ResponseStore, ctx: Context, body: dict[str, Any],
          parent: Stored | None) -> None:
    if ctx.req.store is not False:
        store.put(body, ctx.history, input_items(ctx.req), parent)


def _reasoning_tokens(turns: Turns, result: TurnResult) -> int:
    """The reasoning's length in tokens, counted by tokenizing its text again (the decoder
    does not split its count by part), never more than what was generated."""
    text = result.message.get("reasoning_content") or ""
    if not text:
        return 0
    return min(len(turns.backend.tokenizer.tokenize_str(text)), result.gen.completion_tokens)


async def _stream(turns: Turns, ctx: Context, store: ResponseStore, parent: Stored | None
                  ) -> AsyncGenerator[dict[str, Any], None]:
    """The documented event sequence: created, in_progress, each item's events, then
    completed / incomplete; an error once the stream has started is `response.failed`."""
    seq = itertools.count()

    def numbered(event: dict[str, Any]) -> dict[str, Any]:
        return {"type": event["type"], "sequence_number": next(seq),
                **{k: v for k, v in event.items() if k != "type"}}

    yield numbered({"type": "response.created", "response": ctx.response("in_progress")})
    yield numbered({"type": "response.in_progress", "response": ctx.response("in_progress")})
    output = Output()
    try:
        result: TurnResult | None = None
        async with aclosing(turns.stream(ctx.turn)) as items:
            async for item in items:
                if isinstance(item, TurnResult):
                    result = item
                    continue
                for event in output.feed(item):
                    yield numbered(event)
        if result is None:  # pragma: no cover - Turns.stream ends with its result or raises
            raise RuntimeError("the turn ended without a result")
        for event in output.finish(result.message, result.finish):
            yield numbered(event)
    except Exception as e:  # the 200 is sent: the error goes in the stream
        err = api_error(e)
        yield numbered({"type": "response.failed", "response": ctx.response(
            "failed", output.items, error={"code": err.code or err.type,
                                           "message": err.message})})
        return
    body = ctx.response(_status(result), output.items, result, _reasoning_tokens(turns, result))
    _keep(store, ctx, body, parent)
    yield numbered({"type": f"response.{body['status']}", "response": body})
