"""One assistant turn, the one pipeline: a `TurnRequest` → prompt and grammar (`prepare`) →
generated text → parsed turn, post-checks and report (`PreparedTurn.finish`).

The server runs it around its (streamed, local or upstream) generation; `chat` runs it with
the engine's. The request comes from an API's edge (`kaname.edges`); `chat` takes chat
completions' shape, the one Python callers write, through that edge's translation.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import llguidance as llg

from .decoding import Generation, Usage
from .engine import Engine
from .errors import ConstraintError, FormatParseError
from .formats import (
    ChatFormat,
    ParsedTurn,
    StreamParser,
    TurnRequest,
    build_grammar,
    parse,
    parse_partial,
    render_prompt,
)
from .formats.detect import template_shows_tools
from .formats.items import template_messages
from .formats.render import turn_opening
from .formats.request import Ignored, ReasoningMode, StrictLevel
from .formats.template import render_template
from .formats.tool_checks import ToolCheck, call_verdicts, check_tools, not_enforced
from .grammar import CompiledConstraint, GrammarCompiler, Guards, JsonObject, JsonSchema, Lark

Finish = Literal["stop", "tool_calls", "length"]


@dataclass
class TurnResult:
    """A finished turn, the one result every edge renders: the parsed turn, how it ended
    (stop | tool_calls | length), the report of what was enforced, and the generation it
    was parsed from (its text, usage and how it ended, as the decoding loop or the upstream
    left it)."""

    turn: ParsedTurn
    finish: Finish
    generation: Generation
    report: dict[str, Any]
    stop_sequence: str | None = None  # the stop string that ended the turn, where known
    stopped_by_string: bool = False

    @property
    def usage(self) -> Usage:
        return self.generation.usage

    @property
    def reasoning_tokens(self) -> int:
        return int(self.report.get("reasoning_tokens", 0))


@dataclass
class PreparedTurn:
    """What generation needs: the prompt (as the format renders it, BOS included) and the Lark
    grammar of the whole assistant turn, with what the post-checks need afterwards."""

    fmt: ChatFormat
    request: TurnRequest  # reasoning and strict level resolved
    prompt: str
    grammar: str
    tools: dict[str, ToolCheck] = field(default_factory=dict)  # by name: what is enforced
    content_check: CompiledConstraint | None = None
    guards: Guards | None = None
    ignored: tuple[Ignored, ...] = ()  # the request's, and what preparing it ignored
    content_not_enforced: list[dict[str, str]] = field(default_factory=list)

    @property
    def not_enforced(self) -> list[dict[str, str]]:
        """Keywords the grammar skips (lenient schemas), pointers into the request; each is
        post-checked instead."""
        return self.content_not_enforced + not_enforced(self.tools)

    def call_verdicts(self, turn: ParsedTurn) -> list[dict[str, Any]]:
        """The post-check of each tool call of a turn."""
        return call_verdicts(self.tools, [c.to_openai() for c in turn.tool_calls])

    @property
    def json_content(self) -> bool:
        """The content is one JSON value (the parser reads markers only after it)."""
        return isinstance(self.request.content, JsonSchema | JsonObject)

    def stream_parser(self, id_prefix: str) -> StreamParser:
        return StreamParser(self.fmt, id_prefix=id_prefix, tools=self.request.tools,
                            json_content=self.json_content)

    @property
    def opening(self) -> str:
        """What the prompt wrote of the turn: the parser reads it before the generated text."""
        return self.request.opening_in(self.fmt)

    @property
    def prompt_without_bos(self) -> str:
        """Tokenizers that add the model's BOS themselves take the prompt without it."""
        bos = self.fmt.bos
        return self.prompt.removeprefix(bos) if bos else self.prompt

    def parse(self, text: str, finish_reason: str, id_prefix: str
              ) -> tuple[ParsedTurn, Finish, bool]:
        """The turn's generated text parsed (after the prompt's opening): (turn, finish,
        whether a stop string cut it before its end marker)."""
        text = self.opening + text
        kw: dict[str, Any] = {"id_prefix": id_prefix, "tools": self.request.tools,
                              "json_content": self.json_content}
        if finish_reason != "stop":
            return parse_partial(self.fmt, text, **kw), "length", False
        try:
            turn = parse(self.fmt, text, **kw)
        except FormatParseError:
            if not self.request.sampling.stop:
                raise
            return parse_partial(self.fmt, text, **kw), "stop", True
        return turn, "tool_calls" if turn.tool_calls else "stop", False

    def report(self, turn: ParsedTurn, finish: Finish, **extra: Any) -> dict[str, Any]:
        """What was enforced and what the post-checks found (the response's `kaname`)."""
        return {"format": self.fmt.name, "strict_level": self.request.strict_level,
                "not_enforced": self.not_enforced,
                "guards": asdict(self.guards) if self.guards is not None else None,
                "content_valid": _content_valid(self.content_check, turn, finish),
                "tool_calls_valid": self.call_verdicts(turn),
                "ignored": [asdict(i) for i in self.ignored], **extra}


