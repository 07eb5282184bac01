"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models, /health,
/metrics. Requests become one grammar each; text comes from a backend (local engines or an
upstream server) and goes back through the format's parser, streamed or not."""

from __future__ import annotations

import hmac
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from ..chat import TurnResult
from ..decoding import Generation
from ..edges import chat as chat_edge
from ..edges.chat import ChatCompletion, ChatCompletionRequest, ChatReply
from ..edges.common import error_pointer
from ..edges.completions import Completion, CompletionRequest
from ..errors import ConstraintError, KanameError
from .access_log import AccessLog
from .backend import Backend
from .bodies import read_body
from .calls import Call, budget, count, gen_params, generate_streamed, run_watching, usage
from .config import ServerConfig
from .errors import APIError, api_error, shape_of
from .lifecycle import Deadline, Lifecycle
from .limits import BODY_REFUSED, BodyLimit
from .messages_api import add_messages_routes
from .metrics import Metrics
from .openapi import Health, ModelList, install, route_doc
from .responses_api import add_responses_routes
from .sse import EventStream
from .turn import Turn, Turns

UNMATCHED = "unmatched"  # the endpoint label of every path no route serves
# answered without the API key: they say only that the server is up (Claude Code probes
# HEAD /api/hello at start, without its key)
_OPEN_PATHS = frozenset({"/health", "/api/hello"})


def create_app(config: ServerConfig, backend: Backend, metrics: Metrics) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        turns.workers.shutdown()
        await backend.aclose()

    app = FastAPI(title="kaname", version="0.1.0", lifespan=lifespan,
                  description="Structured output by construction, OpenAI-compatible.")
    lifecycle = app.state.lifecycle = Lifecycle(config.request_timeout)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes,
                       read_timeout=config.read_timeout)
    created = int(time.time())

    @app.middleware("http")
    async def auth_and_count(request: Request, call_next):  # type: ignore[no-untyped-def]
        lifecycle.arrived(request.scope)
        path = request.url.path
        endpoint = endpoint_label(app.router.routes, request.scope)
        if config.api_key and path not in _OPEN_PATHS \
                and not _authorized(request, config.api_key):
            response: Response = APIError(401, "invalid or missing API key",
                                          code="invalid_api_key").response(shape_of(path))
            metrics.requests.labels(endpoint, "401").inc()
            return response
        try:
            response = await call_next(request)
        except Exception as e:  # answered in the API's shape, logged
            response = api_error(e).response(shape_of(path))
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    @app.exception_handler(KanameError)
    async def on_kaname_error(request: Request, e: KanameError) -> JSONResponse:
        return api_error(e).response(shape_of(request.url.path))

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        shape = shape_of(request.url.path)
        if (refused := request.scope.get(BODY_REFUSED)) is not None:  # limits.py's 408, 413
            return refused.response(shape)
        errors = e.errors()
        first = errors[0] if errors else {}
        loc = list(first.get("loc", ()))
        pointer = error_pointer({**first, "loc": loc[1:] if loc[:1] == ["body"] else loc},
                                e.body)
        message = str(first.get("msg", "invalid request"))
        if pointer and pointer not in message:
            message += f" at {pointer}"
        return APIError(400, message, param=pointer, code="invalid_request").response(shape)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        shape = shape_of(request.url.path)
        if (refused := request.scope.get(BODY_REFUSED)) is not None:  # limits.py's 408, 413
            return refused.response(shape)
        status = e.status_code if e.status_code != 422 else 400
        return APIError(status, str(e.detail), code="invalid_request" if status == 400
                        else None, headers=e.headers).response(shape)  # a 405's Allow

    @app.get("/health", **route_doc(Health, "health"))
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.api_route("/api/hello", methods=["GET", "HEAD"], include_in_schema=False)
    async def hello() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", **route_doc(ModelList, "server"))
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": backend.model_id, "object": "model",
                                            "created": created, "owned_by": "kaname"}]}

    @app.get("/metrics", response_class=PlainTextResponse,
             **route_doc(None, "server", summary="Prometheus metrics (text format 0.0.4)"))
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    turns = Turns(config, backend, metrics, lifecycle)
    add_responses_routes(app, turns)
    add_messages_routes(app, turns)

    @app.post("/v1/chat/completions", **route_doc(ChatCompletion, "turn", stream="chat",
                                                  request=ChatCompletionRequest,
                                                  examples="chat"))
    async def chat_completions(request: Request) -> Response:
        req = await read_body(request, ChatCompletionRequest, turns)
        turn = await turns.prepare(chat_edge.to_turn(req), deadline=turns.deadline(request))
        reply = ChatReply(turn.response_id, backend.model_id, turn.created)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            slot = await turns.admit(turn)
            return EventStream(_stream_chat(turns, turn, reply, include_usage), slot)
        return JSONResponse(reply.body(await turns.complete(request, turn)))

    @app.post("/v1/completions", **route_doc(Completion, "completion", stream="completion",
                                             request=CompletionRequest, examples="completion"))
    async def completions(request: Request) -> Response:
        req = await read_body(request, CompletionRequest, turns)
        turns.check_model(req.model)
        req.refuse()
        deadline = turns.deadline(request)
        call, ext, at = await turns.off_loop(
            deadline, lambda: _prepare_completion(turns, req, deadline))
        response_id = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            slot = await call.admit()
            return EventStream(_stream_completion(call, response_id, backend.model_id,
                                                  include_usage, req.return_token_ids,
                                                  metrics, at), slot)
        try:
            gen = await run_watching(request, call)
        except ConstraintError as e:  # a parser limit hit while decoding
            raise e.at(at) from e
        count(metrics, gen)
        return JSONResponse({
            "id": response_id, "object": "text_completion", "created": int(time.time()),
            "model": backend.model_id,
            "choices": [{"index": 0, "text": gen.text, "finish_reason": gen.finish_reason,
                         "logprobs": None,
                         **({"token_ids": gen.tokens} if req.return_token_ids else {})}],
            "usage": usage(gen),
            "kaname": {**ext, "enforced": gen.outside_grammar is None}})

    install(app)
    app.add_middleware(AccessLog)  # added last: outermost, it sees every answer and its end
    return app


