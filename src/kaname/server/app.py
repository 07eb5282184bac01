"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models, /health,
/metrics. Requests become one grammar each; text comes from a backend (local engines or an
upstream server) and goes back through the format's parser, streamed or not."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from ..chat import finish_turn, new_call_id_prefix, prepare_turn
from ..errors import ConstraintError, FormatParseError, KanameError, NotEnforcedError
from ..formats import ChatFormat, StreamParser, Tool, get_format, parse_partial
from ..grammar import CompiledConstraint, Constraint, JsonSchema, Lark
from .admission import Slot, token_budget
from .backend import Backend, Generated, GenParams
from .config import ServerConfig
from .errors import APIError, api_error
from .limits import BodyLimit
from .metrics import Metrics
from .protocol import ChatCompletionRequest, CompletionRequest
from .sse import EventStream


def create_app(config: ServerConfig, backend: Backend, metrics: Metrics) -> FastAPI:
    fmt = get_format(config.format)
    # the server's max_tokens limit never exceeds what the model can hold
    limit = min(config.max_tokens_limit, backend.n_ctx or config.max_tokens_limit)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await backend.aclose()

    app = FastAPI(title="kaname", version="0.1.0", lifespan=lifespan,
                  description="Structured output by construction, OpenAI-compatible.")
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    created = int(time.time())

    @app.middleware("http")
    async def auth_and_count(request: Request, call_next):  # type: ignore[no-untyped-def]
        path = request.url.path
        if config.api_key and path != "/health":
            if request.headers.get("authorization", "") != f"Bearer {config.api_key}":
                response: Response = APIError(401, "invalid or missing API key",
                                              code="invalid_api_key").response()
                metrics.requests.labels(path, "401").inc()
                return response
        try:
            response = await call_next(request)
        except Exception as e:  # answered in OpenAI's shape, logged
            response = api_error(e).response()
        metrics.requests.labels(path, str(response.status_code)).inc()
        return response

    @app.exception_handler(KanameError)
    async def on_kaname_error(_: Request, e: KanameError) -> JSONResponse:
        return api_error(e).response()

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        if request.scope.get("kaname.body_too_large"):
            return _too_large(config).response()
        errors = e.errors()
        first = errors[0] if errors else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        pointer = "/" + "/".join(loc) if loc else None
        message = f"{first.get('msg', 'invalid request')}" + (f" at {pointer}" if pointer else "")
        return APIError(400, message, param=pointer, code="invalid_request").response()

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        if request.scope.get("kaname.body_too_large"):
            return _too_large(config).response()
        status = e.status_code if e.status_code != 422 else 400
        return APIError(status, str(e.detail), code="invalid_request" if status == 400
                        else None).response()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": backend.model_id, "object": "model",
                                            "created": created, "owned_by": "kaname"}]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
        _check_common(backend, req.model, req.n)
        tools = req.tool_dicts()
        if tools and len(tools) > config.max_tools:
            raise APIError(400, f"at most {config.max_tools} tools per request",
                           param="/tools")
        strict_level = req.strict_level or config.strict_level
        guards = req.guards(backend.compiler.guards)
        prepared = prepare_turn(
            fmt, req.message_dicts(), backend.tokenizer, backend.compiler, tools=tools,
            tool_choice=req.tool_choice_name(),
            parallel_tool_calls=req.parallel_tool_calls is not False,
            response_format=req.response_format_dict(),
            reasoning=config.reasoning_for(fmt, req.reasoning_asked()),
            max_reasoning_tokens=req.max_reasoning_tokens, strict_level=strict_level,
            chat_template=config.chat_template, guards=guards)
        content_check, not_enforced = _check_content(backend, prepared.request.content)
        prompt = prepared.prompt_without_bos
        params = _params(req, _budget(backend, prompt, req.max_completion_tokens or
                                      req.max_tokens, config.default_max_tokens, limit,
                                      "messages"))
        compiled = backend.compiler.compile(Lark(prepared.grammar))
        ext = {"format": fmt.name, "strict_level": strict_level,
               "grammar_hash": compiled.grammar_hash,
               "not_enforced": not_enforced + prepared.not_enforced,
               "guards": asdict(guards)}
        call = _Call(backend, prompt, compiled, params, req.allow_unenforced,
                     prepared.request.tools, prepared.call_verdicts)
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        id_prefix = new_call_id_prefix()
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            call.slot = await backend.admit()
            return EventStream(_stream_chat(call, fmt, response_id, backend.model_id,
                                            id_prefix, include_usage, ext, metrics,
                                            content_check), call.slot)
        gen = await _run_watching(request, call)
        _count(metrics, gen)
        message, finish = _chat_message(fmt, gen, id_prefix, bool(params.stop), call.tools)
        return JSONResponse({
            "id": response_id, "object": "chat.completion", "created": int(time.time()),
            "model": backend.model_id,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": _usage(gen), "kaname": {
                **ext, "enforced": gen.enforced, "not_enforced_reason": gen.not_enforced_reason,
                "content_valid": _content_valid(content_check, message, finish),
                "tool_calls_valid": call.verdicts(message)}})

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        _check_common(backend, req.model, req.n)
        constraint = req.constraint()
        prompt = req.prompt_text()
        params = _params(req, _budget(backend, prompt, req.max_tokens, 16, limit, "prompt"))
        compiled = backend.compiler.compile(constraint, guards=req.guards(backend.compiler.guards))
        ext = {"grammar_hash": compiled.grammar_hash, "constraint": type(constraint).__name__,
               "not_enforced": [asdict(n) for n in compiled.not_enforced],
               "caps": compiled.caps}
        call = _Call(backend, prompt, compiled, params, req.allow_unenforced)
        response_id = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            call.slot = await backend.admit()
            return EventStream(_stream_completion(call, response_id, backend.model_id,
                                                  include_usage, req.return_token_ids,
                                                  metrics), call.slot)
        gen = await _run_watching(request, call)
        _count(metrics, gen)
        return JSONResponse({
            "id": response_id, "object": "text_completion", "created": int(time.time()),
            "model": backend.model_id,
            "choices": [{"index": 0, "text": gen.text, "finish_reason": gen.finish_reason,
                         "logprobs": None,
                         **({"token_ids": gen.token_ids} if req.return_token_ids else {})}],
            "usage": _usage(gen), "kaname": {**ext, "enforced": gen.enforced}})

    return app


