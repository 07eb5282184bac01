"""The HTTP side of `kaname bench toolcall`: K2VV requests against an OpenAI-compatible endpoint.

Requests go out concurrently (asyncio + httpx, at most `concurrency` in flight), each under a
total deadline of `timeout` seconds (streaming included). Whatever goes wrong with one request
(HTTP status, timeout, connection, a body that is not JSON, JSON that is not a completion) is
recorded as that request's error with a kind from `ERROR_KINDS`; it never stops the run.

Streaming (`"stream": true` in the request, as in every K2VV request) is read as server-sent
events and assembled into one `chat.completion` object the way K2VV does: content concatenated,
tool calls keyed by `index` (name set, arguments concatenated), the last finish reason
(`"stop"` when the stream gave none).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

ERROR_KINDS = ("http_error", "timeout", "connection_error", "bad_json", "bad_response")
RETRYABLE_STATUS = frozenset({408, 409, 429})
MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class ClientConfig:
    endpoint: str
    api_key: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    stream: str = "request"  # "request" (as each request says), "on" or "off"
    concurrency: int = 5
    timeout: float = 600.0
    retries: int = 0
    seed: int | None = None  # each request's seed is seed + its data_index
    strict_tools: bool = False  # mark every function `"strict": true`

    @property
    def url(self) -> str:
        base = self.endpoint.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"


class RequestFailed(Exception):
    def __init__(self, kind: str, message: str, status_code: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status_code = status_code

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.status_code is not None:
            out["status_code"] = self.status_code
        return out

    @property
    def retryable(self) -> bool:
        if self.kind in ("timeout", "connection_error"):
            return True
        return self.kind == "http_error" and self.status_code is not None and (
            self.status_code in RETRYABLE_STATUS or self.status_code >= 500)


def prepare_request(raw: dict[str, Any], config: ClientConfig,
                    data_index: int = 0) -> dict[str, Any]:
    """K2VV's preparation: role `_input` becomes `system`; --model and --max-tokens override.
    --seed gives request `data_index` the seed seed + data_index (the same sampling streamed
    or not, and across endpoints); --strict-tools marks every function strict."""
    req = copy.deepcopy(raw)
    if config.seed is not None:
        req["seed"] = config.seed + data_index
    if config.strict_tools:
        for tool in req.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
                tool["function"]["strict"] = True
    for message in req.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "_input":
            message["role"] = "system"
    if config.model:
        req["model"] = config.model
    if config.max_tokens is not None:
        req["max_tokens"] = config.max_tokens
    if config.stream == "on":
        req["stream"] = True
    elif config.stream == "off":
        req.pop("stream", None)
        req.pop("stream_options", None)
    return req


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "…"


def _check_completion(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestFailed("bad_response",
                            _clip(f"response is JSON but not an object: {body}"))
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RequestFailed("bad_response", _clip(
            f"response has no choices: {json.dumps(body, ensure_ascii=False)}"))
    return body


async def _http_error(response: httpx.Response) -> RequestFailed:
    text = (await response.aread()).decode("utf-8", "replace")
    return RequestFailed("http_error", _clip(f"HTTP {response.status_code}: {text}"),
                         response.status_code)


def _accumulate(chunk: dict[str, Any], state: dict[str, Any]) -> None:
    if chunk.get("id"):
        state["id"] = chunk["id"]
    if chunk.get("created"):
        state["created"] = chunk["created"]
    if chunk.get("model"):
        state["model"] = chunk["model"]
    if chunk.get("usage"):
        state["usage"] = chunk["usage"]
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return
    choice = choices[0]
    delta = choice.get("delta") or {}
    if isinstance(delta, dict):
        if isinstance(delta.get("content"), str):
            state["content"].append(delta["content"])
        if isinstance(delta.get("reasoning_content"), str):
            state["reasoning"].append(delta["reasoning_content"])
        for tc in delta.get("tool_calls") or []:
            if not isinstance(tc, dict):
                continue
            idx = tc.get("index") if isinstance(tc.get("index"), int) else 0
            call = state["tool_calls"].setdefault(
                idx, {"id": tc.get("id"), "type": tc.get("type") or "function",
                      "function": {"name": "", "arguments": ""}})
            if tc.get("id") and not call["id"]:
                call["id"] = tc["id"]
            fn = tc.get("function") or {}
            if isinstance(fn, dict):
                if fn.get("name"):
                    call["function"]["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["function"]["arguments"] += fn["arguments"]
    if choice.get("finish_reason"):
        state["finish_reason"] = choice["finish_reason"]


async def _read_stream(response: httpx.Response, model: str) -> dict[str, Any]:
    state: dict[str, Any] = {"id": None, "created": None, "model": model, "usage": None,
                             "content": [], "reasoning": [], "tool_calls": {},
                             "finish_reason": None, "chunks": 0}
    async for line in response.aiter_lines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as e:
            raise RequestFailed("bad_json", _clip(f"stream chunk is not JSON ({e}): {data}")) from e
        if not isinstance(chunk, dict):
            raise RequestFailed("bad_response", _clip(f"stream chunk is not an object: {data}"))
        if "error" in chunk and not chunk.get("choices"):
            raise RequestFailed("bad_response", _clip(
                f"error in stream: {json.dumps(chunk['error'], ensure_ascii=False)}"))
        state["chunks"] += 1
        _accumulate(chunk, state)
    if state["chunks"] == 0:
        raise RequestFailed("bad_response", "stream ended without a completion chunk")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(state["content"])}
    if state["reasoning"]:
        message["reasoning_content"] = "".join(state["reasoning"])
    message["tool_calls"] = ([state["tool_calls"][i] for i in sorted(state["tool_calls"])]
                             if state["tool_calls"] else None)
    return {"id": state["id"], "object": "chat.completion", "created": state["created"],
            "model": state["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": state["finish_reason"] or "stop"}],
            "usage": state["usage"]}


async def _send_once(client: httpx.AsyncClient, config: ClientConfig,
                     body: dict[str, Any]) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    try:
        async with asyncio.timeout(config.timeout):
            async with client.stream("POST", config.url, json=body, headers=headers) as response:
                if not 200 <= response.status_code < 300:
                    raise await _http_error(response)
                if body.get("stream"):
                    ctype = response.headers.get("content-type", "")
                    if "text/event-stream" in ctype:
                        return await _read_stream(response, str(body.get("model", "")))
                raw = await response.aread()
                try:
                    parsed = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise RequestFailed("bad_json", _clip(
                        f"response body is not JSON ({e}): "
                        f"{raw.decode('utf-8', 'replace')}")) from e
                return _check_completion(parsed)
    except TimeoutError as e:
        raise RequestFailed("timeout", f"no complete response within {config.timeout:g} s") from e
    except httpx.TimeoutException as e:
        raise RequestFailed("timeout", _clip(f"{type(e).__name__}: {e}")) from e
    except httpx.RequestError as e:
        raise RequestFailed("connection_error", _clip(f"{type(e).__name__}: {e}")) from e


async def send_request(client: httpx.AsyncClient, config: ClientConfig,
                       body: dict[str, Any]) -> tuple[dict[str, Any] | None,
                                                       RequestFailed | None, int]:
    """(response, None, attempts) or (None, error, attempts); never raises for one request."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await _send_once(client, config, body), None, attempt
        except RequestFailed as e:
            if attempt > config.retries or not e.retryable:
                return None, e, attempt
        await asyncio.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))


@dataclass
class Outcome:
    data_index: int
    response: dict[str, Any] | None
    error: RequestFailed | None
    duration_ms: int
    attempts: int


async def run_requests(items: Sequence[tuple[int, dict[str, Any]]], config: ClientConfig,
                       on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Send every (data_index, prepared request); outcomes in completion order."""
    semaphore = asyncio.Semaphore(config.concurrency)
    limits = httpx.Limits(max_connections=config.concurrency,
                          max_keepalive_connections=config.concurrency)
    timeout = httpx.Timeout(config.timeout)
    outcomes: list[Outcome] = []

    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:

        async def one(data_index: int, body: dict[str, Any]) -> Outcome:
            async with semaphore:
                start = time.perf_counter()
                response, error, attempts = await send_request(client, config, body)
                ms = int((time.perf_counter() - start) * 1000)
                return Outcome(data_index, response, error, ms, attempts)

        tasks = [asyncio.create_task(one(i, body)) for i, body in items]
        for fut in asyncio.as_completed(tasks):
            outcome = await fut
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
    return outcomes
