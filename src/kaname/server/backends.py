"""Where text comes from: the local engine(s) or an upstream OpenAI-compatible server.

Both stream text to a sink on the event loop and return a `Generated`. Generation runs off the
event loop; a cancelled request (client gone, deadline passed) stops its generation at the next
token and frees its slot.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import llguidance as llg

from ..engine import Engine
from ..grammar import CompiledConstraint, GrammarCompiler
from .errors import APIError
from .metrics import Metrics

TextSink = Callable[[str], None]


@dataclass
class GenParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class Generated:
    text: str
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int
    enforced: bool = True  # False only for upstream text the replay rejected (and allowed)
    not_enforced_reason: str | None = None


class _Stop(Exception):
    """Raised inside the generation thread to end it early."""


class Slot:
    """One admitted generation. Released once, by whoever ends up owning it: the generation,
    or the response if the generation never started."""

    def __init__(self, admission: _Admission):
        self._admission = admission
        self.taken = False  # a generation owns it and will release it
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._admission.release()


class _Admission:
    """A bounded queue in front of N slots: beyond `max_queue` waiting requests, 429. The
    check and the count happen in one synchronous step, so simultaneous arrivals cannot all
    slip past it."""

    def __init__(self, slots: int, max_queue: int, metrics: Metrics):
        self.slots = slots
        self.max_queue = max_queue
        self.metrics = metrics
        self.waiting = 0
        self.running = 0
        self._sem: asyncio.Semaphore | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        return self._sem

    async def acquire(self, timeout: float) -> Slot:
        if self.waiting + self.running >= self.slots + self.max_queue:
            raise APIError(429, f"server busy: {self.running} generations running and "
                                f"{self.waiting} queued (limit {self.max_queue}); retry later",
                           code="queue_full")
        self.waiting += 1
        self.metrics.queue_depth.set(self.waiting)
        try:
            await asyncio.wait_for(self._semaphore().acquire(), timeout)
        except TimeoutError:
            raise APIError(504, f"timed out after {timeout:.0f} s waiting for a generation "
                                "slot", code="timeout") from None
        finally:
            self.waiting -= 1
            self.metrics.queue_depth.set(self.waiting)
        self.running += 1
        self.metrics.active.inc()
        return Slot(self)

    def release(self) -> None:
        self.running -= 1
        self.metrics.active.dec()
        self._semaphore().release()


class LocalBackend:
    """Engines sharing one vocabulary and compile cache; one generation per engine at once."""

    def __init__(self, engines: list[Engine], model_id: str, metrics: Metrics, *,
                 max_queue: int, request_timeout: float):
        self.engines = engines
        self.model_id = model_id
        self.metrics = metrics
        self.request_timeout = request_timeout
        self.tokenizer: llg.LLTokenizer = engines[0].runtime.tokenizer
        self.compiler: GrammarCompiler = engines[0].compiler
        self._free = list(engines)
        self._admission = _Admission(len(engines), max_queue, metrics)
        self._executor = ThreadPoolExecutor(max_workers=len(engines),
                                            thread_name_prefix="kaname-gen")
        self._running: set[threading.Event] = set()  # cancel flags of running generations

    async def admit(self) -> Slot:
        """Wait for a generation slot (429 when the queue is full, 504 on timeout)."""
        return await self._admission.acquire(self.request_timeout)

    async def generate(self, prompt: str, compiled: CompiledConstraint,
                       params: GenParams, sink: TextSink | None = None, *,
                       lark: str | None = None, allow_unenforced: bool = False,
                       end_marker: str = "", slot: Slot | None = None) -> Generated:
        deadline = time.monotonic() + self.request_timeout
        slot = slot or await self.admit()
        slot.taken = True
        engine = self._free.pop()
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        self._running.add(cancel)
        stream = _TextStream(engine.runtime.tokenizer, params.stop, sink, loop)

        def on_tokens(ids: list[int]) -> None:
            if cancel.is_set() or time.monotonic() > deadline:
                raise _Stop
            stream.push(ids)

        def work():  # type: ignore[no-untyped-def]
            # compiled.constraint hits the compile cache the caller just filled
            return engine.generate(prompt, compiled.constraint, max_tokens=params.max_tokens,
                                   temperature=params.temperature, top_p=params.top_p,
                                   seed=params.seed, stop=params.stop, on_tokens=on_tokens)

        def done(f: Any) -> None:  # the slot is free only once the thread has stopped
            self._running.discard(cancel)
            self._free.append(engine)
            slot.release()
            if not f.cancelled():
                f.exception()  # retrieved: a cancelled generation's _Stop is expected

        cfut = self._executor.submit(work)
        cfut.add_done_callback(lambda f: loop.call_soon_threadsafe(done, f))
        try:
            result = await asyncio.shield(asyncio.wrap_future(cfut))
        except asyncio.CancelledError:
            cancel.set()
            raise
        except _Stop:
            raise APIError(504, f"generation timed out after {self.request_timeout:.0f} s",
                           code="timeout") from None
        stream.flush(result.text)
        self.metrics.observe_constraint_ns(result.constraint_ns)
        self.metrics.tokens.labels("forced").inc(result.usage.forced_tokens)
        return Generated(result.text, result.finish_reason, result.usage.prompt_tokens,
                         result.usage.completion_tokens)

    def close(self) -> None:
        """On shutdown (after uvicorn's grace period): stop what still runs at its next
        token, so the process does not wait for whole generations."""
        for cancel in list(self._running):
            cancel.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


class _TextStream:
    """Token ids → text chunks for the sink, holding back what a stop string may still cut."""

    def __init__(self, tokenizer: llg.LLTokenizer, stop: list[str], sink: TextSink | None,
                 loop: asyncio.AbstractEventLoop):
        self.tok = tokenizer
        self.sink = sink
        self.loop = loop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.sent = 0

    def push(self, ids: list[int]) -> None:
        if self.sink is None:
            return
        self.text += self.decoder.decode(self.tok.decode_bytes(ids))
        upto = len(self.text) - self.hold
        if upto > self.sent:
            self.loop.call_soon_threadsafe(self.sink, self.text[self.sent:upto])
            self.sent = upto

    def flush(self, final: str) -> None:
        if self.sink is not None and len(final) > self.sent:
            self.sink(final[self.sent:])


class NotEnforcedError(Exception):
    """The upstream's text is not in the language of the grammar it was sent."""


class Replay:
    """Replays upstream text through kaname's own matcher as it streams: only text the grammar
    accepts is passed on. The last token of the text so far is held back, since more text may
    merge into it; a changed tokenization is handled by rolling the matcher back."""

    def __init__(self, compiled: CompiledConstraint, tokenizer: llg.LLTokenizer):
        self.compiled = compiled
        self.m = compiled.new_matcher()
        self.tok = tokenizer
        self.text = ""
        self.tokens: list[int] = []
        self.sent = 0

    def _advance(self, target: list[int]) -> None:
        common = 0
        for a, b in zip(self.tokens, target, strict=False):
            if a != b:
                break
            common += 1
        if common < len(self.tokens):
            self.m.rollback(len(self.tokens) - common)
            self.tokens = self.tokens[:common]
            if self.m.is_error():  # llguidance cannot roll back max_tokens= lexemes: replay
                self.m = self.compiled.new_matcher()
                self.tokens, common = [], 0
        new = target[common:]
        if new and not self.m.consume_tokens(new):
            raise NotEnforcedError(f"the upstream text leaves the grammar near "
                                   f"{self.tok.decode_str(new)[:60]!r}: "
                                   f"{self.m.get_error() or 'token not allowed'}")
        self.tokens = list(target)

    def feed(self, chunk: str) -> str:
        """Accept a chunk; return the newly validated text."""
        self.text += chunk
        toks = self.tok.tokenize_str(self.text, parse_special=True)
        self._advance(toks[:-1])
        valid = self.tok.decode_bytes(self.tokens).decode("utf-8", errors="ignore")
        # A changed tokenization may validate a shorter prefix for a moment; what was passed
        # on is still a prefix of the text, so only text beyond it goes out.
        out = valid[self.sent:]
        self.sent = max(self.sent, len(valid))
        return out

    def finish(self, finish_reason: str, end_marker: str) -> str:
        self._advance(self.tok.tokenize_str(self.text, parse_special=True))
        if finish_reason == "stop" and not self.m.is_accepting():
            # Engines do not echo the end-of-sequence token they stopped at: the turn's end
            # marker may be missing from the text.
            end = self.tok.tokenize_str(end_marker, parse_special=True) if end_marker else []
            if not end or not self.m.consume_tokens(end) or not self.m.is_accepting():
                raise NotEnforcedError("the upstream stopped before the grammar was complete")
            self.text += end_marker
        out = self.text[self.sent:]
        self.sent = len(self.text)
        return out


class UpstreamBackend:
    """Fronts an OpenAI-compatible /v1/completions that enforces an llguidance Lark grammar
    (vLLM with the guidance backend, SGLang with llguidance, or another kaname)."""

    def __init__(self, url: str, upstream_model: str, model_id: str, tokenizer: llg.LLTokenizer,
                 compiler: GrammarCompiler, metrics: Metrics, *, api_key: str | None,
                 max_concurrency: int, max_queue: int, request_timeout: float,
                 connect_timeout: float = 5.0, dialect: str = "vllm"):
        self.url = url.rstrip("/")
        self.dialect = dialect
        self.upstream_model = upstream_model
        self.model_id = model_id
        self.tokenizer = tokenizer
        self.compiler = compiler
        self.metrics = metrics
        self.request_timeout = request_timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_concurrency * 2))
        self._admission = _Admission(max_concurrency, max_queue, metrics)

    async def generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                       sink: TextSink | None = None, *, lark: str | None = None,
                       allow_unenforced: bool = False, end_marker: str = "",
                       slot: Slot | None = None) -> Generated:
        if lark is None:
            raise APIError(400, "this constraint cannot be sent upstream", code="unsupported")
        slot = slot or await self.admit()
        slot.taken = True
        try:
            async with asyncio.timeout(self.request_timeout):
                return await self._generate(prompt, compiled, params, sink, lark,
                                            allow_unenforced, end_marker)
        except TimeoutError:
            raise APIError(504, f"upstream did not finish within {self.request_timeout:.0f} s",
                           code="upstream_timeout") from None
        except httpx.TimeoutException as e:
            raise APIError(504, f"upstream timed out: {type(e).__name__}",
                           code="upstream_timeout") from None
        except httpx.HTTPError as e:
            raise APIError(502, f"upstream unreachable: {type(e).__name__}: {e}",
                           code="upstream_unreachable") from None
        finally:
            slot.release()

    async def admit(self) -> Slot:
        return await self._admission.acquire(self.request_timeout)

    async def _generate(self, prompt: str, constraint: CompiledConstraint, params: GenParams,
                        sink: TextSink | None, lark: str, allow_unenforced: bool,
                        end_marker: str) -> Generated:
        body: dict[str, Any] = {
            "model": self.upstream_model, "prompt": prompt, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "stream": True,
            "stream_options": {"include_usage": True},
            # the format's markers are special tokens: they must come back as text
            "skip_special_tokens": False, "spaces_between_special_tokens": False,
        }
        if self.dialect == "sglang":  # its llguidance backend reads Lark from `ebnf`
            body["ebnf"] = lark
        else:  # vLLM >= 0.11 with the guidance backend (and kaname itself)
            body["structured_outputs"] = {"grammar": lark}
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        replay = Replay(constraint, self.tokenizer)
        text, finish, usage = "", None, {}
        unenforced: str | None = None
        async with self._client.stream("POST", f"{self.url}/completions", json=body) as r:
            if r.status_code != 200:
                detail = (await r.aread()).decode(errors="replace")[:300]
                raise APIError(502, f"upstream answered {r.status_code}: {detail}",
                               code="upstream_error")
            async for data in _sse_data(r):
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                    choices = event.get("choices") or []
                    chunk = choices[0].get("text") or "" if choices else ""
                    finish = (choices[0].get("finish_reason") if choices else None) or finish
                    usage = event.get("usage") or usage
                except (json.JSONDecodeError, AttributeError, IndexError, TypeError):
                    raise APIError(502, f"upstream sent a malformed event: {data[:120]!r}",
                                   code="upstream_garbled") from None
                if "error" in event:
                    raise APIError(502, f"upstream error: {str(event['error'])[:300]}",
                                   code="upstream_error")
                if not chunk:
                    continue
                text += chunk
                if unenforced is None:
                    try:
                        out = replay.feed(chunk)
                    except NotEnforcedError as e:
                        unenforced = str(e)
                        out = ""
                    if out and sink is not None:
                        sink(out)
        if finish not in ("stop", "length"):
            raise APIError(502, "upstream stream ended without a finish_reason",
                           code="upstream_garbled")
        if unenforced is None:
            try:
                rest = replay.finish(finish, end_marker)
                if rest and sink is not None:
                    sink(rest)
                text = replay.text
            except NotEnforcedError as e:
                unenforced = str(e)
        if unenforced is not None:
            self.metrics.not_enforced.inc()
            if not allow_unenforced:
                raise APIError(502, f"upstream did not enforce the grammar ({unenforced}); "
                                    "is its structured-output backend llguidance? Set "
                                    "allow_unenforced=true to get the raw text marked as not "
                                    "enforced", code="upstream_not_enforced")
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        return Generated(text, finish, prompt_tokens, completion_tokens,
                         enforced=unenforced is None, not_enforced_reason=unenforced)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _sse_data(r: httpx.Response):  # type: ignore[no-untyped-def]
    """The `data:` payloads of an SSE stream."""
    async for line in r.aiter_lines():
        if line.startswith("data:"):
            yield line[5:].strip()
        elif line and not line.startswith((":", "event:", "id:", "retry:")):
            raise APIError(502, f"upstream sent a malformed SSE line: {line[:120]!r}",
                           code="upstream_garbled")
