"""A whole chat turn under one grammar: render the prompt, constrain, parse, answer in
OpenAI's assistant-message shape."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engine import Enforced, Engine
from .formats import (
    ChatFormat,
    TurnRequest,
    build_grammar,
    parse,
    parse_partial,
    render_prompt,
    tools_from_openai,
)
from .formats.request import ReasoningMode, StrictLevel
from .grammar import Lark


@dataclass
class ChatResult:
    message: dict[str, Any]
    finish_reason: str  # "stop" | "tool_calls" | "length"
    usage: dict[str, int]
    enforced: Enforced
    raw_text: str

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "finish_reason": self.finish_reason,
                "usage": self.usage}


def chat(engine: Engine, fmt: ChatFormat, messages: Sequence[Mapping[str, Any]], *,
         tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str = "auto",
         parallel_tool_calls: bool = True, response_format: Mapping[str, Any] | None = None,
         reasoning: ReasoningMode = "off", max_reasoning_tokens: int | None = None,
         strict_level: StrictLevel = "full", max_tokens: int = 512, temperature: float = 0.0,
         seed: int | None = None) -> ChatResult:
    """One assistant turn. Raises ConstraintError (a 400) for requests that cannot be
    enforced."""
    req = TurnRequest(tools=tools_from_openai(tools), tool_choice=tool_choice,
                      parallel_tool_calls=parallel_tool_calls, response_format=response_format,
                      reasoning=reasoning, max_reasoning_tokens=max_reasoning_tokens,
                      strict_level=strict_level)
    tokenizer = engine.runtime.tokenizer
    lark = build_grammar(fmt, req, tokenizer, guards=engine.compiler.guards,
                         compiler=engine.compiler)
    prompt = render_prompt(fmt, messages, req.tools)
    # The runtime's tokenizer adds the model's BOS itself, as for any raw prompt.
    prompt = prompt.removeprefix(fmt.bos) if fmt.bos else prompt
    result = engine.generate(prompt, Lark(lark), max_tokens=max_tokens, temperature=temperature,
                             seed=seed)
    id_prefix = f"call_{uuid.uuid4().hex[:12]}_"
    if result.finish_reason == "stop":
        turn = parse(fmt, result.text, id_prefix=id_prefix)
        finish = "tool_calls" if turn.tool_calls else "stop"
    else:
        turn = parse_partial(fmt, result.text, id_prefix=id_prefix)
        finish = "length"
    usage = {"prompt_tokens": result.usage.prompt_tokens,
             "completion_tokens": result.usage.completion_tokens,
             "total_tokens": result.usage.prompt_tokens + result.usage.completion_tokens}
    return ChatResult(turn.to_message(), finish, usage, result.enforced, result.text)
