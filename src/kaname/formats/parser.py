"""Parsing an assistant turn with the same spec the grammar came from.

`parse(fmt, text)` splits a complete turn into reasoning, content and tool calls.
`StreamParser` takes text chunks and yields OpenAI-style deltas; it re-parses the text so far
and emits only what can no longer change (text that could still turn into a marker is held
back), so the stream always adds up to the non-streamed result.

A turn that does not follow the format raises `FormatParseError`: never silently plain content.

Whitespace at the edges of a marker is optional when reading (`_split`): models write Qwen3's
"<tool_call>\n" as "<tool_call>", "<think>\nR\n</think>" as "<think>R</think>", GLM-4.5's
calls without its newlines. The layout the grammar writes is read exactly first, so what the
grammar allows parses as before; the marker cores themselves are never optional.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatParseError
from . import keyed
from .items import CallDelta, Delta, TextDelta
from .json_scan import scan_json
from .request import CUSTOM_INPUT, Tool
from .spec import ChatFormat, ToolCallSyntax


@dataclass
class ToolCall:
    index: int
    name: str
    arguments: str  # the JSON text as the model wrote it
    id: str = ""
    custom: bool = False  # a custom tool's call: its input is the string argument `input`

    @property
    def input(self) -> str:
        """A custom tool's input (the arguments as written, where they hold none)."""
        return custom_input(self.arguments)

    def to_openai(self) -> dict[str, Any]:
        if self.custom:
            return {"id": self.id, "type": "custom",
                    "custom": {"name": self.name, "input": self.input}}
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def custom_input(arguments: str) -> str:
    """The `input` string of a custom tool's arguments (as far as it was written, for a call
    cut short); the text itself where it is not `{"input": "..."}` (strict levels below full
    do not bind it)."""
    try:
        value = json.loads(arguments)
    except RecursionError:  # nested too deeply to be {"input": "..."}
        return arguments
    except ValueError:  # cut short: what was written of the input, if it is one
        if _INPUT_HEAD.match(arguments) or _could_become_head(arguments):
            return custom_input_prefix(arguments)
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


_INPUT_HEAD = re.compile(r'\{\s*"%s"\s*:\s*"' % CUSTOM_INPUT)  # noqa: UP031
_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')


def _could_become_head(text: str) -> bool:
    """Whether `text` is the start of `{"input": "` (whitespace as JSON allows)."""
    return ("{" + json.dumps(CUSTOM_INPUT) + ':"').startswith(_compact(text))


def custom_input_prefix(arguments: str) -> str:
    """What is final of a custom tool's input while its arguments are still being written:
    the JSON string decoded up to the last complete character."""
    m = _INPUT_HEAD.match(arguments)
    if m is None:
        return ""
    out: list[str] = []
    i = m.end()
    while i < len(arguments):
        ch = arguments[i]
        if ch == '"':
            break
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = _ESCAPE.match(arguments, i)
        if esc is None:
            break  # an escape still being written
        piece = json.loads(f'"{esc.group()}"')
        if "\ud800" <= piece <= "\udbff":  # a surrogate pair's first half: wait for both
            pair = _ESCAPE.match(arguments, esc.end())
            if pair is None:
                break
            piece = json.loads(f'"{esc.group()}{pair.group()}"')
            i = pair.end()
        else:
            i = esc.end()
        out.append(piece)
    return "".join(out)


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


def _split(marker: str) -> tuple[str, str, str]:
    """A marker's leading whitespace, core and trailing whitespace (all lead when blank)."""
    core = marker.strip()
    if not core:
        return marker, "", ""
    at = marker.index(core)
    return marker[:at], core, marker[at + len(core):]


def _core(marker: str) -> str:
    return _split(marker)[1]


