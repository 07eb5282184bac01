"""Parsing an assistant turn with the same spec the grammar came from.

`parse(fmt, text)` splits a complete turn into reasoning, content and tool calls.
`StreamParser` takes text chunks and yields OpenAI-style deltas; it re-parses the text so far
and emits only what can no longer change (text that could still turn into a marker is held
back), so the stream always adds up to the non-streamed result.

A turn that does not follow the format raises `FormatParseError`: never silently plain content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import KanameError
from .spec import ChatFormat


class FormatParseError(KanameError):
    """The text is not a turn of this format (possible only when the grammar was off)."""


@dataclass
class ToolCall:
    index: int
    name: str
    arguments: str  # the JSON text as the model wrote it
    id: str = ""

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedTurn:
    reasoning_content: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            msg["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


def _held(text: str, markers: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


class _Scan:
    """One pass over (possibly partial) turn text. With partial=True, stops cleanly where the
    text runs out and records how far each field is final."""

    def __init__(self, fmt: ChatFormat, text: str, partial: bool, id_prefix: str):
        self.fmt, self.text, self.partial, self.id_prefix = fmt, text, partial, id_prefix
        self.pos = 0
        self.turn = ParsedTurn()
        self.open_args: str | None = None  # arguments of a call still being written

    def fail(self, what: str) -> FormatParseError:
        return FormatParseError(f"{self.fmt.name}: {what} at offset {self.pos}: "
                                f"{self.text[self.pos:self.pos + 40]!r}")

    def expect(self, marker: str) -> bool:
        """Consume `marker`; False when partial text ends inside it."""
        rest = self.text[self.pos:]
        if rest.startswith(marker):
            self.pos += len(marker)
            return True
        if self.partial and marker.startswith(rest):
            self.pos = len(self.text)
            return False
        raise self.fail(f"expected {marker!r}")

    def run(self) -> ParsedTurn:
        f = self.fmt
        eot = f.end_of_turn
        if f.reasoning and self.text.startswith(f.reasoning.begin):
            start = len(f.reasoning.begin)
            end = self.text.find(f.reasoning.end, start)
            pad = f.reasoning.pad
            if end < 0:
                if not self.partial:
                    raise self.fail("reasoning block never ends")
                body = self.text[start:]
                # hold back what may still become the pad + end marker
                keep = len(body) - max(_held(body, [f.reasoning.end]) + len(pad),
                                       _held(body, [pad + f.reasoning.end]))
                self.turn.reasoning_content = body[:max(0, keep)]
                self.pos = len(self.text)
                return self.turn
            body = self.text[start:end]
            body = body[:-len(pad)] if pad and body.endswith(pad) else body
            self.turn.reasoning_content = body or None  # an empty block says nothing
            self.pos = end + len(f.reasoning.end)
        elif self.partial and f.reasoning and f.reasoning.begin.startswith(self.text):
            return self.turn  # cannot tell yet
        opener = f.tool_calls.opener if f.tool_calls else None
        glue = f.tool_calls.after_content if f.tool_calls else ""
        markers = [m for m in (opener and glue + opener, opener, eot) if m]
        rest = self.text[self.pos:]
        cut = min((i for m in markers if (i := rest.find(m)) >= 0), default=-1)
        if cut < 0:
            if not self.partial:
                raise self.fail("turn does not end with the end-of-turn marker")
            content = self._content(rest[:len(rest) - _held(rest, markers)], final=False)
            self.turn.content = content or None
            self.pos = len(self.text)
            return self.turn
        content = rest[:cut]
        self.pos += cut
        if glue and opener and rest.startswith(glue + opener, cut):
            self.pos += len(glue)  # the glue between content and calls is not content
        self.turn.content = self._content(content) if content else None
        if opener and self.text.startswith(opener, self.pos):
            self._calls()
        if self.pos < len(self.text) or not self.partial:
            self.expect(eot)
            if self.text[self.pos:].strip():
                raise self.fail("text after the end of turn")
        return self.turn

    def _content(self, text: str, final: bool = True) -> str:
        """Content without the format's JSON wrapper; while partial, the wrapper's closing
        text is held back so the emitted prefix never has to be taken back."""
        f = self.fmt
        if not f.json_prefix:
            return text
        if not final:
            if f.json_prefix.startswith(text):
                return ""
            if text.startswith(f.json_prefix):
                body = text[len(f.json_prefix):]
                return body[:max(0, len(body) - len(f.json_suffix))]
            return text
        if text.startswith(f.json_prefix) and text.endswith(f.json_suffix):
            return text[len(f.json_prefix):len(text) - len(f.json_suffix)]
        return text

    def _calls(self) -> None:
        s = self.fmt.tool_calls
        assert s is not None
        if s.section_begin and not self.expect(s.section_begin):
            return
        index = 0
        while True:
            if not self.expect(s.call_begin) or not self._call(index) \
                    or not self.expect(s.call_end):
                return
            index += 1
            nxt = s.separator + s.call_begin
            rest = self.text[self.pos:]
            if rest.startswith(nxt):
                self.pos += len(s.separator)
                continue
            if self.partial and nxt.startswith(rest):
                self.pos = len(self.text)  # another call may still follow: undecided
                return
            break
        if s.section_end:
            self.expect(s.section_end)

    def _call(self, index: int) -> bool:
        s = self.fmt.tool_calls
        assert s is not None
        call_id = f"{self.id_prefix}{index}"
        if s.layout == "json":
            value, ok = self._json()
            if not ok:
                return False
            if not isinstance(value, dict) or not isinstance(value.get(s.name_key), str) \
                    or s.args_key not in value:
                raise self.fail("tool call is not {name, arguments}")
            args = json.dumps(value[s.args_key], ensure_ascii=False)
            self.turn.tool_calls.append(ToolCall(index, value[s.name_key], args, call_id))
            return True
        if not self.expect(s.name_prefix):
            return False
        # The header (name, index) is final only once args_begin is seen.
        end = self.text.find(s.args_begin, self.pos) if s.args_begin else -1
        if end < 0:
            if self.partial:
                self.pos = len(self.text)
                return False
            raise self.fail("tool call header never ends")
        name = self.text[self.pos:end]
        if s.index_sep:
            name, sep, idx = name.rpartition(s.index_sep)
            if not sep or not idx.isdigit():
                raise self.fail("tool call index missing")
            call_id = f"{s.name_prefix}{name}{s.index_sep}{idx}"
        self.pos = end
        call = ToolCall(index, name, "", call_id)
        self.turn.tool_calls.append(call)
        if not self.expect(s.args_begin):
            return False
        start = self.pos
        value, ok = self._json()
        call.arguments = self.text[start:self.pos] if ok else self.open_args or ""
        return ok

    def _json(self) -> tuple[Any, bool]:
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            if self.partial:
                self.open_args = self.text[self.pos:]
                self.pos = len(self.text)
                return None, False
            raise self.fail("invalid JSON") from None
        self.pos = end
        return value, True


def parse_partial(fmt: ChatFormat, text: str, *, id_prefix: str = "call_") -> ParsedTurn:
    """What can be read from a turn cut short (finish_reason "length"): nothing is dropped
    except a marker or tool call still being written."""
    return _Scan(fmt, text, True, id_prefix).run()


def parse(fmt: ChatFormat, text: str, *, id_prefix: str = "call_") -> ParsedTurn:
    """Parse a complete assistant turn (end-of-turn marker included or not)."""
    if not text.rstrip().endswith(fmt.end_of_turn):
        text += fmt.end_of_turn
    return _Scan(fmt, text, False, id_prefix).run()


class StreamParser:
    """Feed text chunks, get OpenAI-style deltas; `finish()` closes the turn.

    Deltas: {"reasoning_content": str} | {"content": str} |
    {"tool_calls": [{"index", "id", "type", "function": {"name", "arguments"}}]} (first sight of
    a call) | {"tool_calls": [{"index", "function": {"arguments": fragment}}]}.
    """

    def __init__(self, fmt: ChatFormat, *, id_prefix: str = "call_"):
        self.fmt = fmt
        self.id_prefix = id_prefix
        self.text = ""
        self._reasoning = 0
        self._content = 0
        self._calls: list[int] = []  # argument characters emitted per call

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        self.text += chunk
        return self._diff(_Scan(self.fmt, self.text, True, self.id_prefix).run())

    def finish(self) -> tuple[ParsedTurn, list[dict[str, Any]]]:
        turn = parse(self.fmt, self.text, id_prefix=self.id_prefix)
        return turn, self._diff(turn)

    def _diff(self, turn: ParsedTurn) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if turn.reasoning_content and len(turn.reasoning_content) > self._reasoning:
            out.append({"reasoning_content": turn.reasoning_content[self._reasoning:]})
            self._reasoning = len(turn.reasoning_content)
        if turn.content and len(turn.content) > self._content:
            out.append({"content": turn.content[self._content:]})
            self._content = len(turn.content)
        for call in turn.tool_calls:
            if call.index >= len(self._calls):
                self._calls.append(0)
                out.append({"tool_calls": [{"index": call.index, "id": call.id,
                                            "type": "function",
                                            "function": {"name": call.name, "arguments": ""}}]})
            sent = self._calls[call.index]
            if len(call.arguments) > sent:
                out.append({"tool_calls": [{"index": call.index,
                                            "function": {"arguments": call.arguments[sent:]}}]})
                self._calls[call.index] = len(call.arguments)
        return out


def merge_deltas(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Reassemble a message from deltas, as an OpenAI client does."""
    msg: dict[str, Any] = {"reasoning_content": None, "content": None, "tool_calls": []}
    for d in deltas:
        for key in ("reasoning_content", "content"):
            if key in d:
                msg[key] = (msg[key] or "") + d[key]
        for tc in d.get("tool_calls", []):
            calls = msg["tool_calls"]
            if tc["index"] == len(calls):
                calls.append({"id": tc["id"], "type": "function",
                              "function": {"name": tc["function"]["name"], "arguments": ""}})
            calls[tc["index"]]["function"]["arguments"] += tc["function"].get("arguments", "")
    return msg
