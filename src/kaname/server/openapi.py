"""What `/openapi.json` says the server answers, in one place: the error shapes, the statuses
each route can answer (`STATUSES`), the streams (`text/event-stream`, each event's `data` a
JSON document of the documented shape) and `/metrics`' text. The routes take their
documentation from `route_doc`; `install` gives the app its document.

The success bodies are the edges' (`kaname.edges.<api>`). tests/test_openapi_conformance.py
runs schemathesis against a live server: every answer must have a documented status, content
type and shape.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..edges import chat, completions, messages, responses
from ..edges.common import Wire
from .errors import Shape

# ---- the error shapes (server/errors.py renders them) ---------------------------------------


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None  # a JSON pointer into the request, where one field is at fault
    code: str | None


class OpenAIError(BaseModel):
    """An error of the OpenAI-shaped routes (chat, completions, Responses, models...)."""

    error: OpenAIErrorDetail


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    """An error of Anthropic's Messages routes (no `param`: the message names the field)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


ERROR_MODELS: dict[Shape, type[BaseModel]] = {"openai": OpenAIError,
                                              "anthropic": AnthropicError,
                                              "responses": OpenAIError}

# ---- the server's own bodies ----------------------------------------------------------------


class Health(Wire):
    status: Literal["ok"]


class ModelCard(Wire):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(Wire):
    object: Literal["list"]
    data: list[ModelCard]


# ---- the statuses each route answers --------------------------------------------------------

WHY = {
    400: "The request is malformed, or asks for what cannot be enforced (the error names "
         "the field: `param`, a JSON pointer, in the OpenAI shape)",
    401: "Missing or wrong API key (a server started with --api-key)",
    404: "Unknown model (or stored response)",
    413: "The request body exceeds the server's limit",
    422: "The model's turn does not follow its chat format (only with strict_level off)",
    429: "The queue is full; retry after Retry-After seconds",
    500: "The model failed (never for anything the client sent)",
    502: "The upstream server did not enforce the grammar (proxy mode)",
    503: "The server is shutting down or overloaded; retry after Retry-After seconds",
    504: "The request outlived --request-timeout",
}

# Every route but /health checks the API key, and every body is bounded, before the route runs
ANY = (401, 413)
# A generation: its request can be refused, the model unknown, the queue full, time run out
GENERATION = (*ANY, 400, 404, 429, 500, 502, 503, 504)
STATUSES: dict[str, tuple[int, ...]] = {
    "turn": (*GENERATION, 422),  # chat, Responses, Messages: the answer is parsed
    "completion": GENERATION,  # raw text: nothing to parse
    # prepares the turn, under its deadline (504), not once the server drains (503)
    "count_tokens": (*ANY, 400, 404, 503, 504),
    "stored_response": (*ANY, 404),
    "server": ANY,  # /v1/models, /metrics
    "health": (413,),
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying",
                                "schema": {"type": "integer"}}}


# ---- streams --------------------------------------------------------------------------------

def _ref(model: Any) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _any_of(*models: Any) -> dict[str, Any]:
    return {"anyOf": [_ref(m) for m in models]}


def _event(data: dict[str, Any], *, done: bool = False, named: bool = False
           ) -> dict[str, Any]:
    """An SSE event's schema (OpenAPI 3.2's `itemSchema`, as FastAPI writes it): its `data`
    a JSON document of shape `data`; `done`: OpenAI's closing `[DONE]`; `named`: the event's
    name is the data's `type`."""
    payload = {"type": "string", "contentMediaType": "application/json",
               "contentSchema": data}
    if done:
        payload = {"type": "string", "if": {"const": "[DONE]"}, "else": payload}
    schema: dict[str, Any] = {"type": "object", "required": ["data"],
                              "properties": {"data": payload, "event": {"type": "string"},
                                             "id": {"type": "string"},
                                             "retry": {"type": "integer", "minimum": 0}}}
    if named:
        schema["required"] = ["data", "event"]
    return schema