def _prefix_there(text: str, ws: str, at: int) -> int:
    """Length of the longest prefix of `ws` that `text` has at `at`."""
    k = len(ws)
    while k and not text.startswith(ws[:k], at):
        k -= 1
    return k


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

    def __init__(self, fmt: ChatFormat, text: str, partial: bool, id_prefix: str,
                 tools: Mapping[str, Tool] | None = None, json_content: bool = False):
        self.fmt, self.text, self.partial, self.id_prefix = fmt, text, partial, id_prefix
        self.tools = tools
        # content is one JSON value (json_object / json_schema): its strings may spell out
        # any marker, so markers are looked for only after the value
        self.json_content = json_content
        self.pos = 0
        self.turn = ParsedTurn()
        self.open_args: str | None = None  # arguments of a call still being written

    def fail(self, what: str) -> FormatParseError:
        return FormatParseError(f"{self.fmt.name}: {what} at offset {self.pos}: "
                                f"{self.text[self.pos:self.pos + 40]!r}")

    def expect(self, marker: str) -> bool:
        """Consume `marker`, its edge whitespace optional; False when partial text ends
        inside it."""
        found = self.loose(marker)
        if found is None:
            raise self.fail(f"expected {marker!r}")
        return found

    def loose(self, marker: str) -> bool | None:
        """Consume `marker` as written, or its core with as much of its edge whitespace as
        is there: True; False when partial text ends inside it; None when it is not there."""
        rest = self.text[self.pos:]
        if rest.startswith(marker):
            self.pos += len(marker)
            return True
        lead, core, trail = _split(marker)
        if not core:  # a blank marker (GLM-4.5's "\n" after the name) may be left out
            self.skip(lead)
            if self.partial and self.pos == len(self.text):
                return False
            return True
        for head in (lead, ""):
            if rest.startswith(head + core):
                self.pos += len(head + core)
                self.skip(trail)
                return True
        if self.partial and any(v.startswith(rest) for v in (marker, core + trail)):
            self.pos = len(self.text)
            return False
        return None

    def ws(self) -> None:
        """Skip whitespace between two markers of a call (where the format writes some, or
        none): never inside a value or content."""
        n = len(self.text)
        while self.pos < n and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def skip(self, ws: str) -> None:
        """Consume the longest prefix of the whitespace `ws` that is there."""
        self.pos += _prefix_there(self.text, ws, self.pos)

    def find(self, marker: str, start: int) -> tuple[int, int]:
        """Where `marker` (its edge whitespace optional) next occurs from `start`: the start
        of the text it ends (its leading whitespace excluded, where there) and the position
        after it; (-1, -1) if it does not."""
        lead, core, trail = _split(marker)
        if not core:
            at = self.text.find(lead, start)
            return (at, at + len(lead)) if at >= 0 else (-1, -1)
        at = self.text.find(core, start)
        if at < 0:
            return -1, -1
        body_end = at - len(lead) if lead and self.text.startswith(lead, at - len(lead)) \
            and at - len(lead) >= start else at
        end = at + len(core)
        return body_end, end + _prefix_there(self.text, trail, end)

    def expect_end(self, markers: Sequence[str]) -> None:
        """Consume one of the end-of-turn markers; nothing may follow it."""
        rest = self.text[self.pos:]
        for m in markers:
            if rest.startswith(m):
                self.pos += len(m)
                if self.text[self.pos:].strip():
                    raise self.fail("text after the end of turn")
                return
        if self.partial and any(m.startswith(rest) for m in markers):
            self.pos = len(self.text)
            return
        raise self.fail(f"expected one of {list(markers)!r}")

    def run(self) -> ParsedTurn:
        f = self.fmt
        if not self._reasoning():
            return self.turn
        s = f.tool_calls
        opener = s.opener if s else ""
        content_ends = [f.end_of_turn, *f.end_of_turn_alt]
        calls_ends = list(dict.fromkeys([f.calls_end, *f.end_of_turn_alt]))
        rest = self.text[self.pos:]
        if s is not None and not opener and rest.startswith("{"):
            # A bare JSON call (Llama) is a call only when an end marker follows it.
            start = self.pos
            done = self._bare_call()
            if done is False:
                return self.turn  # undecided yet
            if done:
                after = self.text[self.pos:]
                if any(after.startswith(m) for m in calls_ends):
                    self.expect_end(calls_ends)
                    return self.turn
                self.turn.tool_calls.clear()
                if self.partial and any(m.startswith(after) for m in calls_ends):
                    return self.turn  # undecided yet
                self.pos = start  # a call-shaped object with more text after it: content
        if s is not None and opener and (f.content_begin or not s.content_before_calls):
            if s.preamble_begin and rest.startswith(s.preamble_begin):
                if not self._preamble():
                    return self.turn
                rest = self.text[self.pos:]
                if not any(rest.startswith(o) for o in s.openers):
                    if self.partial and any(o.startswith(rest) for o in s.openers):
                        return self.turn  # the call is still to come
                    raise self.fail("a preamble must be followed by a tool call")
            if any(rest.startswith(o) for o in s.openers):
                self._calls()
                self.ws()
                if self.pos < len(self.text) or not self.partial:
                    self.expect_end(calls_ends)
                return self.turn
            if self.partial and any(m.startswith(rest) for m in (*s.openers, s.preamble_begin)
                                    if m):
                return self.turn  # cannot tell yet
        if f.content_begin and not self.expect(f.content_begin):
            return self.turn
        with_calls = s is not None and bool(opener) and s.content_before_calls
        glue = s.after_content if s is not None and with_calls else ""
        # the calls start at the opener's core; the glue and its leading whitespace before
        # it are not content
        core = _core(opener) if with_calls else ""
        markers = [*(m for m in (glue + opener, opener, core) if with_calls and m),
                   *content_ends]
        rest = self.text[self.pos:]
        skip = self._json_extent(rest, markers) if self.json_content else 0
        cut = -1 if skip is None else min(
            (i for m in (core, *content_ends) if m and (i := rest.find(m, skip)) >= 0),
            default=-1)
        if cut < 0:
            if not self.partial:
                raise self.fail("turn does not end with the end-of-turn marker")
            content = self._content(rest[:len(rest) - _held(rest, markers)], final=False)
            self.turn.content = content or None
            self.pos = len(self.text)
            return self.turn
        calls = bool(core) and rest.startswith(core, cut)
        content = rest[:cut]
        self._refuse_bare_calls(content)
        if calls:
            lead = _split(opener)[0]
            for before in dict.fromkeys((glue + lead, lead, glue)):
                if before and content.endswith(before):
                    content = content[:-len(before)]
                    break
        self._refuse_markers(content[skip or 0:])
        self.turn.content = self._content(content) if content else None
        self.pos += cut
        ends = content_ends
        if calls:
            self._calls()
            self.ws()  # before the end of turn, as between calls
            ends = calls_ends
        if self.pos < len(self.text) or not self.partial:
            self.expect_end(ends)
        return self.turn

    def _json_extent(self, rest: str, markers: Sequence[str]) -> int | None:
        """Where the JSON value that starts `rest` (after the format's JSON wrapper) ends;
        None while it is still being written; 0 where `rest` holds no JSON value (it starts
        with one of `markers`, a call opener or an end of content, or a prefix of one while
        streaming: a turn of calls only has no content)."""
        start = len(self.fmt.json_prefix) if self.fmt.json_prefix \
            and rest.startswith(self.fmt.json_prefix) else 0
        while start < len(rest) and rest[start] in " \t\n\r":
            start += 1
        body = rest[start:]
        if body and any(m and (body.startswith(m) or (self.partial and m.startswith(body)))
                        for m in markers):
            return 0
        try:
            return json.JSONDecoder().raw_decode(rest, start)[1]
        except ValueError:
            return None if self.partial else 0
        except RecursionError:  # nested deeper than json.loads reads
            scanned = scan_json(rest, start)
            if scanned is not None:
                return scanned[0]
            return None if self.partial else 0

    def _refuse_bare_calls(self, content: str) -> None:
        """A call written as bare JSON (Llama) inside text, or after another call, is a layout
        the format does not take (one call, the whole turn): raise, not content. Only a
        call-shaped object counts, so JSON content with a "name" key stays content."""
        s = self.fmt.tool_calls
        if s is None or s.opener:
            return
        head = "{" + json.dumps(s.name_key) + ":"
        at = content.find(head)
        while at >= 0:
            try:
                value, _ = json.JSONDecoder().raw_decode(content, at)
            except json.JSONDecodeError:
                value = None
            if _call_args_key(s, value) is not None:
                self.pos += at
                raise self.fail("a tool call inside content (one bare call is the whole turn)")
            at = content.find(head, at + 1)

    def _refuse_markers(self, content: str) -> None:
        """Content never holds a reasoning or call marker (the grammar keeps them out): text
        that does is a layout this parser does not read, not content."""
        for core in self.fmt.marker_cores:
            at = content.find(core)
            if at >= 0:
                self.pos += at
                raise self.fail(f"{core!r} inside content (a call or reasoning block in a "
                                "layout other than the format's)")

    def _reasoning(self) -> bool:
        """Read the reasoning block or the no-reasoning marker; False: text ran out."""
        r = self.fmt.reasoning
        if r is None:
            return True
        if self._opens(r.begin):
            self.loose(r.begin)
            start = self.pos
            end, after = self.find(r.pad + r.end, start)
            if end < 0:
                if not self.partial:
                    raise self.fail("reasoning block never ends")
                body = self.text[start:]
                # hold back what may still become the pad + end marker
                keep = len(body) - _held(body, [r.pad + r.end, _core(r.end)])
                self.turn.reasoning_content = body[:max(0, keep)]
                self.pos = len(self.text)
                return False
            body = self.text[start:end]
            self.turn.reasoning_content = body or None  # an empty block says nothing
            self.pos = after
            return True
        if r.off and self._opens(r.off):
            self.loose(r.off)
            return True
        if self.partial and any(m.startswith(self.text) for m in
                                (r.begin, r.off, _core(r.begin), _core(r.off)) if m):
            return False  # cannot tell yet
        return True

    def _opens(self, marker: str) -> bool:
        """Whether the text starts with `marker` (its edge whitespace optional)."""
        lead, core, _ = _split(marker)
        return bool(core) and (self.text.startswith(lead + core) or self.text.startswith(core))

    def _preamble(self) -> bool:
        """A message to the user before the calls (harmony's commentary preamble), read as the
        turn's content; False: the text ran out inside it."""
        s = self.fmt.tool_calls
        assert s is not None
        self.pos += len(s.preamble_begin)
        end = self.text.find(s.preamble_end, self.pos)
        if end < 0:
            if not self.partial:
                raise self.fail("preamble never ends")
            body = self.text[self.pos:]
            self.turn.content = body[:len(body) - _held(body, [s.preamble_end])] or None
            self.pos = len(self.text)
            return False
        self.turn.content = self.text[self.pos:end] or None
        self.pos = end + len(s.preamble_end)
        return True

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

    def _bare_call(self) -> bool | None:
        """A call written as a bare JSON object (Llama): True when read, False when the text
        ran out inside it, None when the object is not call-shaped (it is content then)."""
        s = self.fmt.tool_calls
        assert s is not None
        start = self.pos
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except RecursionError:  # nested deeper than json.loads reads
            return self._deep_bare_call(start)
        except json.JSONDecodeError:
            if self.partial:
                self.pos = len(self.text)
                return False  # undecided until the object ends (or the turn does)
            return None
        self.pos = end
        key = _call_args_key(s, value)
        if key is None:
            self.pos = start
            return None
        args = json.dumps(value[key], ensure_ascii=False)
        self.turn.tool_calls.append(ToolCall(0, value[s.name_key], args, f"{self.id_prefix}0"))
        return True

    def _deep_bare_call(self, start: int) -> bool | None:
        """`_bare_call` for an object nested deeper than json.loads reads: read by its head
        (`{"<name_key>": NAME, "<args key>": `), the arguments kept as written."""
        s = self.fmt.tool_calls
        assert s is not None
        keys = "|".join(re.escape(json.dumps(k)) for k in (s.args_key, "arguments", "parameters"))
        head = re.compile(r'\{%s%s%s:%s("(?:[^"\\]|\\.)*")%s,%s(?:%s)%s:%s' % (  # noqa: UP031
            _WS, re.escape(json.dumps(s.name_key)), _WS, _WS, _WS, _WS, keys, _WS, _WS))
        m = head.match(self.text, start)
        scanned = scan_json(self.text, m.end()) if m else None
        end = re.compile(_WS + "}").match(self.text, scanned[0]) if scanned else None
        if m is None or scanned is None or end is None:
            if self.partial:
                self.pos = len(self.text)
                return False
            self.pos = start
            return None
        self.pos = end.end()
        args = self.text[m.end():scanned[0]]
        self.turn.tool_calls.append(ToolCall(0, json.loads(m.group(1)), args,
                                             f"{self.id_prefix}0"))
        return True

    def _calls(self) -> None:
        s = self.fmt.tool_calls
        assert s is not None
        if s.section_begin:
            if not self.expect(s.section_begin):
                return
            self.ws()
        index = 0
        while True:
            ends = self._header_begin()
            if ends is None or not self._call(index, ends):
                return
            if s.call_end:
                self.ws()
                if not self.expect(s.call_end):
                    return
            index += 1
            begins = list(dict.fromkeys(b for b, _ in s.all_headers))
            nexts = [s.separator + b for b in begins]
            rest = self.text[self.pos:]
            if s.parallel and any(rest.startswith(n) for n in nexts):
                self.pos += len(s.separator)
                continue
            # between calls, any whitespace (the separator's or none) goes
            loose = [c for b in begins if (c := _core(b))]
            ws = len(rest) - len(rest.lstrip())
            if s.parallel and len(begins) == 1 and any(rest.startswith(c, ws) for c in loose):
                self.pos += ws
                continue
            if self.partial and s.parallel and (any(n.startswith(rest) for n in nexts)
                                                or any(c.startswith(rest[ws:]) for c in loose)):
                self.pos = len(self.text)  # another call may still follow: undecided
                return
            break
        if s.section_end:
            self.ws()
            self.expect(s.section_end)

    def _header_begin(self) -> tuple[str, ...] | None:
        """Consume a call's begin marker (call_begin, or the begin of another header spelling);
        the header ends that may follow it. None: the text ran out inside the marker."""
        s = self.fmt.tool_calls
        assert s is not None
        heads = s.all_headers
        if len(heads) == 1:
            return (s.args_begin,) if self.expect(s.call_begin) else None
        rest = self.text[self.pos:]
        begins = sorted(dict.fromkeys(b for b, _ in heads), key=len, reverse=True)
        for begin in begins:
            if rest.startswith(begin):
                self.pos += len(begin)
                return tuple(e for b, e in heads if b == begin)
        if self.partial and any(b.startswith(rest) for b in begins):
            self.pos = len(self.text)
            return None
        raise self.fail(f"expected one of {begins!r}")

    def _call(self, index: int, ends: tuple[str, ...] = ()) -> bool:
        s = self.fmt.tool_calls
        assert s is not None
        call_id = f"{self.id_prefix}{index}"
        if s.layout == "json":
            self.ws()
            return self._json_call(index, call_id)
        if s.name_prefix:
            self.ws()
        if not self.expect(s.name_prefix):
            return False
        # The header (name, index) is final only once its end is seen: the first of the
        # spellings that may end it (args_begin), or, for per-key calls without one (GLM-4.7),
        # the first key or the call's end, which belong to what follows the name.
        ends = tuple(e for e in ends if e)
        consumed = bool(ends or s.args_begin)
        candidates = ends or ((s.args_begin,) if s.args_begin else
                              (s.key_begin, s.call_end) if s.layout == "per_key" else ())
        if s.layout == "per_key":
            # per-key markers' edge whitespace is optional: GLM-4.5's name may end at the
            # first key (its "\n" left out), Qwen3-Coder's at ">"
            if s.args_begin and not _core(s.args_begin):
                candidates = (s.args_begin, s.key_begin, s.call_end)
            found = [(i, e) for e in candidates if e
                     and (i := self.find(e, self.pos)[0]) >= 0]
        else:
            found = [(i, e) for e in candidates
                     if e and (i := self.text.find(e, self.pos)) >= 0]
        end, args_begin = min(found, key=lambda f: (f[0], -len(f[1])), default=(-1, ""))
        if s.layout == "per_key" and args_begin != s.args_begin:
            args_begin = s.args_begin if consumed else ""  # a key or the call's end: not ours
        if not consumed:
            args_begin = ""
        if end < 0:
            if self.partial:
                self.pos = len(self.text)
                return False
            raise self.fail("tool call header never ends")
        name = self.text[self.pos:end].strip()  # a name holds no whitespace: markers' is theirs
        if s.layout == "per_key" and any(c and c in name for c in map(_core, (
                s.call_begin, s.key_end, s.value_begin, s.value_end))):
            raise self.fail("tool call name holds argument markers")  # a tag left out
        if any(t in name for t in self.fmt.special_tokens):
            # a header in a layout the format does not write (Mistral's "[CALL_ID]")
            raise self.fail("tool call name holds a marker")
        if s.index_sep:
            name, sep, idx = name.rpartition(s.index_sep)
            if not sep or not idx.isdigit():
                raise self.fail("tool call index missing")
            call_id = f"{s.name_prefix}{name}{s.index_sep}{idx}"
        self.pos = end
        call = ToolCall(index, name, "", call_id)
        self.turn.tool_calls.append(call)
        if not self.expect(args_begin):
            return False
        if s.layout == "per_key":
            return self._keyed_args(call)
        self.ws()
        start = self.pos
        _, ok = self._json()
        call.arguments = self.text[start:self.pos] if ok else self.open_args or ""
        return ok

    def _json_call(self, index: int, call_id: str) -> bool:
        """`{"<name_key>": NAME, "<args_key>": ARGS}`. In the layout kaname's grammar writes
        (name first, json.dumps separators) the arguments are the text as written and stream as
        it arrives; any other layout is read whole and re-serialised."""
        s = self.fmt.tool_calls
        assert s is not None
        head = re.compile(r'\{%s%s:%s("(?:[^"\\]|\\.)*")%s,%s%s%s:%s' % (  # noqa: UP031
            _WS, re.escape(json.dumps(s.name_key)), _WS, _WS, _WS,
            re.escape(json.dumps(s.args_key)), _WS, _WS))
        m = head.match(self.text, self.pos)
        if m:
            call = ToolCall(index, json.loads(m.group(1)), "", call_id)
            self.turn.tool_calls.append(call)
            start = self.pos = m.end()
            if self.text.startswith('"', start):
                # arguments written as a JSON string holding the object (vLLM reads them so):
                # read whole, never streamed as the string's text
                value, ok = self._json()
                if not ok:
                    return False
                call.arguments = _object_text(value) or ""
                if not call.arguments:
                    raise self.fail("tool call arguments are a string, not an object")
                return self.expect("}")
            _, ok = self._json()
            call.arguments = self.text[start:self.pos] if ok else self.open_args or ""
            if not ok:
                return False
            return self.expect("}")
        if self.partial and _could_become(self.text[self.pos:], s.name_key, s.args_key):
            self.pos = len(self.text)  # the name is not final yet
            return False
        value, ok = self._json()
        if not ok:
            return False
        if not isinstance(value, dict) or not isinstance(value.get(s.name_key), str) \
                or s.args_key not in value:
            raise self.fail("tool call is not {name, arguments}")
        args = value[s.args_key]
        text = _object_text(args) if isinstance(args, str) else json.dumps(args,
                                                                           ensure_ascii=False)
        if text is None:
            raise self.fail("tool call arguments are a string, not an object")
        self.turn.tool_calls.append(ToolCall(index, value[s.name_key], text, call_id))
        return True

    def _keyed_args(self, call: ToolCall) -> bool:
        """Per-key arguments, rebuilt as one JSON object text: `{"k": v, ...}` (a string value
        quoted, any other as written). While partial, `call.arguments` is a prefix of that."""
        s = self.fmt.tool_calls
        assert s is not None
        tool = (self.tools or {}).get(call.name)
        params = tool.parameters if tool is not None else None
        props = keyed.properties(params) or {}
        more = keyed.extra(params) if tool is not None else True
        pieces: list[str] = []

        def partial(extra: str = "") -> bool:
            sep = ", " if pieces and extra else ""
            call.arguments = "{" + ", ".join(pieces) + sep + extra
            self.pos = len(self.text)
            return False

        while True:
            self.ws()
            found = self.loose(s.key_begin)
            if not found:
                if found is False:
                    return partial()  # another key may follow: undecided
                break
            key_at, after = self.find(s.key_end, self.pos)
            if key_at < 0:
                if self.partial:
                    return partial()
                raise self.fail("argument key never ends")
            key = self.text[self.pos:key_at]
            self.pos = after
            if s.value_begin:
                self.ws()
            if not self.expect(s.value_begin):
                return partial()
            # a declared key's schema; an undeclared key's is additionalProperties' (any
            # value, unknown, where it has none or the tool is not given)
            schema = props[key] if key in props else more
            known = isinstance(schema, Mapping)
            reading = keyed.raw(params, schema) if known else None
            head = json.dumps(key, ensure_ascii=False) + ": "
            value_at, after = self.find(s.value_end, self.pos)
            if value_at < 0:
                if not self.partial:
                    raise self.fail("argument value never ends")
                body = self.text[self.pos:]
                body = body[:len(body) - _held(body, [s.value_end, _core(s.value_end)])]
                if not known or (reading is not None and reading.nullable
                                 and "null".startswith(body)):
                    return partial(head)  # raw or JSON (null or text): undecided yet
                if reading is not None:
                    return partial(head + json.dumps(body, ensure_ascii=False)[:-1])
                if s.python_booleans and body and any(
                        b.startswith(body) for b in keyed.PYTHON_BOOLEANS):
                    return partial(head)  # "True" is read as true: not final yet
                return partial(head + body)
            text = self.text[self.pos:value_at]
            if reading is not None or not known:
                for core in (_core(s.key_begin), _core(s.call_end)):
                    if core and core in text:  # a closing tag left out: not a value
                        self.pos += text.index(core)
                        raise self.fail(f"argument {key!r} holds {core!r}")
            value = keyed.decode(text, reading, known=known, python_booleans=s.python_booleans)
            if value is None:
                raise self.fail(f"argument {key!r} is not JSON")
            pieces.append(head + value)
            self.pos = after
        call.arguments = "{" + ", ".join(pieces) + "}"
        return True

    def _json(self) -> tuple[Any, bool]:
        """(the JSON value at pos, True) and pos past it; (None, False) while it is being
        written. A value nested deeper than json.loads reads is read by `scan_json`, its value
        TOO_DEEP."""
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except RecursionError:
            scanned = scan_json(self.text, self.pos)
            if scanned is not None:
                self.pos = scanned[0]
                return TOO_DEEP, True
            if self.partial:
                self.open_args = self.text[self.pos:]
                self.pos = len(self.text)
                return None, False
            raise self.fail("invalid JSON") from None
        except json.JSONDecodeError:
            if self.partial:
                self.open_args = self.text[self.pos:]
                self.pos = len(self.text)
                return None, False
            raise self.fail("invalid JSON") from None
        self.pos = end
        return value, True


