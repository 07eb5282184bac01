"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models, /health,
/metrics. Requests become one grammar each; text comes from a backend (local engines or an
upstream server) and goes back through the format's parser, streamed or not."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import asdict
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..chat import finish_turn, new_call_id_prefix, prepare_turn
from ..errors import ConstraintError, GrammarTooComplexError, KanameError
from ..formats import (
    ChatFormat,
    FormatParseError,
    StreamParser,
    Tool,
    get_format,
    parse_partial,
)
from ..grammar import JsonSchema, Lark, to_constraint
from .backends import Generated, GenParams, LocalBackend, Slot, UpstreamBackend
from .config import ServerConfig
from .errors import APIError, from_constraint_error
from .limits import BodyLimit
from .metrics import Metrics
from .protocol import ChatCompletionRequest, CompletionRequest
from .upstream_grammar import lark_for

log = logging.getLogger("kaname.server")
Backend = LocalBackend | UpstreamBackend


def create_app(config: ServerConfig, backend: Backend, metrics: Metrics) -> FastAPI:
    fmt = get_format(config.format)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if isinstance(backend, UpstreamBackend):
            await backend.aclose()
        else:
            backend.close()

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
        except Exception:  # answered in OpenAI's shape, logged
            log.exception("unhandled error on %s", path)
            response = APIError(500, "internal error (logged on the server)",
                                type="server_error").response()
        metrics.requests.labels(path, str(response.status_code)).inc()
        return response

    @app.exception_handler(APIError)
    async def on_api_error(_: Request, e: APIError) -> JSONResponse:
        return e.response()

    @app.exception_handler(ConstraintError)
    async def on_constraint_error(_: Request, e: ConstraintError) -> JSONResponse:
        return from_constraint_error(e).response()

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
        _check_common(config, backend, req.model, req.n)
        max_tokens = _max_tokens(config, req.max_completion_tokens or req.max_tokens)
        tools = req.tool_dicts()
        if tools and len(tools) > config.max_tools:
            raise APIError(400, f"at most {config.max_tools} tools per request",
                           param="/tools")
        rf = req.response_format_dict()
        strict_level = req.strict_level or config.strict_level
        content_check, not_enforced = _check_content_schema(backend, rf)
        prepared = prepare_turn(
            fmt, req.message_dicts(), backend.tokenizer, backend.compiler, tools=tools,
            tool_choice=req.tool_choice_name(),
            parallel_tool_calls=req.parallel_tool_calls is not False, response_format=rf,
            reasoning=req.reasoning_mode() if fmt.reasoning else "off",
            max_reasoning_tokens=req.max_reasoning_tokens, strict_level=strict_level,
            chat_template=config.chat_template)
        compiled = _compile(backend, Lark(prepared.grammar))
        params = GenParams(max_tokens, _temperature(req.temperature), req.top_p or 1.0,
                           _seed(req.seed), req.stop_list())
        ext = {"format": fmt.name, "strict_level": strict_level,
               "grammar_hash": compiled.grammar_hash, "not_enforced": not_enforced,
               "guards": asdict(backend.compiler.guards)}
        call = _Call(backend, prepared.prompt_without_bos, compiled, params, prepared.grammar,
                     req.allow_unenforced, fmt.end_of_turn, prepared.request.tools)
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        id_prefix = new_call_id_prefix()
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            call.slot = await backend.admit()
            return _sse(_stream_chat(call, fmt, response_id, backend.model_id, id_prefix,
                                     include_usage, ext, metrics, content_check), call)
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
                "content_valid": _content_valid(content_check, message, finish)}})

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        _check_common(config, backend, req.model, req.n)
        max_tokens = _max_tokens(config, req.max_tokens, default=16)
        constraint = to_constraint(_completion_constraint(req))
        compiled = _compile(backend, constraint)
        lark = lark_for(constraint, backend.compiler.guards) \
            if isinstance(backend, UpstreamBackend) else None
        params = GenParams(max_tokens, _temperature(req.temperature), req.top_p or 1.0,
                           _seed(req.seed), req.stop_list())
        ext = {"grammar_hash": compiled.grammar_hash, "constraint": type(constraint).__name__,
               "not_enforced": [asdict(n) for n in compiled.not_enforced],
               "caps": compiled.caps}
        call = _Call(backend, req.prompt_text(), compiled, params, lark, req.allow_unenforced,
                     "")
        response_id = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            call.slot = await backend.admit()
            return _sse(_stream_completion(call, response_id, backend.model_id, include_usage,
                                           metrics), call)
        gen = await _run_watching(request, call)
        _count(metrics, gen)
        return JSONResponse({
            "id": response_id, "object": "text_completion", "created": int(time.time()),
            "model": backend.model_id,
            "choices": [{"index": 0, "text": gen.text, "finish_reason": gen.finish_reason,
                         "logprobs": None}],
            "usage": _usage(gen), "kaname": {**ext, "enforced": gen.enforced}})

    return app


