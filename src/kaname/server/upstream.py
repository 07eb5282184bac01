"""Text from an upstream server that enforces the grammar it is sent (vLLM with the guidance
backend, SGLang with llguidance, or another kaname), replayed through kaname's own matcher.

The upstream gets `{upstream}/completions` with the prompt and the compiled constraint's Lark
text, the same bytes the replay's matcher was built from. Only text the replay accepts reaches
the sink; text that leaves the grammar comes back with `outside_grammar` saying why.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import httpx
import llguidance as llg

from ..decoding import Generation, Usage
from ..decoding.replay import Replay
from ..errors import ModelError, NotEnforcedError
from ..grammar import CompiledConstraint, GrammarCompiler
from .admission import Admission, Slot
from .backend import GenParams, Progress, TextSink
from .errors import APIError
from .metrics import Metrics

T = TypeVar("T")


def discover_model(url: str, api_key: str | None, timeout: float = 10.0) -> str:
    """The one model an upstream serves, from its `GET /models`: what a proxy started without
    --upstream-model forwards (its own default name would get vLLM's 404)."""
    url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{url}/models", headers=headers, timeout=timeout)
        r.raise_for_status()
        ids = [str(m["id"]) for m in r.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"--upstream-model not given and GET {url}/models failed "
                         f"({type(e).__name__}: {e}); start kaname once the upstream is up, "
                         "or pass --upstream-model") from None
    if len(ids) != 1:
        raise ModelError(f"--upstream-model not given and {url} serves {len(ids)} models "
                         f"({', '.join(ids) or 'none'}); pass --upstream-model NAME")
    return ids[0]


class UpstreamBackend:
    """Fronts an OpenAI-compatible /v1/completions. `end_marker`: the chat format's end of turn,
    which engines do not echo when they stop at it."""

    n_ctx: int | None = None  # the upstream knows its own and answers for it

    def __init__(self, url: str, upstream_model: str, model_id: str, tokenizer: llg.LLTokenizer,
                 compiler: GrammarCompiler, metrics: Metrics, *, api_key: str | None,
                 max_concurrency: int, max_queue: int, request_timeout: float,
                 connect_timeout: float = 5.0, dialect: str = "vllm", end_marker: str = ""):
        self.url = url.rstrip("/")
        self.dialect = dialect
        self.end_marker = end_marker
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
        self._admission = Admission(max_concurrency, max_queue, metrics)

    def count_tokens(self, prompt: str) -> int:
        return len(self.tokenizer.tokenize_str(prompt, parse_special=True))

    async def generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                       sink: TextSink | None = None, *, slot: Slot | None = None,
                       progress: Progress | None = None) -> Generation:
        slot = slot or await self.admit()
        slot.taken = True
        try:
            return await _cancelled_once(self._generate(prompt, compiled, params, sink,
                                                        progress or Progress()))
        except httpx.TimeoutException as e:  # no byte for --request-timeout seconds
            raise APIError(504, f"upstream timed out: {type(e).__name__}",
                           code="upstream_timeout") from None
        except httpx.HTTPError as e:
            raise APIError(502, f"upstream unreachable: {type(e).__name__}: {e}",
                           code="upstream_unreachable") from None
        finally:
            slot.release()

    async def admit(self) -> Slot:
        return await self._admission.acquire(self.request_timeout)

    async def _generate(self, prompt: str, compiled: CompiledConstraint, params: GenParams,
                        sink: TextSink | None, progress: Progress) -> Generation:
        body: dict[str, Any] = {
            "model": self.upstream_model, "prompt": prompt, "max_tokens": params.max_tokens,
            "temperature": params.sampling.temperature, "top_p": params.sampling.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
            # the format's markers are special tokens: they must come back as text
            "skip_special_tokens": False, "spaces_between_special_tokens": False,
        }
        if self.dialect == "sglang":  # its llguidance backend reads Lark from `ebnf`
            body["ebnf"] = compiled.grammar
        else:  # vLLM >= 0.11 with the guidance backend (and kaname itself)
            body["structured_outputs"] = {"grammar": compiled.grammar}
            # the generated token ids (vLLM >= 0.10.2): the replay checks those very tokens
            body["return_token_ids"] = True
        if params.sampling.top_k:
            body["top_k"] = params.sampling.top_k
        if params.sampling.min_p:
            body["min_p"] = params.sampling.min_p
        if params.sampling.seed is not None:
            body["seed"] = params.sampling.seed
        if params.stop:
            body["stop"] = params.stop
        replay = Replay(compiled, self.tokenizer)
        text, finish = "", None
        stop_reason: Any = None  # vLLM's: the stop string (or token id) it stopped at
        says_stop_reason = False  # vLLM sends the key in every chunk, null at end of sequence
        usage: dict[str, Any] = {}
        unenforced: str | None = None
        async with self._client.stream("POST", f"{self.url}/completions", json=body) as r:
            if r.status_code != 200:
                raise _upstream_refusal(r.status_code, await r.aread())
            async for data in _sse_data(r):
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                    choices = event.get("choices") or []
                    chunk = choices[0].get("text") or "" if choices else ""
                    ids = choices[0].get("token_ids") if choices else None
                    finish = (choices[0].get("finish_reason") if choices else None) or finish
                    if choices and "stop_reason" in choices[0]:
                        says_stop_reason = True
                        if choices[0]["stop_reason"] is not None:
                            stop_reason = choices[0]["stop_reason"]
                    usage = event.get("usage") or usage
                    if ids is not None and not all(isinstance(i, int) for i in ids):
                        raise TypeError("token_ids")
                except (json.JSONDecodeError, AttributeError, IndexError, TypeError):
                    raise APIError(502, f"upstream sent a malformed event: {data[:120]!r}",
                                   code="upstream_garbled") from None
                if "error" in event:
                    raise APIError(502, f"upstream error: {str(event['error'])[:300]}",
                                   code="upstream_error")
                if not chunk and not ids:  # empty events (heartbeats) are not progress
                    continue
                progress.touch()
                text += chunk
                if unenforced is None:
                    try:
                        if ids is None and replay.exact:
                            raise NotEnforcedError("the upstream stopped sending token ids")
                        out = replay.feed(chunk) if ids is None else \
                            replay.feed_tokens(ids, chunk)
                    except NotEnforcedError as e:
                        unenforced = str(e)
                        out = ""
                    if (out or ids) and sink is not None:
                        sink(out, ids or [])
        if finish not in ("stop", "length"):
            raise APIError(502, "upstream stream ended without a finish_reason",
                           code="upstream_garbled")
        # Stopped by one of the request's stop strings (vLLM names it in stop_reason; an
        # upstream that does not say is taken at its word when stop strings were given): what
        # came so far was checked, the rest of the grammar is not owed.
        by_string = bool(params.stop) and (stop_reason in params.stop
                                           if says_stop_reason else True)
        if unenforced is None:
            try:
                rest = replay.finish(finish, self.end_marker, stopped_by_string=by_string)
                if rest and sink is not None:
                    sink(rest, [])
                text = replay.text
            except NotEnforcedError as e:
                unenforced = str(e)
        if unenforced is not None:
            self.metrics.not_enforced.inc()
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        # which stop string, only where the upstream says (the turn knows more: turn.py)
        named = stop_reason if isinstance(stop_reason, str) and stop_reason in params.stop \
            else None
        return Generation(text, finish, Usage(prompt_tokens, completion_tokens, 0),
                          tokens=replay.tokens if replay.exact else None,
                          stop_sequence=named if finish == "stop" else None,
                          outside_grammar=unenforced)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _cancelled_once(work: Coroutine[Any, Any, T]) -> T:
    """`work` in a task of its own that is cancelled at most once, however often its caller is
    (a deadline, the timeout here, a client that went away). On a cancel httpcore closes the
    upstream connection in its exception handler; a second cancel landing inside that handler
    leaves the connection ACTIVE in the pool for good (httpx 0.28), and once the pool is full of
    them every later request waits for a connection until its deadline."""
    task = asyncio.ensure_future(work)
    # retrieved here too: once its caller is gone no one awaits it
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})  # cancelled again here, the task still finishes its cleanup
        raise


