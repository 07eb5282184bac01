"""One agent turn, whichever API asked for it.

Chat completions, the Responses API and Anthropic's Messages API are translations at the edge:
each turns its request into a `ChatCompletionRequest` (the one request model inside) and the
`TurnResult` (or the stream of chat deltas) back into its own shape. Everything between (prompt,
grammar, strictness, guards, budget, generation, parsing, post-checks) happens here, once.
Errors point into the request that was sent: `Pointers` says where each chat field sits there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import Request
from pydantic import ValidationError

from ..chat import PreparedTurn, finish_turn, new_call_id_prefix, prepare_turn
from ..errors import ConstraintError, ContextLengthError, FormatParseError, KanameError
from ..formats import ChatFormat, ParsedTurn, StreamParser, get_format, parse_partial
from ..grammar import CompiledConstraint, Constraint, JsonSchema, Lark
from .admission import Slot
from .backend import Backend, Generated
from .calls import Call, budget, check_model, count, gen_params, generate_streamed, run_watching
from .config import ServerConfig
from .errors import APIError, pointer_of
from .metrics import Metrics
from .protocol import ChatCompletionRequest


@dataclass(frozen=True)
class Pointers:
    """Where the fields of a chat-completions request sit in the request that was sent:
    (chat prefix, that API's prefix) pairs; the longest matching prefix moves a pointer."""

    moves: tuple[tuple[str, str], ...] = ()

    def __call__(self, pointer: str | None) -> str | None:
        if not pointer or not self.moves:
            return pointer
        bare = pointer.startswith("/")
        p = pointer if bare else "/" + pointer
        best: tuple[str, str] | None = None
        for old, new in self.moves:
            if (p == old or p.startswith(old + "/")) and (best is None or len(old) > len(best[0])):
                best = (old, new)
        if best is None:
            return pointer
        moved = best[1] + p[len(best[0]):]
        return moved if bare else moved.lstrip("/")

    def error(self, e: KanameError) -> KanameError:
        """`e` with its pointer (and the pointer in its message) moved."""
        if isinstance(e, ConstraintError) and e.pointer and self(e.pointer) != e.pointer:
            new = self(e.pointer)
            return type(e)(e.message.replace(e.pointer, new or ""), keyword=e.keyword,
                           pointer=new)
        if isinstance(e, APIError) and e.param and self(e.param) != e.param:
            new = self(e.param) or ""
            return APIError(e.status, e.message.replace(e.param, new), param=new, code=e.code,
                            type=e.type)
        if isinstance(e, ContextLengthError) and e.param and self(e.param) != e.param:
            moved = ContextLengthError(e.context, e.prompt_tokens, e.max_tokens)
            moved.param = self(e.param)
            return moved
        return e


CHAT = Pointers()
_SCHEMA_AT = "/response_format/json_schema/schema"


@dataclass
class TurnResult:
    """A finished turn: the assistant message in chat shape, the chat finish_reason
    (stop | tool_calls | length), what was generated, and kaname's report."""

    message: dict[str, Any]
    finish: str
    gen: Generated
    kaname: dict[str, Any]
    stop: tuple[str, ...] = ()  # the request's stop strings
    cut_by_stop: bool = False  # a stop string ended the turn before its end marker

    @property
    def stopped_by_string(self) -> bool:
        return self.gen.stop_sequence is not None or self.cut_by_stop

    @property
    def stop_sequence(self) -> str | None:
        """The stop string the generation ended at: as the backend names it, or the one stop
        string of a request whose turn a stop string cut (an upstream need not say which)."""
        if self.gen.stop_sequence is not None:
            return self.gen.stop_sequence
        return self.stop[0] if self.cut_by_stop and len(self.stop) == 1 else None


@dataclass
class Turn:
    """A prepared turn: prompt rendered, grammar compiled, budget counted."""

    call: Call
    fmt: ChatFormat
    prepared: PreparedTurn
    content_check: CompiledConstraint | None
    ext: dict[str, Any]
    id_prefix: str = field(default_factory=new_call_id_prefix)  # tool-call ids of this turn
    response_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def result(self, gen: Generated, message: dict[str, Any], finish: str,
               cut_by_stop: bool = False) -> TurnResult:
        return TurnResult(message, finish, gen, {
            **self.ext, "enforced": gen.enforced,
            "not_enforced_reason": gen.not_enforced_reason,
            "content_valid": _content_valid(self.content_check, message, finish),
            "tool_calls_valid": self.call.verdicts(message)},
            tuple(self.call.params.stop), cut_by_stop)


class Turns:
    """The turn pipeline of one server: its format, backend, limits and defaults."""

    def __init__(self, config: ServerConfig, backend: Backend, metrics: Metrics):
        self.config, self.backend, self.metrics = config, backend, metrics
        self.fmt = get_format(config.format)
        # the server's max_tokens limit never exceeds what the model can hold
        self.limit = min(config.max_tokens_limit, backend.n_ctx or config.max_tokens_limit)

    def chat_request(self, body: Mapping[str, Any], where: Pointers) -> ChatCompletionRequest:
        """Validate a translated request; a 400 pointing into the request that was sent."""
        try:
            return ChatCompletionRequest.model_validate(body)
        except ValidationError as e:
            first = e.errors()[0]
            pointer = where(pointer_of(first.get("loc", ()), body))
            raise APIError(400, f"{first.get('msg', 'invalid request')} at {pointer}",
                           param=pointer, code="invalid_request") from None

    def prepare(self, req: ChatCompletionRequest, where: Pointers = CHAT, *,
                call_ids: str = "call_") -> Turn:
        """`call_ids`: how this API's tool-call ids start (they come back in tool results)."""
        try:
            turn = self._prepare(req)
            turn.id_prefix = new_call_id_prefix(call_ids)
            return turn
        except KanameError as e:
            moved = where.error(e)
            if moved is e:
                raise
            raise moved from e

    def _prepare(self, req: ChatCompletionRequest) -> Turn:
        backend, config, fmt = self.backend, self.config, self.fmt
        check_model(backend, req.model, req.n)
        tools = req.tool_dicts()
        if tools and len(tools) > config.max_tools:
            raise APIError(400, f"at most {config.max_tools} tools per request",
                           param="/tools")
        strict_level = req.strict_level or config.strict_level
        guards = req.guards(backend.compiler.guards)
        prepared = prepare_turn(
            fmt, req.message_dicts(), backend.tokenizer, backend.compiler, tools=tools,
            tool_choice=req.tool_choice_name(), allowed_tools=req.allowed_tool_names(),
            parallel_tool_calls=req.parallel_tool_calls is not False,
            response_format=req.response_format_dict(),
            reasoning=config.reasoning_for(fmt, req.reasoning_asked()),
            max_reasoning_tokens=req.max_reasoning_tokens, strict_level=strict_level,
            chat_template=config.chat_template, guards=guards)
        content_check, not_enforced = _check_content(backend, prepared.request.content)
        prompt = prepared.prompt_without_bos
        asked = req.max_completion_tokens or req.max_tokens
        params = gen_params(budget(backend, prompt, asked, config.default_max_tokens,
                                   self.limit, "messages"),
                            req.temperature, req.top_p, req.seed, req.stop_list())
        compiled = backend.compiler.compile(Lark(prepared.grammar))
        ext = {"format": fmt.name, "strict_level": strict_level,
               "grammar_hash": compiled.grammar_hash,
               "not_enforced": not_enforced + prepared.not_enforced,
               "guards": asdict(guards)}
        call = Call(backend, prompt, compiled, params, req.allow_unenforced,
                    prepared.request.tools, prepared.call_verdicts)
        return Turn(call, fmt, prepared, content_check, ext)

    async def admit(self, turn: Turn) -> Slot:
        """Take a generation slot before a stream's 200 is sent, so a full queue is a 429."""
        turn.call.slot = await self.backend.admit()
        return turn.call.slot

    async def complete(self, request: Request, turn: Turn) -> TurnResult:
        gen = await run_watching(request, turn.call)
        count(self.metrics, gen)
        message, finish, cut = _chat_message(turn, gen)
        return turn.result(gen, message, finish, cut)

    async def stream(self, turn: Turn) -> AsyncGenerator[dict[str, Any] | TurnResult, None]:
        """The turn as chat deltas (StreamParser's) as they become final, then its
        TurnResult; the deltas add up to the result's message."""
        call, fmt = turn.call, turn.fmt
        parser = StreamParser(fmt, id_prefix=turn.id_prefix, tools=call.tools)
        opening = turn.prepared.opening
        for delta in parser.feed(opening):  # what the prompt wrote of the turn
            yield delta
        gen: Generated | None = None
        async with aclosing(generate_streamed(call)) as items:
            async for item in items:
                if isinstance(item, Generated):
                    gen = item
                    break
                for delta in parser.feed(item[0]):
                    yield delta
        if gen is None:  # pragma: no cover - generate_streamed ends with the result or raises
            raise RuntimeError("generation ended without a result")
        count(self.metrics, gen)
        if not gen.enforced:
            rest = (opening + gen.text)[len(parser.text):]
            if rest:
                yield {"content": rest}
            yield turn.result(gen, {"role": "assistant", "content": gen.text},
                              gen.finish_reason)
            return
        cut = False
        if gen.finish_reason == "stop":
            try:
                parsed, deltas = parser.finish()
            except FormatParseError:
                if not call.params.stop:
                    raise
                parsed, deltas, cut = _partial(turn, parser.text), [], True
            for delta in deltas:
                yield delta
            finish = "tool_calls" if parsed.tool_calls else "stop"
        else:
            parsed, finish = _partial(turn, parser.text), "length"
        yield turn.result(gen, parsed.to_message(), finish, cut)


def _partial(turn: Turn, text: str) -> ParsedTurn:
    return parse_partial(turn.fmt, text, id_prefix=turn.id_prefix, tools=turn.call.tools)


def _chat_message(turn: Turn, gen: Generated) -> tuple[dict[str, Any], str, bool]:
    """(message, finish, whether a stop string cut the turn short)."""
    if not gen.enforced:  # raw upstream text, allowed by the caller and marked as such
        return {"role": "assistant", "content": gen.text}, gen.finish_reason, False
    text = turn.prepared.opening + gen.text  # the prompt may have opened the turn
    try:
        parsed, finish = finish_turn(turn.fmt, text, gen.finish_reason,
                                     id_prefix=turn.id_prefix, tools=turn.call.tools)
    except FormatParseError:
        if not turn.call.params.stop:
            raise
        return _partial(turn, text).to_message(), "stop", True
    return parsed.to_message(), finish, False


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