def resolve_reasoning(fmt: ChatFormat, req: TurnRequest,
                      default: Literal["on", "off", "required"] | None
                      ) -> tuple[ReasoningMode, list[Ignored]]:
    """The turn's reasoning mode: the request's ask over the server's default. An ask the
    model cannot honour (an effort to a model without reasoning, "none" to a model whose
    prompt always opens its reasoning) is served as the model can and reported: agents send
    an effort by default, whatever the model."""
    server: ReasoningMode = (default or "on") if fmt.reasoning else "off"
    asked = req.reasoning_asked
    if asked is None:
        return server, []
    if asked.mode == "off" and fmt.reasoning is not None \
            and fmt.reasoning.opened_by_prompt and not fmt.reasoning.off:
        return server, [Ignored(asked.pointer, f"format {fmt.name} always reasons (its "
                                               "prompt opens the reasoning block)")]
    if asked.mode != "off" and server == "off":
        why = f"format {fmt.name} has no reasoning block" if not fmt.reasoning \
            else "this server runs with --reasoning off"
        return "off", [Ignored(asked.pointer, f"served without reasoning: {why}")]
    return asked.mode, []


def prepare(fmt: ChatFormat, req: TurnRequest, tokenizer: llg.LLTokenizer,
            compiler: GrammarCompiler | None = None, *, chat_template: str | None = None,
            reasoning_default: Literal["on", "off", "required"] | None = None,
            strict_default: StrictLevel = "full", reasoning: ReasoningMode | None = None
            ) -> PreparedTurn:
    """Render the prompt and build the grammar of `req`; ConstraintError (a 400 naming the
    field the request gave) for what cannot be enforced. `chat_template`: the model's own
    Jinja template renders the prompt instead of the spec. `reasoning`: the mode, as a Python
    caller decides it (else resolved from the request's ask and `reasoning_default`)."""
    ignored: list[Ignored] = []
    if reasoning is None:
        reasoning, ignored = resolve_reasoning(fmt, req, reasoning_default)
    guards = compiler.guards if compiler is not None else Guards()
    if req.guards:
        guards = dataclasses.replace(guards, **req.guards)
    messages = template_messages(req.messages)
    if not messages:
        raise ConstraintError("give at least one message", pointer=req.origins.messages)
    if chat_template is not None and req.tools and not template_shows_tools(chat_template):
        # a template without tools (SmolLM2's ChatML) would hide them from the model
        ignored = [*ignored, Ignored(req.origins.tools, f"the model's chat template shows no "
                                     f"tools: this prompt is rendered by format {fmt.name}")]
        chat_template = None
    if chat_template is not None:
        prompt = render_template(chat_template, messages, req.tools, bos_token=fmt.bos,
                                 eos_token=fmt.end_of_turn, enable_thinking=reasoning != "off")
        opening = opened_by(fmt, prompt)
    else:
        # where the format's prompt opens the reasoning block, the prompt decides the mode
        opening = turn_opening(fmt, messages, reasoning)
        prompt = render_prompt(fmt, messages, req.tools, reasoning=reasoning)
    req = dataclasses.replace(req, reasoning=reasoning, opening=opening,
                              strict_level=req.strict_level_asked or strict_default)
    content_check, content_skipped = _check_content(compiler, req)
    checks = check_tools(fmt, req, compiler)
    lark = build_grammar(fmt, req, tokenizer, guards=guards, checks=checks)
    return PreparedTurn(fmt, req, prompt, lark, checks, content_check, guards,
                        (*req.ignored, *ignored), content_skipped)


def _check_content(compiler: GrammarCompiler | None, req: TurnRequest
                   ) -> tuple[CompiledConstraint | None, list[dict[str, str]]]:
    """Compile a content schema alone first, so errors point into the request, and learn what
    a lenient (strict not true) schema leaves unenforced."""
    content = req.content
    if compiler is None or not isinstance(content, JsonSchema):
        return None, []
    at = req.origins.schema
    try:
        compiled = compiler.compile(content)
    except ConstraintError as e:
        raise e.at(at) from e
    return compiled, [{**asdict(n), "pointer": f"{at}{n.pointer}"}
                      for n in compiled.not_enforced]