def _upstream_refusal(status: int, body: bytes) -> APIError:
    """The upstream's error. A 400 in OpenAI's shape is about the request itself (vLLM answers
    one for a prompt longer than its context): it reaches the client as the 400 it is. Anything
    else is the upstream's fault or kaname's configuration of it: 502."""
    detail = body.decode(errors="replace")
    if status == 400:
        try:
            err = json.loads(detail)["error"]
            message, param, code = str(err["message"]), err.get("param"), err.get("code")
        except (ValueError, KeyError, TypeError):
            pass
        else:
            return APIError(400, f"upstream: {message}",
                            param=param if isinstance(param, str) else None,
                            code=code if isinstance(code, str) else "invalid_request")
    return APIError(502, f"upstream answered {status}: {detail[:300]}", code="upstream_error")


async def _sse_lines(r: httpx.Response) -> AsyncIterator[str]:
    """The lines of an SSE stream, split where SSE splits them (CR, LF, CRLF). httpx's
    aiter_lines splits like str.splitlines, also at U+2028, U+0085, ..., which JSON servers
    (vLLM, pydantic) write raw inside strings: a model's text would cut an event in two."""
    pending = ""
    async for text in r.aiter_text():
        pending += text
        *lines, pending = pending.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in lines:
            yield line
    if pending:
        yield pending


async def _sse_data(r: httpx.Response) -> AsyncIterator[str]:
    """The `data:` payloads of an SSE stream."""
    async for line in _sse_lines(r):
        if line.startswith("data:"):
            yield line[5:].strip()
        elif line and not line.startswith((":", "event:", "id:", "retry:")):
            raise APIError(502, f"upstream sent a malformed SSE line: {line[:120]!r}",
                           code="upstream_garbled")