# The value `_Scan._json` gives for JSON nested deeper than json.loads reads (its text is
# kept as written; only layouts that need the value itself refuse it)
TOO_DEEP = object()

_WS = r"[ \t\n\r]*"  # JSON whitespace: the grammar bounds it, the parser need not


def _compact(text: str) -> str:
    """`text` without JSON whitespace outside strings (a partial text's too)."""
    out: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if ch == '"' and not escaped:
                in_string = False
            escaped = ch == "\\" and not escaped
            continue
        if ch in " \t\n\r":
            continue
        out.append(ch)
        in_string = ch == '"'
    return "".join(out)


def _could_become(text: str, name_key: str, args_key: str) -> bool:
    """Whether partial `text` may still grow into the call head
    `{"<name_key>": "NAME", "<args_key>": ` (in any JSON whitespace)."""
    text = _compact(text)
    first = "{" + json.dumps(name_key) + ":"
    if first.startswith(text):
        return True
    if not text.startswith(first):
        return False
    rest = text[len(first):]
    if not rest.startswith('"'):
        return False
    i = 1
    while i < len(rest):
        if rest[i] == "\\":
            i += 2
            continue
        if rest[i] == '"':
            after = rest[i + 1:]
            second = "," + json.dumps(args_key) + ":"
            return second.startswith(after) or after.startswith(second)
        i += 1
    return True  # the name is still being written


