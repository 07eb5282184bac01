"""A model family's chat format, described once as data.

The prompt renderer (`render.py`), the grammar builder (`grammar.py`) and the parser
(`parser.py`) are all derived from one `ChatFormat`, so whatever the grammar allows, the parser
parses. Marker strings are written as the model sees them; where a marker is a special token of
the vocabulary, the grammar uses the token, not its spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .request import Tool


@dataclass(frozen=True)
class ReasoningSyntax:
    """A reasoning block: `begin` + free text + `end`, before any content or tool call.

    `pad` is written between the reasoning text and `end` when rendering and stripped when
    parsing (Qwen3 writes "<think>\n" + text + "\n" + "</think>\n\n").
    `off` is what a turn without reasoning starts with where the model marks that itself
    (DeepSeek V3.1 "</think>", GLM-4.5 "\n<think></think>\n"): the grammar allows it, optionally,
    wherever no reasoning block is written, the parser skips it, and history turns whose
    reasoning is not shown are rendered with it.
    """

    begin: str
    end: str
    pad: str = ""
    off: str = ""
    # The generation prompt writes the turn's opening itself (Qwen3-2507 Thinking ends it with
    # "<think>\n", DeepSeek V3.1 and GLM-4.7 with "<think>" or "</think>"): `begin` where the
    # turn reasons,
    # `off` where it does not; the model writes from there on. `prompt_default` is which of the
    # two a turn that may reason ("on") gets: the template's default.
    opened_by_prompt: bool = False
    prompt_default: Literal["open", "closed"] = "open"
    # The generation prompt writes `off` for a turn that does not reason, and nothing for one
    # that does: the model opens the block itself (Qwen3's enable_thinking=False).
    closed_by_prompt: bool = False
    # Which history turns without reasoning shown start with `off`: all of them ("always"),
    # those whose reasoning would be kept ("kept": Qwen3.5 writes an empty block after the
    # last user message, nothing before it), or none ("never": Qwen3).
    off_in_history: Literal["always", "kept", "never"] = "always"


@dataclass(frozen=True)
class ToolCallSyntax:
    """How the model writes tool calls.

    layout "json": call_begin + {"<name_key>": NAME, "<args_key>": ARGS} + call_end
    layout "name_args": call_begin + name_prefix + NAME + index_sep + INDEX? + args_begin + ARGS
        + call_end   (INDEX only when `index_sep` is set; the call id is then the text from
        name_prefix to INDEX, e.g. Kimi's "functions.get_weather:0", rendered verbatim)
    layout "per_key": call_begin + name_prefix + NAME + args_begin
        + (key_begin KEY key_end value_begin VALUE value_end)* + call_end, one pair per argument;
        a string value is written raw, any other value as JSON (GLM-4.5). The parser rebuilds
        the arguments JSON text. Without args_begin (GLM-4.7) the name ends at the first key
        or at call_end.
    Calls sit between section_begin and section_end, separated by `separator`.
    `end_of_turn` ends a turn with calls where that differs from the format's end of turn
    (GLM-4.5 "<|observation|>", harmony "<|call|>"). `parallel=False`: the format carries at
    most one call per turn. `content_before_calls=False`: a turn has content or calls, not both.

    `headers`: other spellings of a call's header the model may write, as (begin, end) pairs
    standing for `call_begin` and `args_begin` around name_prefix + NAME (harmony: the recipient
    after the channel, `<|constrain|>json` for "json"). The grammar accepts and the parser reads
    them all; history is rendered with call_begin / args_begin. Layout "name_args" only, without
    a section or content before calls.
    `preamble_begin` + free text + `preamble_end`: a message to the user the model may write
    before its calls (harmony's commentary preamble), at most one per turn, under any
    tool_choice that allows calls and only with free-text content (JSON content must follow
    response_format); parsed as the turn's content, and rendered so in history.
    Only where `content_before_calls=False`: the preamble is then the only content next to calls.
    """

    layout: Literal["json", "name_args", "per_key"]
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
    key_begin: str = ""
    key_end: str = ""
    value_begin: str = ""
    value_end: str = ""
    end_of_turn: str = ""
    parallel: bool = True
    content_before_calls: bool = True
    # written between non-empty content and the first call (Qwen3: "\n"); not content
    after_content: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    # per-key values of a boolean schema may also be spelled "True" / "False" (Qwen3-Coder's
    # template writes them through Jinja's `string`); read as JSON's true / false
    python_booleans: bool = False
    preamble_begin: str = ""
    preamble_end: str = ""

    def __post_init__(self) -> None:
        if self.headers and (self.layout != "name_args" or self.section_begin
                             or self.content_before_calls):
            raise ValueError("other call headers need layout 'name_args', no section and no "
                             "content before calls")
        if self.preamble_begin and (self.content_before_calls or not self.preamble_end):
            raise ValueError("a preamble needs an end marker and no content before calls")

    @property
    def opener(self) -> str:
        """The text that starts the tool-call part of a turn ("" for Llama's bare JSON)."""
        return self.section_begin or self.call_begin

    @property
    def all_headers(self) -> tuple[tuple[str, str], ...]:
        """(begin, end) of every header spelling, the rendered one first."""
        return tuple(dict.fromkeys(((self.call_begin, self.args_begin), *self.headers)))

    @property
    def openers(self) -> tuple[str, ...]:
        """Every text the tool-call part of a turn may start with, the rendered one first."""
        return tuple(dict.fromkeys((self.opener, *(b for b, _ in self.headers))))


ToolsRenderer = Callable[[Sequence["Tool"]], str]


@dataclass(frozen=True)
class ChatFormat:
    """Everything kaname needs to know about one model family's chat turns.

    Role templates take `{content}`; `tools_template` takes `{tools}` (the tool definitions,
    serialised as `tools_json` says, or one `tool_template` each with `{name}`, `{description}`,
    `{parameters}` and `{json}` / `{json_indent4}` of the whole tool, or by `tools_renderer`) and
    is placed where `tools_position` says. Consecutive tool results share one `tool_open` …
    `tool_close` around a `tool_result` each (`{content}`, `{name}`, `{tool_call_id}`).
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
    tool_template: str = ""
    tools_renderer: ToolsRenderer | None = None
    # "system": appended to the first system turn (created if none; `tools_system` is then its
    # template, when set); "own_system": a turn of its own before everything; "first_user":
    # prepended to the first user message's text; "before_first_user": written just before
    # the first user turn; "system_start": the first system turn's text follows the tools
    # text after a blank line (Qwen3.5).
    tools_position: Literal["system", "own_system", "first_user", "before_first_user",
                            "system_start", "none"] = "none"
    tools_system: str = ""
    reasoning: ReasoningSyntax | None = None
    tool_calls: ToolCallSyntax | None = None
    # written before content (free text or JSON) and stripped when parsing (harmony's
    # "<|channel|>final<|message|>"); json_prefix/json_suffix wrap JSON content only.
    content_begin: str = ""
    json_prefix: str = ""
    json_suffix: str = ""
    after_turn: str = "\n"
    # Other markers the model may end a turn with (Llama 3.1 "<|eom_id|>"): accepted by the
    # grammar and the parser, never rendered.
    end_of_turn_alt: tuple[str, ...] = ()
    # What ends an assistant turn in the history, where the template writes something other
    # than the marker the model emitted (GLM-4.5: nothing, the next turn's marker ends it;
    # harmony: "<|end|>"). None: the emitted marker.
    history_end: str | None = None
    # "after_last_user": reasoning of assistant turns before the last user message is
    # dropped when rendering history (Qwen3); "drop": never rendered (DeepSeek V3.1).
    reasoning_history: Literal["keep", "after_last_user", "after_last_answer", "drop"] = "keep"
    # Inserted as the first system turn when the conversation has none (Kimi K2).
    default_system: str = ""
    # Written at the start of the first system turn's text, the turn being created if the
    # conversation has none (Llama 3.1's dates); `tools_preamble` goes before it when tools
    # are given ("Environment: ipython\n").
    system_preamble: str = ""
    tools_preamble: str = ""
    # Written right after `bos`, always (harmony's system message): "{date}" is today's date,
    # "{tools_preamble}" the tools preamble when tools are given (without a system_preamble).
    preamble: str = ""
    # Gemma-style: the system text opens the first user turn instead of a turn of its own.
    system_in_first_user: bool = False
    # DeepSeek V3.1: after tool results the model goes on with its turn: no assistant prefix,
    # no reasoning marker and no generation prompt follow them.
    continue_after_tool: bool = False
    # Gemma's template trims user and assistant message text (`| trim`)
    trim_content: bool = False
    aliases: tuple[str, ...] = field(default_factory=tuple)

    def opening(self, reasoning: str) -> str:
        """What the generation prompt writes of a turn in reasoning mode `reasoning` (off / on
        / required) before the model starts: "" unless the format's prompt opens the
        reasoning block. ConstraintError where the mode cannot be had."""
        r = self.reasoning
        if r is not None and r.closed_by_prompt and reasoning == "off":
            return r.off
        if r is None or not r.opened_by_prompt:
            return ""
        if reasoning == "required" or (reasoning == "on" and r.prompt_default == "open"):
            return r.begin
        if not r.off:
            from ..errors import ConstraintError

            raise ConstraintError(f"format {self.name} always reasons (its prompt opens the "
                                  "reasoning block): reasoning cannot be switched off",
                                  pointer="/reasoning_effort")
        return r.off

    @property
    def marker_cores(self) -> tuple[str, ...]:
        """The reasoning and tool-call markers without their whitespace: text that content
        never holds (the grammar keeps it out; the parser refuses content that does, rather
        than return a call or a reasoning block as content)."""
        out: list[str] = []
        if self.reasoning is not None:
            out += [self.reasoning.begin, self.reasoning.end, self.reasoning.off]
        if self.tool_calls is not None:
            s = self.tool_calls
            out += [s.call_begin, s.call_end, s.section_begin, s.section_end]
            if s.layout == "per_key":  # Qwen3-Coder's "<function=" opens a call by itself
                out.append(s.name_prefix)
        return tuple(dict.fromkeys(c for m in out if (c := m.strip())))

    @property
    def calls_end(self) -> str:
        """The end-of-turn marker after tool calls."""
        return (self.tool_calls.end_of_turn if self.tool_calls else "") or self.end_of_turn

    @property
    def end_markers(self) -> tuple[str, ...]:
        """Every marker a turn may end with."""
        return tuple(dict.fromkeys((self.end_of_turn, self.calls_end, *self.end_of_turn_alt)))