class _Call:
    """One generation request to the backend, with errors mapped to API errors."""

    def __init__(self, backend: Backend, prompt: str, compiled: Any, params: GenParams,
                 lark: str | None, allow_unenforced: bool, end_marker: str,
                 tools: tuple[Tool, ...] = ()):
        self.backend, self.prompt, self.compiled, self.params = backend, prompt, compiled, params
        self.lark, self.allow_unenforced, self.end_marker = lark, allow_unenforced, end_marker
        self.tools = tools  # the request's, for the parser
        self.slot: Slot | None = None  # taken before a stream starts, so a full queue is a 429

    async def run(self, sink: Any) -> Generated:
        try:
            return await self.backend.generate(
                self.prompt, self.compiled, self.params, sink, lark=self.lark,
                allow_unenforced=self.allow_unenforced, end_marker=self.end_marker,
                slot=self.slot)
        except GrammarTooComplexError as e:  # a parser limit hit while decoding
            raise from_constraint_error(e) from e
        except KanameError as e:
            log.exception("generation failed")
            raise APIError(500, f"generation failed: {e}", type="server_error") from e


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


def _check_common(config: ServerConfig, backend: Backend, model: str, n: int | None) -> None:
    if model not in (backend.model_id, "default"):
        raise APIError(404, f"The model `{model}` does not exist; this server serves "
                            f"`{backend.model_id}`.", param="model", code="model_not_found")
    if n is not None and n > 1:
        raise APIError(400, "n > 1 is not supported; send n requests", param="n",
                       code="unsupported")


def _max_tokens(config: ServerConfig, asked: int | None, *, default: int | None = None) -> int:
    value = asked or default or config.default_max_tokens
    if value > config.max_tokens_limit:
        raise APIError(400, f"max_tokens {value} exceeds this server's limit "
                            f"{config.max_tokens_limit}", param="max_tokens")
    return value


def _temperature(t: float | None) -> float:
    return 1.0 if t is None else t


def _seed(seed: int | None) -> int | None:
    """Any integer is a seed (OpenAI takes negative ones); numpy wants 0 <= seed < 2**64."""
    return None if seed is None else seed % 2**64


def _too_large(config: ServerConfig) -> APIError:
    return APIError(413, f"request body exceeds {config.max_body_bytes} bytes",
                    code="body_too_large")


def _compile(backend: Backend, constraint: Any) -> Any:
    try:
        return backend.compiler.compile(constraint)
    except ConstraintError as e:
        raise from_constraint_error(e) from e


def _check_content_schema(backend: Backend, rf: dict[str, Any] | None
                          ) -> tuple[Any, list[dict[str, str]]]:
    """Compile the content schema alone first, so errors point into the request, and learn what
    a lenient (strict not true) schema leaves unenforced: (compiled or None, not_enforced)."""
    if not rf or rf.get("type") != "json_schema":
        return None, []
    spec = rf["json_schema"]
    try:
        compiled = backend.compiler.compile(JsonSchema(spec["schema"],
                                                       strict=spec.get("strict") is True))
    except ConstraintError as e:
        raise from_constraint_error(e, prefix="/response_format/json_schema/schema") from e
    return compiled, [{**asdict(n), "pointer": f"/response_format/json_schema/schema{n.pointer}"}
                      for n in compiled.not_enforced]