def _object_text(value: Any) -> str | None:
    """The JSON text of the object a string holds, or None."""
    try:
        inner = json.loads(value) if isinstance(value, str) else None
    except (json.JSONDecodeError, RecursionError):
        return None
    return json.dumps(inner, ensure_ascii=False) if isinstance(inner, dict) else None


def _call_args_key(s: ToolCallSyntax, value: Any) -> str | None:
    """The arguments key of a call-shaped bare JSON value ({name, arguments}), else None.
    Llama models also write "arguments" where the format says "parameters"."""
    if not isinstance(value, dict) or not isinstance(value.get(s.name_key), str):
        return None
    rest = set(value) - {s.name_key}
    if len(rest) != 1 or not rest <= {s.args_key, "arguments", "parameters"}:
        return None
    return rest.pop()


def _tool_map(tools: Sequence[Tool] | None) -> dict[str, Tool] | None:
    return {t.name: t for t in tools} if tools else None


def _scan(fmt: ChatFormat, text: str, partial: bool, id_prefix: str,
          tools: dict[str, Tool] | None, json_content: bool = False) -> ParsedTurn:
    turn = _Scan(fmt, text, partial, id_prefix, tools, json_content).run()
    for call in turn.tool_calls:  # the request's custom tools answer in their own shape
        tool = (tools or {}).get(call.name)
        call.custom = tool is not None and tool.custom
    return turn