def endpoint_label(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The route template a request is counted under (`/v1/responses/{response_id}`), or
    "unmatched": a label per raw path would let any client grow /metrics without bound."""
    partial = UNMATCHED  # a path served with another method (a 405), as the router reads it
    for route in routes:
        if not isinstance(route, Route):
            continue
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return route.path
        if match == Match.PARTIAL and partial == UNMATCHED:
            partial = route.path
    return partial


def _prepare_completion(turns: Turns, req: CompletionRequest, deadline: Deadline
                        ) -> tuple[Call, dict[str, Any], str]:
    """The completion's call (prompt counted, constraint compiled: run off the event loop),
    what its `kaname` field reports, and where its constraint was in the body."""
    backend = turns.backend
    constraint, at = req.constraint()
    prompt = req.prompt_text()
    params = gen_params(budget(backend, backend.count_tokens(prompt), req.max_tokens, 16,
                               turns.limit, "/prompt"),
                        req.to_sampling(),
                        turns.config.draft and (req.kaname is None or req.kaname.draft))
    guards = backend.compiler.guards
    if req.kaname is not None and req.kaname.guards is not None:
        guards = req.kaname.guards.over(guards)
    try:
        compiled = backend.compiler.compile(constraint, guards=guards)
    except ConstraintError as e:  # its pointer is into the constraint: moved under `at`
        raise e.at(at) from e
    ext = {"grammar_hash": compiled.grammar_hash, "constraint": type(constraint).__name__,
           "not_enforced": [asdict(n) for n in compiled.not_enforced],
           "caps": compiled.caps,
           "budget": {"asked": req.max_tokens, "served": params.max_tokens}}
    return Call(backend, prompt, compiled, params, req.allow_unenforced, deadline), ext, at


def _authorized(request: Request, key: str) -> bool:
    """OpenAI's bearer token (the scheme in any case, RFC 9110), or Anthropic's x-api-key
    header; compared in constant time."""
    expected = key.encode()
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip(" ").encode("latin-1"), expected)
    return bearer or hmac.compare_digest(
        request.headers.get("x-api-key", "").encode("latin-1"), expected)


async def _stream_chat(turns: Turns, turn: Turn, reply: ChatReply, include_usage: bool
                       ) -> AsyncGenerator[dict[str, Any], None]:
    yield reply.chunk({"role": "assistant", "content": ""})
    async with aclosing(turns.stream(turn)) as items:
        async for item in items:
            if isinstance(item, TurnResult):
                for chunk in reply.last(item, include_usage):
                    yield chunk
            else:
                yield reply.delta(item)


async def _stream_completion(call: Call, response_id: str, model: str, include_usage: bool,
                             token_ids: bool, metrics: Metrics, at: str
                             ) -> AsyncGenerator[dict[str, Any], None]:
    created = int(time.time())

    def chunk(text: str, finish: str | None = None, ids: list[int] | None = None
              ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish,
                                  "logprobs": None}
        if token_ids:
            choice["token_ids"] = ids or []
        return {"id": response_id, "object": "text_completion", "created": created,
                "model": model, "choices": [choice]}

    sent = 0
    async with aclosing(generate_streamed(call)) as items:
        try:
            async for item in items:
                if isinstance(item, Generation):
                    count(metrics, item)
                    if item.outside_grammar is not None:
                        yield chunk(item.text[sent:])
                    yield chunk("", item.finish_reason)
                    if include_usage:
                        yield {"id": response_id, "object": "text_completion",
                               "created": created, "model": model, "choices": [],
                               "usage": usage(item)}
                    return
                sent += len(item[0])
                yield chunk(item[0], ids=item[1])
        except ConstraintError as e:  # a parser limit hit while decoding
            raise e.at(at) from e