class _Call:
    """One generation request to the backend."""

    def __init__(self, backend: Backend, prompt: str, compiled: CompiledConstraint,
                 params: GenParams, allow_unenforced: bool, tools: tuple[Tool, ...] = (),
                 verdicts: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None):
        self.backend, self.prompt, self.compiled, self.params = backend, prompt, compiled, params
        self.allow_unenforced = allow_unenforced
        self.tools = tools  # the request's, for the parser
        # the post-check of each tool call in an answer (chat only)
        self.verdicts = verdicts or (lambda message: [])
        self.slot: Slot | None = None  # taken before a stream starts, so a full queue is a 429

    async def run(self, sink: Any) -> Generated:
        gen = await self.backend.generate(self.prompt, self.compiled, self.params, sink,
                                          slot=self.slot)
        if not gen.enforced and not self.allow_unenforced:
            raise NotEnforcedError(gen.not_enforced_reason or "text outside the grammar")
        return gen


async def _run_watching(request: Request, call: _Call) -> Generated:
    """Run a non-streamed generation; stop it if the client goes away meanwhile."""
    task = asyncio.create_task(call.run(None))
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise APIError(499, "client closed the request", code="client_closed")


def _check_common(backend: Backend, model: str, n: int | None) -> None:
    if model not in (backend.model_id, "default"):
        raise APIError(404, f"The model `{model}` does not exist; this server serves "
                            f"`{backend.model_id}`.", param="model", code="model_not_found")
    if n is not None and n > 1:
        raise APIError(400, "n > 1 is not supported; send n requests", param="n",
                       code="unsupported")


def _budget(backend: Backend, prompt: str, asked: int | None, default: int, limit: int,
            param: str) -> int:
    n_ctx = backend.n_ctx
    return token_budget(backend.count_tokens(prompt) if n_ctx is not None else None, asked,
                        default=default, limit=limit, n_ctx=n_ctx, param=param)


def _params(req: ChatCompletionRequest | CompletionRequest, max_tokens: int) -> GenParams:
    # Any integer is a seed (OpenAI takes negative ones); numpy wants 0 <= seed < 2**64.
    return GenParams(max_tokens, 1.0 if req.temperature is None else req.temperature,
                     req.top_p or 1.0, None if req.seed is None else req.seed % 2**64,
                     req.stop_list())


def _too_large(config: ServerConfig) -> APIError:
    return APIError(413, f"request body exceeds {config.max_body_bytes} bytes",
                    code="body_too_large")


_SCHEMA_AT = "/response_format/json_schema/schema"


def _check_content(backend: Backend, content: Constraint
                   ) -> tuple[CompiledConstraint | None, list[dict[str, str]]]:
    """Compile a content schema alone first, so errors point into the request, and learn what
    a lenient (strict not true) schema leaves unenforced: (compiled or None, not_enforced)."""
    if not isinstance(content, JsonSchema):
        return None, []
    try:
        compiled = backend.compiler.compile(content)
    except ConstraintError as e:
        raise e.at(_SCHEMA_AT) from e
    return compiled, [{**asdict(n), "pointer": f"{_SCHEMA_AT}{n.pointer}"}
                      for n in compiled.not_enforced]