def parse_partial(fmt: ChatFormat, text: str, *, id_prefix: str = "call_",
                  tools: Sequence[Tool] | None = None, json_content: bool = False
                  ) -> ParsedTurn:
    """What can be read from a turn cut short (finish_reason "length"): nothing is dropped
    except a marker or tool call still being written."""
    return _scan(fmt, text, True, id_prefix, _tool_map(tools), json_content)


def parse(fmt: ChatFormat, text: str, *, id_prefix: str = "call_",
          tools: Sequence[Tool] | None = None, json_content: bool = False) -> ParsedTurn:
    """Parse a complete assistant turn (end-of-turn marker included or not).

    `tools` (the request's) tell per-key formats (GLM-4.5) which argument values are raw
    strings; without them a value is read as JSON when it parses and as a string otherwise,
    so a string argument "12" would come back as the number 12. `json_content`: the content
    is bound to JSON (its strings may spell out markers)."""
    tool_map = _tool_map(tools)
    if any(text.rstrip().endswith(m) for m in fmt.end_markers):
        return _scan(fmt, text, False, id_prefix, tool_map, json_content)
    error: FormatParseError | None = None
    for end in dict.fromkeys((fmt.end_of_turn, fmt.calls_end)):
        try:
            return _scan(fmt, text + end, False, id_prefix, tool_map, json_content)
        except FormatParseError as e:
            error = error or e
    assert error is not None
    raise error


