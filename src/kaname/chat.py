"""A whole chat turn under one grammar: render the prompt, constrain, parse, answer in
OpenAI's assistant-message shape.

`prepare_turn` and `finish_turn` are the two halves around generation; the server uses them
with its own (streamed, local or upstream) generation, `chat` with the engine's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import llguidance as llg

from .engine import Enforced, Engine
from .formats import (
    ChatFormat,
    ParsedTurn,
    Tool,
    TurnRequest,
    build_grammar,
    parse,
    parse_partial,
    render_prompt,
    tools_from_openai,
)
from .formats.render import turn_opening
from .formats.request import ReasoningMode, StrictLevel
from .formats.template import render_template
from .formats.tool_checks import ToolCheck, call_verdicts, check_tools, not_enforced
from .grammar import GrammarCompiler, Guards, Lark


@dataclass
class PreparedTurn:
    """What generation needs: the prompt (as the format renders it, BOS included) and the Lark
    grammar of the whole assistant turn."""

    fmt: ChatFormat
    request: TurnRequest
    prompt: str
    grammar: str
    tools: dict[str, ToolCheck] = field(default_factory=dict)  # by name: what is enforced

    @property
    def not_enforced(self) -> list[dict[str, str]]:
        """Tool-schema keywords the grammar skips (non-strict tools), pointers into the
        request; each call is post-checked instead (`call_verdicts`)."""
        return not_enforced(self.tools)

    def call_verdicts(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The post-check of each tool call in an assistant message."""
        return call_verdicts(self.tools, message.get("tool_calls") or [])

    @property
    def opening(self) -> str:
        """What the prompt wrote of the turn: the parser reads it before the generated text."""
        return self.request.opening_in(self.fmt)

    @property
    def prompt_without_bos(self) -> str:
        """Tokenizers that add the model's BOS themselves take the prompt without it."""
        bos = self.fmt.bos
        return self.prompt.removeprefix(bos) if bos else self.prompt


def prepare_turn(fmt: ChatFormat, messages: Sequence[Mapping[str, Any]],
                 tokenizer: llg.LLTokenizer, compiler: GrammarCompiler | None = None, *,
                 tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str = "auto",
                 allowed_tools: Sequence[str] | None = None,
                 parallel_tool_calls: bool = True,
                 response_format: Mapping[str, Any] | None = None,
                 reasoning: ReasoningMode = "off", max_reasoning_tokens: int | None = None,
                 strict_level: StrictLevel = "full",
                 chat_template: str | None = None,
                 guards: Guards | None = None) -> PreparedTurn:
    """Render and build the grammar; ConstraintError (a 400) for what cannot be enforced.
    `chat_template`: the model's own Jinja template renders the prompt instead of the spec.
    `guards`: this turn's (default: the compiler's)."""
    parsed_tools = tools_from_openai(tools)
    if chat_template is not None:
        prompt = render_template(chat_template, messages, parsed_tools, bos_token=fmt.bos,
                                 eos_token=fmt.end_of_turn,
                                 enable_thinking=reasoning != "off")
        opening = opened_by(fmt, prompt)
    else:
        # where the format's prompt opens the reasoning block, the prompt decides the mode
        opening = turn_opening(fmt, messages, reasoning)
        prompt = render_prompt(fmt, messages, parsed_tools, reasoning=reasoning)
    req = TurnRequest(tools=parsed_tools, tool_choice=tool_choice,
                      allowed_tools=None if allowed_tools is None else tuple(allowed_tools),
                      parallel_tool_calls=parallel_tool_calls, response_format=response_format,
                      reasoning=reasoning, max_reasoning_tokens=max_reasoning_tokens,
                      strict_level=strict_level, opening=opening)
    if guards is None and compiler is not None:
        guards = compiler.guards
    checks = check_tools(fmt, req, compiler)
    lark = build_grammar(fmt, req, tokenizer, guards=guards, checks=checks)
    return PreparedTurn(fmt, req, prompt, lark, checks)


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


def finish_turn(fmt: ChatFormat, text: str, finish_reason: str, *, id_prefix: str,
                tools: Sequence[Tool] = ()) -> tuple[ParsedTurn, str]:
    """Parse the turn's text (the prompt's opening, TurnRequest.opening, and what was
    generated); the OpenAI finish_reason (stop | tool_calls | length). `tools` are the
    request's (per-key formats need them to type argument values)."""
    if finish_reason == "stop":
        turn = parse(fmt, text, id_prefix=id_prefix, tools=tools)
        return turn, "tool_calls" if turn.tool_calls else "stop"
    return parse_partial(fmt, text, id_prefix=id_prefix, tools=tools), "length"


@dataclass
class ChatResult:
    message: dict[str, Any]
    finish_reason: str  # "stop" | "tool_calls" | "length"
    usage: dict[str, int]
    enforced: Enforced
    raw_text: str
    not_enforced: list[dict[str, str]] = field(default_factory=list)
    tool_calls_valid: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "finish_reason": self.finish_reason,
                "usage": self.usage}


def chat(engine: Engine, fmt: ChatFormat, messages: Sequence[Mapping[str, Any]], *,
         tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str = "auto",
         parallel_tool_calls: bool = True, response_format: Mapping[str, Any] | None = None,
         reasoning: ReasoningMode = "off", max_reasoning_tokens: int | None = None,
         strict_level: StrictLevel = "full", max_tokens: int = 512, temperature: float = 0.0,
         seed: int | None = None, chat_template: str | None = None) -> ChatResult:
    """One assistant turn. Raises ConstraintError (a 400) for requests that cannot be
    enforced."""
    turn = prepare_turn(fmt, messages, engine.runtime.tokenizer, engine.compiler, tools=tools,
                        tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                        response_format=response_format, reasoning=reasoning,
                        max_reasoning_tokens=max_reasoning_tokens, strict_level=strict_level,
                        chat_template=chat_template)
    result = engine.generate(turn.prompt_without_bos, Lark(turn.grammar), max_tokens=max_tokens,
                             temperature=temperature, seed=seed)
    parsed, finish = finish_turn(fmt, turn.opening + result.text, result.finish_reason,
                                 id_prefix=new_call_id_prefix(), tools=turn.request.tools)
    usage = {"prompt_tokens": result.usage.prompt_tokens,
             "completion_tokens": result.usage.completion_tokens,
             "total_tokens": result.usage.prompt_tokens + result.usage.completion_tokens}
    message = parsed.to_message()
    return ChatResult(message, finish, usage, result.enforced, result.text, turn.not_enforced,
                      turn.call_verdicts(message))
