"""Model families as data: one `ChatFormat` each yields prompt, grammar and parser."""

from __future__ import annotations

from ..errors import ConstraintError, FormatParseError
from .deepseek_v31 import DEEPSEEK_V31
from .gemma3 import GEMMA3
from .glm45 import GLM45
from .glm47 import GLM47
from .gpt_oss import GPT_OSS
from .grammar import build_grammar
from .kimi_k2 import KIMI_K2
from .llama31 import LLAMA31
from .mistral import MISTRAL
from .parser import (
    ParsedTurn,
    StreamParser,
    ToolCall,
    merge_deltas,
    parse,
    parse_partial,
)
from .plamo3 import PLAMO3
from .qwen3 import HERMES, QWEN3, QWEN3_THINKING
from .qwen3_coder import QWEN3_CODER, QWEN35
from .render import render_assistant, render_prompt
from .request import Tool, TurnRequest, tools_from_openai
from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax
from .template import chat_template_from_gguf, render_template

FORMATS: dict[str, ChatFormat] = {f.name: f for f in (
    GEMMA3, QWEN3, QWEN3_THINKING, HERMES, QWEN3_CODER, QWEN35, KIMI_K2, PLAMO3, DEEPSEEK_V31,
    GLM45, GLM47, LLAMA31, MISTRAL, GPT_OSS)}
_ALIASES = {a: f for f in FORMATS.values() for a in f.aliases}


def get_format(name: str) -> ChatFormat:
    fmt = FORMATS.get(name) or _ALIASES.get(name)
    if fmt is None:
        raise ConstraintError(f"unknown chat format {name!r}; known: {', '.join(FORMATS)}")
    return fmt


__all__ = [
    "FORMATS", "ChatFormat", "FormatParseError", "ParsedTurn", "ReasoningSyntax", "StreamParser",
    "Tool", "ToolCall", "ToolCallSyntax", "TurnRequest", "build_grammar",
    "chat_template_from_gguf", "get_format", "merge_deltas", "parse", "parse_partial",
    "render_assistant", "render_prompt", "render_template", "tools_from_openai",
]