def _content_valid(content_check: Any, message: dict[str, Any], finish: str) -> bool | None:
    """The jsonschema post-check of JSON content (the whole schema, also what a lenient grammar
    skipped); None when there is no schema or no content."""
    if content_check is None or message.get("content") is None:
        return None
    return finish == "stop" and bool(content_check.validate(message["content"]))


def _completion_constraint(req: CompletionRequest) -> Any:
    so = req.structured_outputs
    given: list[tuple[str, Any]] = []
    if req.response_format is not None:
        rf = req.response_format
        given.append(("response_format", rf.model_dump(by_alias=True, exclude_none=True)
                      if hasattr(rf, "model_dump") else rf))
    if so is not None:
        if so.json_ is not None:
            given.append(("structured_outputs.json", so.json_))
        if so.regex is not None:
            given.append(("structured_outputs.regex", {"type": "regex", "regex": so.regex}))
        if so.choice is not None:
            given.append(("structured_outputs.choice", {"type": "choice", "choice": so.choice}))
        if so.grammar is not None:
            given.append(("structured_outputs.grammar", {"type": "grammar",
                                                         "grammar": so.grammar}))
        if so.json_object:
            given.append(("structured_outputs.json_object", {"type": "json_object"}))
    for name, kind in (("guided_json", None), ("guided_regex", "regex"),
                       ("guided_choice", "choice"), ("guided_grammar", "grammar"),
                       ("ebnf", "grammar")):
        value = getattr(req, name)
        if value is not None:
            given.append((name, value if kind is None else {"type": kind, kind: value}))
    if len(given) > 1:
        raise APIError(400, "give one constraint: " + ", ".join(n for n, _ in given),
                       param=given[1][0])
    if not given:
        return None
    name, value = given[0]
    if name == "response_format" and isinstance(value, dict) and "json_schema" in value:
        spec = value["json_schema"]
        value = {"type": "json_schema", "json_schema": {**spec, "strict": spec.get("strict")
                                                        is not False}}
    try:
        return to_constraint(value)
    except ConstraintError as e:
        raise from_constraint_error(e, prefix="/" + name.replace(".", "/")) from e


def _chat_message(fmt: ChatFormat, gen: Generated, id_prefix: str, stopped_by_string: bool,
                  tools: tuple[Tool, ...]) -> tuple[dict[str, Any], str]:
    if not gen.enforced:  # raw upstream text, allowed by the caller and marked as such
        return {"role": "assistant", "content": gen.text}, gen.finish_reason
    try:
        turn, finish = finish_turn(fmt, gen.text, gen.finish_reason, id_prefix=id_prefix,
                                   tools=tools)
    except FormatParseError as e:
        if not stopped_by_string:
            raise APIError(422, f"the model's turn does not follow the {fmt.name} format "
                                f"(strict_level off): {e}", code="format_parse_error") from e
        turn, finish = parse_partial(fmt, gen.text, id_prefix=id_prefix, tools=tools), "stop"
    return turn.to_message(), finish


def _usage(gen: Generated) -> dict[str, int]:
    return {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
            "total_tokens": gen.prompt_tokens + gen.completion_tokens}


def _count(metrics: Metrics, gen: Generated) -> None:
    metrics.tokens.labels("prompt").inc(gen.prompt_tokens)
    metrics.tokens.labels("completion").inc(gen.completion_tokens)


class _EventStream(StreamingResponse):
    """SSE that always closes its event generator (so a generation whose client went away is
    cancelled even when the response was cut while sending) and frees a slot the generation
    never took."""

    def __init__(self, events: AsyncIterator[str], call: _Call):
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self._events = events
        self._call = call

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._events.aclose()  # type: ignore[attr-defined]
            slot = self._call.slot
            if slot is not None and not slot.taken:
                slot.release()