def _content_valid(check: CompiledConstraint | None, turn: ParsedTurn, finish: str
                   ) -> bool | None:
    """The jsonschema post-check of JSON content (the whole schema, also what a lenient
    grammar skipped); None when there is no schema or no content."""
    if check is None or turn.content is None:
        return None
    return finish == "stop" and bool(check.validate(turn.content))


def opened_by(fmt: ChatFormat, prompt: str) -> str:
    """What a rendered prompt already wrote of the turn: the reasoning block's opening, or
    the format's no-reasoning marker, where its generation prompt ends with one (a Jinja
    template such as Qwen3-2507 Thinking's ends with "<think>\\n")."""
    r = fmt.reasoning
    if r is None:
        return ""
    for marker in (r.begin, r.off):
        if marker and prompt.endswith(marker):
            return marker
    return ""


def new_call_id_prefix(stem: str = "call_") -> str:
    """Tool-call ids unique across requests: call_<12 hex>_<index> (Anthropic's API: toolu_)."""
    return f"{stem}{uuid.uuid4().hex[:12]}_"


def prepare_turn(fmt: ChatFormat, messages: Sequence[Mapping[str, Any]],
                 tokenizer: llg.LLTokenizer, compiler: GrammarCompiler | None = None, *,
                 tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str = "auto",
                 allowed_tools: Sequence[str] | None = None,
                 parallel_tool_calls: bool = True,
                 response_format: Mapping[str, Any] | None = None,
                 reasoning: ReasoningMode | None = "off",
                 max_reasoning_tokens: int | None = None, strict_level: StrictLevel = "full",
                 chat_template: str | None = None) -> PreparedTurn:
    """`prepare` for a turn given in chat completions' shape (messages, tools and
    response_format as OpenAI's chat API writes them), read by that API's edge.
    `reasoning` None: the format's own mode (the model may reason where it can)."""
    from .edges.chat import turn_from_chat  # the edge sits above the pipeline it feeds

    body: dict[str, Any] = {"model": "default", "messages": list(messages),
                            "tool_choice": _choice_body(tool_choice, allowed_tools),
                            "parallel_tool_calls": parallel_tool_calls,
                            "max_reasoning_tokens": max_reasoning_tokens,
                            "strict_level": strict_level}
    if tools:
        body["tools"] = list(tools)
    if response_format is not None:
        body["response_format"] = response_format
    if reasoning is None:  # what a server does where a request does not say
        return prepare(fmt, turn_from_chat(body), tokenizer, compiler,
                       chat_template=chat_template)
    return prepare(fmt, turn_from_chat(body), tokenizer, compiler,
                   chat_template=chat_template, reasoning=reasoning)


def _choice_body(choice: str, allowed: Sequence[str] | None) -> Any:
    if allowed is not None:
        return {"type": "allowed_tools", "allowed_tools": {
            "mode": choice, "tools": [{"type": "function", "function": {"name": n}}
                                      for n in allowed]}}
    if choice in ("none", "auto", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def chat(engine: Engine, fmt: ChatFormat, messages: Sequence[Mapping[str, Any]], *,
         tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str = "auto",
         parallel_tool_calls: bool = True, response_format: Mapping[str, Any] | None = None,
         reasoning: ReasoningMode | None = None, max_reasoning_tokens: int | None = None,
         strict_level: StrictLevel = "full", max_tokens: int = 512, temperature: float = 0.0,
         seed: int | None = None, chat_template: str | None = None) -> TurnResult:
    """One assistant turn on the engine, through the same pipeline as the server. Raises
    ConstraintError (a 400) for requests that cannot be enforced. `reasoning` None: the
    format's own mode, as the server's where a request does not say."""
    turn = prepare_turn(fmt, messages, engine.runtime.tokenizer, engine.compiler, tools=tools,
                        tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                        response_format=response_format, reasoning=reasoning,
                        max_reasoning_tokens=max_reasoning_tokens, strict_level=strict_level,
                        chat_template=chat_template)
    result = engine.generate(turn.prompt_without_bos, Lark(turn.grammar), max_tokens=max_tokens,
                             temperature=temperature, seed=seed)
    parsed, finish, _ = turn.parse(result.text, result.finish_reason, new_call_id_prefix())
    grammar_hash = result.enforced.grammar_hash if result.enforced else None
    return TurnResult(parsed, finish, result, turn.report(
        parsed, finish, enforced=True, grammar_hash=grammar_hash), result.stop_sequence,
        result.stop_sequence is not None)