class StreamParser:
    """Feed text chunks, get typed deltas (`items.TextDelta`, `items.CallDelta`: a call's
    first sight carries its id and name) as they become final; `finish()` closes the turn.
    The deltas add up to the parsed turn."""

    def __init__(self, fmt: ChatFormat, *, id_prefix: str = "call_",
                 tools: Sequence[Tool] | None = None, json_content: bool = False):
        self.fmt = fmt
        self.id_prefix = id_prefix
        self.tools = tools
        self.json_content = json_content
        self._tool_map = _tool_map(tools)
        self.text = ""
        self._reasoning = 0
        self._content = 0
        self._calls: list[int] = []  # argument characters emitted per call

    def feed(self, chunk: str) -> list[Delta]:
        self.text += chunk
        return self._diff(_scan(self.fmt, self.text, True, self.id_prefix, self._tool_map,
                                self.json_content))

    def finish(self) -> tuple[ParsedTurn, list[Delta]]:
        turn = parse(self.fmt, self.text, id_prefix=self.id_prefix, tools=self.tools,
                     json_content=self.json_content)
        return turn, self._diff(turn)

    def _diff(self, turn: ParsedTurn) -> list[Delta]:
        out: list[Delta] = []
        if turn.reasoning_content and len(turn.reasoning_content) > self._reasoning:
            out.append(TextDelta("reasoning", turn.reasoning_content[self._reasoning:]))
            self._reasoning = len(turn.reasoning_content)
        if turn.content and len(turn.content) > self._content:
            out.append(TextDelta("content", turn.content[self._content:]))
            self._content = len(turn.content)
        for call in turn.tool_calls:
            if call.index >= len(self._calls):
                self._calls.append(0)
                out.append(CallDelta(call.index, "", call.id, call.name, call.custom))
            sent = self._calls[call.index]
            if call.custom:  # the input as decoded so far, not the JSON carrying it
                text = call.input if _complete_json(call.arguments) \
                    else custom_input_prefix(call.arguments)
            else:
                text = call.arguments
            if len(text) > sent:
                out.append(CallDelta(call.index, text[sent:], custom=call.custom))
                self._calls[call.index] = len(text)
        return out


def _complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    except RecursionError:
        return scan_json(text) is not None
    return True


def merge_deltas(deltas: Sequence[Delta]) -> dict[str, Any]:
    """Reassemble a message from typed deltas in chat completions' shape, as an OpenAI client
    does from the chunks the chat edge makes of them (for tests and tools)."""
    msg: dict[str, Any] = {"reasoning_content": None, "content": None, "tool_calls": []}
    for d in deltas:
        if isinstance(d, TextDelta):
            key = "reasoning_content" if d.kind == "reasoning" else "content"
            msg[key] = (msg[key] or "") + d.text
            continue
        calls = msg["tool_calls"]
        if d.index == len(calls):
            kind = "custom" if d.custom else "function"
            calls.append({"id": d.id, "type": kind, kind: {
                "name": d.name, "input" if d.custom else "arguments": ""}})
        call = calls[d.index]
        if call["type"] == "custom":
            call["custom"]["input"] += d.fragment
        else:
            call["function"]["arguments"] += d.fragment
    return msg