def _sse(events: AsyncIterator[str], call: _Call) -> StreamingResponse:
    return _EventStream(events, call)


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _generate_streamed(call: _Call) -> AsyncIterator[str | Generated]:
    """Text pieces as they come, then the Generated result; APIError on failure."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    task = asyncio.create_task(call.run(queue.put_nowait))
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
                       metrics: Metrics, content_check: Any) -> AsyncIterator[str]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return _event({"id": response_id, "object": "chat.completion.chunk",
                       "created": created, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                    "logprobs": None}], **extra})

    parser = StreamParser(fmt, id_prefix=id_prefix, tools=call.tools)
    yield chunk({"role": "assistant", "content": ""})
    gen: Generated | None = None
    try:
        async with aclosing(_generate_streamed(call)) as items:
            async for item in items:
                if isinstance(item, Generated):
                    gen = item
                    break
                for delta in parser.feed(item):
                    yield chunk(delta)
        assert gen is not None
        _count(metrics, gen)
        valid: bool | None = None
        if not gen.enforced:
            finish = gen.finish_reason
            rest = gen.text[len(parser.text):]
            if rest:
                yield chunk({"content": rest})
        elif gen.finish_reason == "stop":
            try:
                turn, deltas = parser.finish()
            except FormatParseError as e:
                if not call.params.stop:
                    raise APIError(422, f"the model's turn does not follow the {fmt.name} "
                                        f"format (strict_level off): {e}",
                                   code="format_parse_error") from e
                turn, deltas = parse_partial(fmt, parser.text, id_prefix=id_prefix,
                                             tools=call.tools), []
            for delta in deltas:
                yield chunk(delta)
            finish = "tool_calls" if turn.tool_calls else "stop"
            valid = _content_valid(content_check, turn.to_message(), finish)
        else:
            finish, valid = "length", (False if content_check is not None else None)
        yield chunk({}, finish, kaname={**ext, "enforced": gen.enforced,
                                        "not_enforced_reason": gen.not_enforced_reason,
                                        "content_valid": valid})
        if include_usage:
            yield _event({"id": response_id, "object": "chat.completion.chunk",
                          "created": created, "model": model, "choices": [],
                          "usage": _usage(gen)})
    except APIError as e:
        yield _event(e.body())
    except ConstraintError as e:
        yield _event(from_constraint_error(e).body())
    except FormatParseError as e:  # only possible with strict_level "off"
        yield _event(APIError(422, f"the model's turn does not follow the {fmt.name} format "
                                   f"(strict_level off): {e}",
                              code="format_parse_error").body())
    except Exception:  # headers are sent: the error goes in the stream, logged here
        log.exception("stream failed")
        yield _event(APIError(500, "internal error (logged on the server)",
                              type="server_error").body())
    yield "data: [DONE]\n\n"


async def _stream_completion(call: _Call, response_id: str, model: str, include_usage: bool,
                             metrics: Metrics) -> AsyncIterator[str]:
    created = int(time.time())

    def chunk(text: str, finish: str | None = None) -> str:
        return _event({"id": response_id, "object": "text_completion", "created": created,
                       "model": model, "choices": [{"index": 0, "text": text,
                                                    "finish_reason": finish,
                                                    "logprobs": None}]})

    sent = 0
    try:
        async with aclosing(_generate_streamed(call)) as items:
            async for item in items:
                if isinstance(item, Generated):
                    _count(metrics, item)
                    if not item.enforced:
                        yield chunk(item.text[sent:])
                    yield chunk("", item.finish_reason)
                    if include_usage:
                        yield _event({"id": response_id, "object": "text_completion",
                                      "created": created, "model": model, "choices": [],
                                      "usage": _usage(item)})
                    break
                sent += len(item)
                yield chunk(item)
    except APIError as e:
        yield _event(e.body())
    except ConstraintError as e:
        yield _event(from_constraint_error(e).body())
    except Exception:  # headers are sent: the error goes in the stream, logged here
        log.exception("stream failed")
        yield _event(APIError(500, "internal error (logged on the server)",
                              type="server_error").body())
    yield "data: [DONE]\n\n"