# What each streaming route sends once its 200 is out (an error too: it can only travel in the
# stream then), and the models the events use
STREAMS: dict[str, tuple[dict[str, Any], str]] = {
    "chat": (_event(_any_of(chat.ChatCompletionChunk, OpenAIError), done=True),
             "`data:` chunks, then `data: [DONE]`; an error after the 200 is one chunk in the "
             "error shape before [DONE]"),
    "completion": (_event(_any_of(completions.CompletionChunk, OpenAIError), done=True),
                   "`data:` chunks, then `data: [DONE]`; an error after the 200 is one chunk "
                   "in the error shape before [DONE]"),
    "responses": (_event({"anyOf": [_ref(m) for m in get_args(responses.StreamEvent)]},
                         named=True),
                  "events named by their `type`: response.created, response.in_progress, "
                  "each output item's events, then response.completed / incomplete / failed"),
    "messages": (_event({"anyOf": [*(_ref(m) for m in get_args(messages.StreamEvent)),
                                   _ref(AnthropicError)]}, named=True),
                 "events named by their `type`: message_start, ping, each content block's "
                 "start / deltas / stop, message_delta, message_stop; an error after the "
                 "200 is an `error` event"),
}
# (the error shapes are added with them: routes refer to them by name)
EVENT_MODELS: tuple[type[BaseModel], ...] = (
    chat.ChatCompletionChunk, completions.CompletionChunk, OpenAIError, AnthropicError,
    *get_args(responses.StreamEvent), *get_args(messages.StreamEvent))
# The request bodies: the routes read them themselves (bodies.py), so FastAPI does not see
# them; `route_doc(request=...)` refers to them, and `install` adds them (as validated)
REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    chat.ChatCompletionRequest, completions.CompletionRequest, responses.ResponsesRequest,
    messages.MessagesRequest, messages.CountTokensRequest)


# ---- request examples (schemathesis sends them first; they reach every stream) -------------

_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
         "additionalProperties": False}
_ASK = "What is the weather in Paris?"
EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "chat": {
        "text": {"model": "default", "max_tokens": 8,
                 "messages": [{"role": "user", "content": "Say hello."}]},
        "json_schema_stream": {
            "model": "default", "max_tokens": 16, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Name a city as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "city", "schema": _CITY, "strict": True}}},
        "tools_stream": {
            "model": "default", "max_tokens": 24, "stream": True, "tool_choice": "required",
            "messages": [{"role": "user", "content": _ASK}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                                                        "parameters": _CITY}}]},
    },
    "completion": {
        "text": {"model": "default", "prompt": "The capital of France is", "max_tokens": 8},
        "choice_stream": {"model": "default", "prompt": "Yes or no?", "stream": True,
                          "stream_options": {"include_usage": True},
                          "return_token_ids": True,
                          "structured_outputs": {"choice": ["yes", "no"]}},
    },
    "responses": {
        "text": {"model": "default", "input": "Say hello.", "max_output_tokens": 8},
        "tools_stream": {
            "model": "default", "max_output_tokens": 24, "stream": True,
            "tool_choice": "required",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": _ASK}]}],
            "tools": [{"type": "function", "name": "get_weather", "parameters": _CITY}]},
        "json_schema_stream": {
            "model": "default", "max_output_tokens": 16, "stream": True,
            "input": "Name a city as JSON.",
            "text": {"format": {"type": "json_schema", "name": "city", "schema": _CITY,
                                "strict": True}}},
    },
    "messages": {
        "text": {"model": "default", "max_tokens": 8,
                 "messages": [{"role": "user", "content": "Say hello."}]},
        "tools_stream": {
            "model": "default", "max_tokens": 24, "stream": True,
            "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": [{"type": "text", "text": _ASK}]}],
            "tools": [{"name": "get_weather", "input_schema": _CITY}]},
        "json_schema_stream": {
            "model": "default", "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": "Name a city as JSON."}],
            "output_config": {"format": {"type": "json_schema", "schema": _CITY}}},
    },
    "count_tokens": {
        "text": {"model": "default", "messages": [{"role": "user", "content": "Say hello."}]},
    },
}


