"""One agent turn on this server, whichever API asked for it.

An API's edge (`kaname.edges`) turns its body into a `TurnRequest`; here it goes through the
one pipeline (`kaname.chat.prepare`: prompt, grammar, strictness, guards), gets its budget and
a generation from the backend, and comes back as one `TurnResult` (or the parser's deltas, as
they become final, then the result), which the edge renders in its own shape.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TypeVar, cast

from fastapi import Request

from ..chat import Finish, PreparedTurn, TurnResult, new_call_id_prefix, prepare
from ..decoding import Generation
from ..errors import ConstraintError, FormatParseError, KanameError, UnknownModelError
from ..formats import ParsedTurn
from ..formats.items import CallDelta, Delta, TextDelta
from ..formats.request import TurnRequest
from ..grammar import Lark, Text
from . import access_log
from .admission import Slot
from .backend import Backend
from .calls import Call, budget, count, gen_params, generate_streamed, run_watching
from .config import ServerConfig
from .lifecycle import Deadline, Lifecycle
from .metrics import Metrics
from .workers import Workers

T = TypeVar("T")


@dataclass
class Turn:
    """A prepared turn: prompt rendered and counted, grammar compiled, budget counted."""

    call: Call
    prepared: PreparedTurn
    asked_tokens: int | None  # the output budget the request asked for
    prompt_tokens: int
    id_prefix: str = field(default_factory=new_call_id_prefix)  # tool-call ids of this turn
    response_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def request(self) -> TurnRequest:
        return self.prepared.request


class Turns:
    """The turn pipeline of one server: its format, backend, limits and defaults."""

    def __init__(self, config: ServerConfig, backend: Backend, metrics: Metrics,
                 lifecycle: Lifecycle):
        from ..formats import get_format

        self.config, self.backend, self.metrics = config, backend, metrics
        self.lifecycle = lifecycle
        self.fmt = get_format(config.format)
        # no budget exceeds what the model can hold
        self.limit = min(config.max_tokens_limit, backend.n_ctx or config.max_tokens_limit)
        self.workers = Workers()  # where requests are prepared, off the event loop

    def check_model(self, model: str) -> None:
        if not self.config.accepts_model(model):
            raise UnknownModelError(model, self.backend.model_id)

    def deadline(self, request: Request) -> Deadline:
        """The request's deadline (`--request-timeout` from its arrival)."""
        return self.lifecycle.deadline(request.scope)

    async def prepare(self, req: TurnRequest, *, deadline: Deadline, call_ids: str = "call_"
                      ) -> Turn:
        """The turn ready to generate: prompt rendered, tokens counted, grammar compiled, all
        off the event loop within `deadline` (`off_loop`). `deadline`: the request's
        (`Turns.deadline`), which its generation keeps; `call_ids`: how this API's tool-call
        ids start (they come back in tool results)."""
        return await self.off_loop(deadline, lambda: self._prepare(req, deadline, call_ids))

    async def off_loop(self, deadline: Deadline, work: Callable[[], T]) -> T:
        """`work()` (too slow for the event loop: rendering, tokenizing, compiling) on a worker
        thread, within `deadline`: past it a 504, and the work is stopped."""
        return await deadline.preparing(self.workers.run(work))

    def _prepare(self, req: TurnRequest, deadline: Deadline, call_ids: str) -> Turn:
        backend, config = self.backend, self.config
        self.check_model(req.model)
        if len(req.tools) > config.max_tools:
            raise ConstraintError(f"at most {config.max_tools} tools per request",
                                  pointer=req.origins.tools)
        prepared = prepare(self.fmt, req, backend.tokenizer, backend.compiler,
                           chat_template=config.chat_template,
                           reasoning_default=config.reasoning,
                           strict_default=config.strict_level)
        prompt = prepared.prompt_without_bos
        prompt_tokens = backend.count_tokens(prompt)
        served = budget(backend, prompt_tokens, req.max_tokens,
                        config.default_max_tokens or self.limit, self.limit,
                        req.origins.messages)
        params = gen_params(served, req.sampling, config.draft and req.draft)
        compiled = backend.compiler.compile(Lark(prepared.grammar))
        call = Call(backend, prompt, compiled, params, req.allow_unenforced, deadline)
        return Turn(call, prepared, req.max_tokens, prompt_tokens, new_call_id_prefix(call_ids))

    async def admit(self, turn: Turn) -> Slot:
        """Take a generation slot before a stream's 200 is sent, so that a full queue is a
        429, a timeout a 504 and a shutdown a 503."""
        return await turn.call.admit()

    async def complete(self, request: Request, turn: Turn) -> TurnResult:
        text: list[str] = []  # the turn so far, to say where a parser limit was hit
        try:
            gen = await run_watching(request, turn.call, lambda piece, _: text.append(piece))
        except ConstraintError as e:  # a parser limit hit while decoding
            raise self._limit_at(turn, e, "".join(text)) from e
        count(self.metrics, gen)
        if gen.outside_grammar is not None:  # raw upstream text, allowed by the caller
            return self._result(turn, gen, ParsedTurn(content=gen.text), gen.finish_reason)
        parsed, finish, cut = turn.prepared.parse(gen.text, gen.finish_reason, turn.id_prefix)
        return self._result(turn, gen, parsed, finish, cut)

    async def stream(self, turn: Turn) -> AsyncGenerator[Delta | TurnResult, None]:
        """The turn as typed deltas as they become final, then its TurnResult; the deltas
        add up to the result's turn."""
        prepared = turn.prepared
        parser = prepared.stream_parser(turn.id_prefix)
        opening = prepared.opening
        for delta in parser.feed(opening):  # what the prompt wrote of the turn
            yield delta
        gen: Generation | None = None
        text = ""
        async with aclosing(generate_streamed(turn.call)) as items:
            try:
                async for item in items:
                    if isinstance(item, Generation):
                        gen = item
                        break
                    text += item[0]
                    for delta in parser.feed(item[0]):
                        yield delta
            except ConstraintError as e:  # a parser limit hit while decoding
                raise self._limit_at(turn, e, text) from e
        if gen is None:  # pragma: no cover - generate_streamed ends with the result or raises
            raise RuntimeError("generation ended without a result")
        count(self.metrics, gen)
        if gen.outside_grammar is not None:
            rest = (opening + gen.text)[len(parser.text):]
            if rest:
                yield TextDelta("content", rest)
            yield self._result(turn, gen, ParsedTurn(content=gen.text), gen.finish_reason)
            return
        cut = False
        if gen.finish_reason == "stop":
            try:
                parsed, deltas = parser.finish()
            except FormatParseError:
                if not turn.call.params.stop:
                    raise
                parsed, deltas = prepared.parse(gen.text, "stop", turn.id_prefix)[0], []
                cut = True
            for delta in deltas:
                yield delta
            finish = "tool_calls" if parsed.tool_calls else "stop"
        else:
            parsed, finish, _ = prepared.parse(gen.text, "length", turn.id_prefix)
        yield self._result(turn, gen, parsed, finish, cut)

    def _limit_at(self, turn: Turn, e: ConstraintError, text: str) -> ConstraintError:
        """A parser limit first hit while decoding (llguidance's error names no field: the
        turn's one grammar holds every tool and the content's constraint), moved to the field
        being decoded: the tool whose call `text` (the turn so far) was writing, or the one
        tool_choice names (llguidance looks ahead through forced text: the limit can come
        before the call's name is written), else the content's constraint, else the one tool,
        else the tools."""
        if e.pointer:
            return e
        req = turn.request
        name = req.tool_choice if req.tool_choice not in ("none", "auto", "required") else None
        try:
            for delta in turn.prepared.stream_parser(turn.id_prefix).feed(
                    turn.prepared.opening + text):
                if isinstance(delta, CallDelta) and delta.name is not None:
                    name = delta.name
        except KanameError:  # text the parser does not follow: no call known
            pass
        tools = req.tools
        at = next((t.schema_pointer(i) for i, t in enumerate(tools) if t.name == name), None)
        if at is None and not isinstance(req.content, Text):
            at = req.origins.content
        if at is None and tools:
            at = tools[0].schema_pointer(0) if len(tools) == 1 else req.origins.tools
        return e if at is None else e.at(at)

    def _result(self, turn: Turn, gen: Generation, parsed: ParsedTurn, finish: str,
                cut: bool = False) -> TurnResult:
        ended = cast(Finish, finish)
        if (record := access_log.current()) is not None:
            record.finish_reason = ended  # the API's ("tool_calls"), not the generation's
        served = turn.call.params.max_tokens
        report = turn.prepared.report(
            parsed, ended, enforced=gen.outside_grammar is None,
            not_enforced_reason=gen.outside_grammar,
            grammar_hash=turn.call.compiled.grammar_hash,
            budget={"asked": turn.asked_tokens, "served": served},
            reasoning_tokens=self._reasoning_tokens(parsed, gen))
        stop = turn.call.params.stop
        sequence = gen.stop_sequence if gen.stop_sequence is not None \
            else stop[0] if cut and len(stop) == 1 else None
        return TurnResult(parsed, ended, gen, report, sequence,
                          gen.stop_sequence is not None or cut)

    def _reasoning_tokens(self, parsed: ParsedTurn, gen: Generation) -> int:
        """The reasoning's length in tokens, counted by tokenizing its text again (the decoder
        does not split its count by part), never more than what was generated."""
        text = parsed.reasoning_content or ""
        if not text:
            return 0
        return min(len(self.backend.tokenizer.tokenize_str(text)), gen.usage.completion_tokens)