def _content_valid(content_check: CompiledConstraint | None, message: dict[str, Any],
                   finish: str) -> bool | None:
    """The jsonschema post-check of JSON content (the whole schema, also what a lenient grammar
    skipped); None when there is no schema or no content."""
    if content_check is None or message.get("content") is None:
        return None
    return finish == "stop" and bool(content_check.validate(message["content"]))


def _chat_message(fmt: ChatFormat, gen: Generated, id_prefix: str, stopped_by_string: bool,
                  tools: tuple[Tool, ...]) -> tuple[dict[str, Any], str]:
    if not gen.enforced:  # raw upstream text, allowed by the caller and marked as such
        return {"role": "assistant", "content": gen.text}, gen.finish_reason
    try:
        turn, finish = finish_turn(fmt, gen.text, gen.finish_reason, id_prefix=id_prefix,
                                   tools=tools)
    except FormatParseError:
        if not stopped_by_string:
            raise
        turn, finish = parse_partial(fmt, gen.text, id_prefix=id_prefix, tools=tools), "stop"
    return turn.to_message(), finish


def _usage(gen: Generated) -> dict[str, int]:
    return {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
            "total_tokens": gen.prompt_tokens + gen.completion_tokens}


def _count(metrics: Metrics, gen: Generated) -> None:
    metrics.tokens.labels("prompt").inc(gen.prompt_tokens)
    metrics.tokens.labels("completion").inc(gen.completion_tokens)


async def _generate_streamed(call: _Call
                             ) -> AsyncGenerator[tuple[str, list[int]] | Generated, None]:
    """(text, token ids) pieces as they come, then the Generated result; the generation's
    error on failure."""
    queue: asyncio.Queue[tuple[str, list[int]] | None] = asyncio.Queue()
    task = asyncio.create_task(call.run(lambda text, ids: queue.put_nowait((text, ids))))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (piece := await queue.get()) is not None:
            yield piece
        yield task.result()
    finally:
        if not task.done():  # the client went away: stop the generation
            task.cancel()


async def _stream_chat(call: _Call, fmt: ChatFormat, response_id: str, model: str,
                       id_prefix: str, include_usage: bool, ext: dict[str, Any],
                       metrics: Metrics, content_check: CompiledConstraint | None
                       ) -> AsyncGenerator[dict[str, Any], None]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None,
              **extra: Any) -> dict[str, Any]:
        return {"id": response_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish, "logprobs": None}],
                **extra}

    parser = StreamParser(fmt, id_prefix=id_prefix, tools=call.tools)
    yield chunk({"role": "assistant", "content": ""})
    gen: Generated | None = None
    async with aclosing(_generate_streamed(call)) as items:
        async for item in items:
            if isinstance(item, Generated):
                gen = item
                break
            for delta in parser.feed(item[0]):
                yield chunk(delta)
    if gen is None:  # pragma: no cover - _generate_streamed ends with the result or raises
        raise RuntimeError("generation ended without a result")
    _count(metrics, gen)
    valid: bool | None = None
    message: dict[str, Any] = {}
    if not gen.enforced:
        finish = gen.finish_reason
        rest = gen.text[len(parser.text):]
        if rest:
            yield chunk({"content": rest})
    elif gen.finish_reason == "stop":
        try:
            turn, deltas = parser.finish()
        except FormatParseError:
            if not call.params.stop:
                raise
            turn, deltas = parse_partial(fmt, parser.text, id_prefix=id_prefix,
                                         tools=call.tools), []
        for delta in deltas:
            yield chunk(delta)
        finish = "tool_calls" if turn.tool_calls else "stop"
        message = turn.to_message()
        valid = _content_valid(content_check, message, finish)
    else:
        finish = "length"
        message = parse_partial(fmt, parser.text, id_prefix=id_prefix,
                                tools=call.tools).to_message()
        valid = _content_valid(content_check, message, finish)  # as the non-streamed answer
    yield chunk({}, finish, kaname={**ext, "enforced": gen.enforced,
                                    "not_enforced_reason": gen.not_enforced_reason,
                                    "content_valid": valid,
                                    "tool_calls_valid": call.verdicts(message)})
    if include_usage:
        yield {"id": response_id, "object": "chat.completion.chunk", "created": created,
               "model": model, "choices": [], "usage": _usage(gen)}


async def _stream_completion(call: _Call, response_id: str, model: str, include_usage: bool,
                             token_ids: bool, metrics: Metrics
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
    async with aclosing(_generate_streamed(call)) as items:
        async for item in items:
            if isinstance(item, Generated):
                _count(metrics, item)
                if not item.enforced:
                    yield chunk(item.text[sent:])
                yield chunk("", item.finish_reason)
                if include_usage:
                    yield {"id": response_id, "object": "text_completion",
                           "created": created, "model": model, "choices": [],
                           "usage": _usage(item)}
                return
            sent += len(item[0])
            yield chunk(item[0], ids=item[1])