# ---- a route's documentation ----------------------------------------------------------------

# Where an answer leads (OpenAPI links: clients and schemathesis' stateful phase follow them):
# a stored response is read and deleted by the id the answer gave
_BY_ID = {"response_id": "$response.body#/id"}
LINKS: dict[str, dict[str, Any]] = {
    "created_response": {
        "GetResponse": {"operationId": "get_response", "parameters": _BY_ID},
        "DeleteResponse": {"operationId": "delete_response", "parameters": _BY_ID}},
    "stored_response": {
        "DeleteResponse": {"operationId": "delete_response", "parameters": _BY_ID}},
}


def route_doc(body: Any | None, statuses: str, *, shape: Shape = "openai",
              request: type[BaseModel] | None = None, stream: str | None = None,
              examples: str | None = None, links: str | None = None,
              operation_id: str | None = None, summary: str | None = None) -> dict[str, Any]:
    """Keyword arguments for a route decorator: its request body (`request`, one of
    `REQUEST_MODELS`, JSON, with its `EXAMPLES`), its 200 (`body`, JSON, and with `stream`
    its event stream; `LINKS` to where it leads), every error status it can answer, in
    `shape`."""
    ok: dict[str, Any] = {"description": "Success"}
    if body is not None:
        ok["model"] = body
    if links is not None:
        ok["links"] = LINKS[links]
    if stream is not None:
        item, what = STREAMS[stream]
        ok["description"] = f"Success. With `stream: true`, server-sent events: {what}."
        ok["content"] = {"text/event-stream": {"itemSchema": item}}
    answers: dict[int | str, dict[str, Any]] = {200: ok}
    for status in sorted(STATUSES[statuses]):
        # JSON whatever the route's own media type (/metrics' 401 is JSON too)
        answers[status] = {"description": WHY[status], "content": {
            "application/json": {"schema": _ref(ERROR_MODELS[shape])}}}
        if status in (429, 503):
            answers[status]["headers"] = _RETRY_AFTER
    doc: dict[str, Any] = {"responses": answers, "response_model": None}
    if request is not None:
        if request not in REQUEST_MODELS:  # else its schema would be missing from components
            raise ValueError(f"{request.__name__} is not in REQUEST_MODELS")
        json_body: dict[str, Any] = {"schema": _ref(request)}
        if examples is not None:
            json_body["examples"] = {name: {"value": value}
                                     for name, value in EXAMPLES[examples].items()}
        doc["openapi_extra"] = {"requestBody": {"content": {"application/json": json_body},
                                                "required": True}}
    if summary is not None:
        doc["summary"] = summary
    if operation_id is not None:
        doc["operation_id"] = operation_id
    return doc


def install(app: FastAPI) -> None:
    """Make `app.openapi()` the server's document: the routes' own, the request bodies' and
    the streams' event models added, and no FastAPI 422 where the route cannot answer one
    (validation errors are 400s here, in the API's shape)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description,
                          routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for operation in (op for item in doc["paths"].values() for op in item.values()):
            answer = operation.get("responses", {}).get("422", {})
            if "HTTPValidationError" in str(answer.get("content")):
                del operation["responses"]["422"]
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        _, defs = models_json_schema([(m, "validation") for m in REQUEST_MODELS],
                                     ref_template="#/components/schemas/{model}")
        for name, schema in defs.get("$defs", {}).items():
            # as get_openapi writes what it generates itself (through its Schema model: no
            # null defaults, float bounds), the document FastAPI wrote for body parameters
            schemas.setdefault(name, jsonable_encoder(Schema(**schema), by_alias=True,
                                                      exclude_none=True))
        _, defs = models_json_schema([(m, "serialization") for m in EVENT_MODELS],
                                     ref_template="#/components/schemas/{model}")
        for name, schema in defs.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        app.openapi_schema = doc
        return doc

    app.openapi = document  # type: ignore[method-assign]
