"""A model family's chat format, described once as data.

The prompt renderer (`render.py`), the grammar builder (`grammar.py`) and the parser
(`parser.py`) are all derived from one `ChatFormat`, so whatever the grammar allows, the parser
parses. Marker strings are written as the model sees them; where a marker is a special token of
the vocabulary, the grammar uses the token, not its spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ReasoningSyntax:
    """A reasoning block: `begin` + free text + `end`, before any content or tool call.

    `pad` is written between the reasoning text and `end` when rendering and stripped when
    parsing (Qwen3 writes "<think>\n" + text + "\n" + "</think>\n\n").
    """

    begin: str
    end: str
    pad: str = ""


@dataclass(frozen=True)
class ToolCallSyntax:
    """How the model writes tool calls.

    layout "json": call_begin + {"<name_key>": NAME, "<args_key>": ARGS} + call_end
    layout "name_args": call_begin + name_prefix + NAME + index_sep + INDEX? + args_begin + ARGS
        + call_end   (INDEX only when `index_sep` is set; the call id is then the text from
        name_prefix to INDEX, e.g. Kimi's "functions.get_weather:0", rendered verbatim)
    Calls sit between section_begin and section_end, separated by `separator`.
    """

    layout: Literal["json", "name_args"]
    call_begin: str
    call_end: str
    section_begin: str = ""
    section_end: str = ""
    separator: str = ""
    name_key: str = "name"
    args_key: str = "arguments"
    name_prefix: str = ""
    index_sep: str = ""
    args_begin: str = ""
    # written between non-empty content and the first call (Qwen3: "\n"); not content
    after_content: str = ""

    @property
    def opener(self) -> str:
        """The text that starts the tool-call part of a turn."""
        return self.section_begin or self.call_begin


@dataclass(frozen=True)
class ChatFormat:
    """Everything kaname needs to know about one model family's chat turns.

    Role templates take `{content}`; `tools_template` takes `{tools}` (the tool definitions,
    serialised as `tools_json` says) and is placed where `tools_position` says. Consecutive tool
    results share one `tool_open` … `tool_close` around a `tool_result` each (`{content}`,
    `{name}`, `{tool_call_id}`).
    """

    name: str
    description: str
    source: str
    special_tokens: tuple[str, ...]
    bos: str
    system: str
    user: str
    assistant_prefix: str
    end_of_turn: str
    tool_result: str
    generation_prompt: str
    tool_open: str = ""
    tool_close: str = ""
    tools_template: str = ""
    tools_json: Literal["lines", "compact_list", "list"] = "lines"
    tools_position: Literal["system", "own_system", "none"] = "none"
    reasoning: ReasoningSyntax | None = None
    tool_calls: ToolCallSyntax | None = None
    json_prefix: str = ""
    json_suffix: str = ""
    after_turn: str = "\n"
    # "after_last_user": reasoning of assistant turns before the last user message is
    # dropped when rendering history (Qwen3).
    reasoning_history: Literal["keep", "after_last_user"] = "keep"
    # Inserted as the first system turn when the conversation has none (Kimi K2).
    default_system: str = ""
    # Gemma-style: the system text opens the first user turn instead of a turn of its own.
    system_in_first_user: bool = False
    aliases: tuple[str, ...] = field(default_factory=tuple)
