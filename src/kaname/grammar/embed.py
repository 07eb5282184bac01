"""A user's Lark grammar inside a turn's grammar (custom tools' free-form input).

Two things make that possible. Renaming: every rule and terminal of the user's grammar gets a
prefix, so it cannot clash with the turn's rules (its `start` becomes `<prefix>_start`).
Escaping: where the input travels as the content of a JSON string (formats whose call
arguments are JSON), each terminal is rewritten to match the JSON-escaped spelling of what it
matched. JSON escaping is applied character by character, so escaping every terminal escapes
the whole language: the text between the quotes, once decoded, is in the user's grammar.
The escaped spelling is the canonical one (`json.dumps`, non-ASCII kept): `"` → `\\"`,
`\\` → `\\\\`, control characters → `\\n` / `\\t` / ... / `\\u00XX`.

The grammars are Lark as OpenAI's custom tools define it (rules, terminals, string and regex
literals, `"a".."z"` ranges, `->` aliases, `%import common.X`). What cannot be carried is a
ConstraintError naming it: `%ignore` (write whitespace explicitly), llguidance's extensions
(`%json`, special tokens, `~` negation, rule options) and case-insensitive literals; regex
back-references and look-arounds are refused by llguidance itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConstraintError
from .lark import regex_literal, string_literal
from .regex_syntax import constants as _c
from .regex_syntax import parser as _p
from .regex_syntax import rust_char, rust_only

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<comment>(?://|\#)[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?!/)(?:\\.|[^/\\\n])+/[imslux]*)
  | (?P<directive>%[A-Za-z_]+)
  | (?P<special><[^<>\s]+>)
  | (?P<arrow>->)
  | (?P<range>\.\.)
  | (?P<name>[_A-Za-z][_A-Za-z0-9]*)
  | (?P<number>[0-9]+)
  | (?P<punct>[:|()\[\]{}*+?,.~&!-])
""", re.VERBOSE)

# Lark's `common` terminals that grammars import, written as regexes (escaped like any other):
# DECIMAL: INT "." INT? | "." INT; FLOAT: INT _EXP | DECIMAL _EXP?; NUMBER: FLOAT | INT.
_DECIMAL = r"[0-9]+\.[0-9]*|\.[0-9]+"
_FLOAT = rf"[0-9]+[eE][+-]?[0-9]+|(?:{_DECIMAL})(?:[eE][+-]?[0-9]+)?"
_COMMON = {
    "DIGIT": r"[0-9]", "HEXDIGIT": r"[a-fA-F0-9]", "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+", "DECIMAL": _DECIMAL, "FLOAT": _FLOAT,
    "SIGNED_FLOAT": f"[+-]?(?:{_FLOAT})", "NUMBER": f"{_FLOAT}|[0-9]+",
    "SIGNED_NUMBER": f"[+-]?(?:{_FLOAT}|[0-9]+)",
    "LCASE_LETTER": r"[a-z]", "UCASE_LETTER": r"[A-Z]", "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+", "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "ESCAPED_STRING": r'"(?:[^"\\\n]|\\.)*"', "WS_INLINE": r"[ \t]+",
    "WS": r"[ \t\f\r\n]+", "CR": r"\r", "LF": r"\n", "NEWLINE": r"(?:\r?\n)+",
}


Fail = Callable[[str], ConstraintError]


@dataclass(frozen=True)
class Embedded:
    """The user's grammar as rules to add to a turn grammar; `start` is its start rule."""

    start: str
    rules: str


def embed_lark(definition: str, prefix: str, *, json_escaped: bool, pointer: str = ""
               ) -> Embedded:
    """`definition` renamed under `prefix` (lowercase, e.g. "ct1"), its terminals matching
    the JSON-escaped spelling of their text when `json_escaped`. `pointer`: where the grammar
    sits in the request, for errors."""
    tokens = list(_tokens(definition, pointer))
    out: list[str] = []
    imports: dict[str, str] = {}  # local name -> common name
    defined: set[str] = set()
    i = 0

    def fail(what: str) -> ConstraintError:
        return ConstraintError(f"custom tool grammar: {what}", keyword="grammar",
                               pointer=pointer or None)

    def rename(name: str) -> str:
        return f"{prefix.upper()}_{name}" if name.lstrip("_")[:1].isupper() \
            else f"{prefix}_{name}"

    def emit(text: str, line: bool) -> None:
        out.append(("\n" if line else " ") + text)

    while i < len(tokens):
        kind, text, line = tokens[i]
        nxt = tokens[i + 1][:2] if i + 1 < len(tokens) else ("", "")
        if kind == "directive":
            if text == "%import":
                i = _import(tokens, i + 1, imports, fail)
                continue
            if text == "%ignore":
                raise fail("%ignore is not supported; write whitespace into the rules")
            raise fail(f"{text} is not supported in a custom tool's grammar")
        if kind == "special":
            raise fail(f"special token {text} cannot be part of a tool's input")
        if kind == "arrow":  # an alias names a tree node: nothing to enforce
            if nxt[0] != "name":
                raise fail("'->' needs an alias name")
            i += 2
            continue
        if kind == "punct" and text in "?!" and line:
            # Lark's ?rule / !rule shape the tree only: the rule is defined as written
            if i + 1 < len(tokens):
                tokens[i + 1] = (nxt[0], nxt[1], True)
            i += 1
            continue
        if kind == "name":
            if line and nxt == ("punct", "."):  # a priority: llguidance has none, drop it
                defined.add(text)
                emit(rename(text), line)
                i += 2
                while i < len(tokens) and (tokens[i][0] == "number" or tokens[i][:2] == (
                        "punct", "-")):
                    i += 1
                continue
            if line and nxt == ("punct", "["):
                raise fail(f"rule options ({text}[...]) are not supported")
            if line and nxt == ("punct", ":"):
                defined.add(text)
            emit(rename(text), line)
        elif kind == "punct" and text == "~":
            if nxt[0] != "number":
                raise fail("'~' (negation) is not supported")
            emit(text, line)
        elif kind == "string":
            if nxt[0] == "range":
                if i + 2 >= len(tokens) or tokens[i + 2][0] != "string":
                    raise fail("a '..' range needs a string on both sides")
                emit(_range(text, tokens[i + 2][1], json_escaped, fail), line)
                i += 3
                continue
            emit(_string(text, json_escaped, fail), line)
        elif kind == "regex":
            emit(_regex(text, json_escaped, fail), line)
        else:
            emit(text, line)
        i += 1
    if "start" not in defined:
        raise fail("the grammar has no 'start' rule")
    for local, common in imports.items():
        if local not in defined:
            body = _COMMON[common]
            regex = _escaped_regex(body, 0, fail) if json_escaped else body
            out.append(f"\n{rename(local)}: {regex_literal(regex)}")
    return Embedded(f"{prefix}_start", "".join(out).strip() + "\n")


def _tokens(text: str, pointer: str) -> Iterator[tuple[str, str, bool]]:
    """(kind, text, starts a line) for each token; whitespace and comments dropped."""
    pos = 0
    line = True
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConstraintError(f"custom tool grammar: cannot read {text[pos:pos + 20]!r}",
                                  keyword="grammar", pointer=pointer or None)
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "ws":
            line = line or "\n" in m.group()
            continue
        if kind == "comment":
            continue
        yield kind, m.group(), line
        line = False


def _import(tokens: list[tuple[str, str, bool]], i: int, imports: dict[str, str],
            fail: Fail) -> int:
    """`%import common.NAME [-> ALIAS]` or `%import common (A, B)`; the index after it."""
    def at(k: int) -> tuple[str, str]:
        return tokens[k][:2] if k < len(tokens) else ("", "")

    def take(kind: str, text: str | None = None) -> str:
        nonlocal i
        if at(i)[0] != kind or (text and at(i)[1] != text):
            raise fail("%import reads `%import common.NAME` or `%import common (A, B)`")
        i += 1
        return tokens[i - 1][1]

    if take("name") != "common":
        raise fail("only Lark's `common` terminals can be imported")
    names: list[tuple[str, str]] = []
    if at(i) == ("punct", "."):
        i += 1
        name = take("name")
        alias = name
        if at(i)[0] == "arrow":
            i += 1
            alias = take("name")
        names.append((alias, name))
    else:
        take("punct", "(")
        while True:
            name = take("name")
            names.append((name, name))
            if at(i) == ("punct", ")"):
                i += 1
                break
            take("punct", ",")
    for alias, name in names:
        if name not in _COMMON:
            raise fail(f"common.{name} is not one of the importable terminals "
                       f"({', '.join(sorted(_COMMON))})")
        imports[alias] = name
    return i


def _decode_string(token: str, fail: Fail) -> str:
    if token.endswith("i"):
        raise fail(f"case-insensitive literals ({token}) are not supported")
    try:
        value = json.loads(token)
    except ValueError:
        # Lark strings are Python-like: fall back to their escapes
        try:
            value = token[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError as e:
            raise fail(f"cannot read the literal {token}") from e
    if not isinstance(value, str):
        raise fail(f"cannot read the literal {token}")
    return value


def json_escape(text: str) -> str:
    """The canonical JSON-string spelling of `text`, without the quotes."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _string(token: str, json_escaped: bool, fail: Fail) -> str:
    value = _decode_string(token, fail)
    return string_literal(json_escape(value) if json_escaped else value)


def _range(lo: str, hi: str, json_escaped: bool, fail: Fail) -> str:
    a, b = _decode_string(lo, fail), _decode_string(hi, fail)
    if len(a) != 1 or len(b) != 1 or a > b:
        raise fail(f"{lo}..{hi} is not a range of characters")
    regex = f"[{rust_char(a)}-{rust_char(b)}]"
    return regex_literal(_escaped_regex(regex, 0, fail) if json_escaped else regex)


def _regex(token: str, json_escaped: bool, fail: Fail) -> str:
    body, _, flags = token[1:].rpartition("/")
    body = body.replace("\\/", "/")
    if "i" in flags:
        raise fail(f"case-insensitive regexes ({token}) are not supported")
    dotall = re.DOTALL if "s" in flags else 0
    verbose = re.VERBOSE if "x" in flags else 0
    if json_escaped:
        return regex_literal(_escaped_regex(body, dotall | verbose, fail))
    if dotall or verbose:
        body = f"(?{'s' if dotall else ''}{'x' if verbose else ''}:{body})"
    return regex_literal(body)


# ---- regexes over the JSON-escaped alphabet ------------------------------------------------

# The characters JSON must escape; every other character stands for itself.
_SPECIALS = [chr(i) for i in range(0x20)] + ['"', "\\"]
_PLAIN = r'[^"\\\x00-\x1f]'


def _escaped_regex(pattern: str, flags: int, fail: Fail) -> str:
    """A regex matching exactly the JSON-escaped spellings of what `pattern` matches.

    The pattern is read with Python's regex parser; syntax where Rust's regex (which the
    grammar as given is read with) means something else is refused, not misread."""
    other = rust_only(pattern)
    if other is not None:
        raise fail(f"{other}: not supported in a custom tool's grammar")
    try:
        tree = _p.parse(pattern, flags)
    except re.error as e:
        raise fail(f"cannot read the regex /{pattern}/: {e}") from e
    flags |= tree.state.flags  # a leading (?s) or (?i) applies to the whole pattern
    if flags & re.IGNORECASE:
        raise fail("case-insensitive regexes are not supported")
    items = list(tree)
    # A terminal matches whole: anchors at its ends add nothing; anywhere else they would.
    while items and items[0][0] is _c.AT and items[0][1] in _STARTS:
        items.pop(0)
    while items and items[-1][0] is _c.AT and items[-1][1] in _ENDS:
        items.pop()
    return _seq(items, bool(flags & re.DOTALL), fail)


_STARTS = (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING)
_ENDS = (_c.AT_END, _c.AT_END_STRING)


def _seq(items: Any, dotall: bool, fail: Fail) -> str:
    return "".join(_node(op, av, dotall, fail) for op, av in items)


def _node(op: Any, av: Any, dotall: bool, fail: Fail) -> str:
    if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
        return _one_char(op, av, dotall, fail)
    if op is _c.SUBPATTERN:
        _group, add, remove, sub = av
        if (add | remove) & re.IGNORECASE:
            raise fail("case-insensitive regexes are not supported")
        inner_dotall = bool(add & re.DOTALL) or (dotall and not remove & re.DOTALL)
        return f"(?:{_seq(sub, inner_dotall, fail)})"
    if op is _c.BRANCH:
        return "(?:" + "|".join(_seq(alt, dotall, fail) for alt in av[1]) + ")"
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)):
        lo, hi, sub = av
        top = "" if hi is _c.MAXREPEAT else str(hi)
        return f"(?:{_seq(sub, dotall, fail)}){{{lo},{top}}}"
    if op is getattr(_c, "ATOMIC_GROUP", None):
        return f"(?:{_seq(av, dotall, fail)})"
    raise fail(f"regex construct {str(op).lower()} cannot be enforced")


def _one_char(op: Any, av: Any, dotall: bool, fail: Fail) -> str:
    """A one-character matcher: its plain characters as a class, and each JSON special it
    matches as its escape sequence."""
    if op is _c.LITERAL:
        ch = chr(av)
        return re.escape(json_escape(ch)) if ch in _SPECIALS else rust_char(ch)
    if op is _c.ANY:
        plain, specials = _PLAIN, [c for c in _SPECIALS if dotall or c != "\n"]
    else:
        items = [(_c.LITERAL, av)] if op is _c.NOT_LITERAL else list(av)
        negated = op is _c.NOT_LITERAL
        if items and items[0][0] is _c.NEGATE:
            negated, items = True, items[1:]
        body = "".join(_class_item(o, a, fail) for o, a in items)
        plain = f"[[{'^' if negated else ''}{body}]&&{_PLAIN}]"
        specials = [c for c in _SPECIALS if _member(items, c) != negated]
    escapes = [re.escape(json_escape(c)) for c in specials]
    return "(?:" + "|".join([plain, *escapes]) + ")"


_SPACE = "\t\n\x0b\x0c\r"  # the JSON specials that Rust's (llguidance's) \s matches


def _member(items: Any, ch: str) -> bool:
    """Whether a class's items match `ch`, one of the JSON specials (no digit, letter or
    word character among them)."""
    for op, av in items:
        if (op is _c.LITERAL and chr(av) == ch) or (op is _c.RANGE and av[0] <= ord(ch) <= av[1]):
            return True
        if op is _c.CATEGORY and av in (_c.CATEGORY_NOT_DIGIT, _c.CATEGORY_NOT_WORD):
            return True
        if op is _c.CATEGORY and (av is _c.CATEGORY_SPACE) == (ch in _SPACE) \
                and av in (_c.CATEGORY_SPACE, _c.CATEGORY_NOT_SPACE):
            return True
    return False


def _class_item(op: Any, av: Any, fail: Fail) -> str:
    if op is _c.LITERAL:
        return rust_char(chr(av))
    if op is _c.RANGE:
        return f"{rust_char(chr(av[0]))}-{rust_char(chr(av[1]))}"
    if op is _c.CATEGORY:
        names = {_c.CATEGORY_DIGIT: r"\d", _c.CATEGORY_NOT_DIGIT: r"\D",
                 _c.CATEGORY_SPACE: r"\s", _c.CATEGORY_NOT_SPACE: r"\S",
                 _c.CATEGORY_WORD: r"\w", _c.CATEGORY_NOT_WORD: r"\W"}
        if av in names:
            return names[av]
    raise fail(f"regex class item {str(op).lower()} cannot be enforced")
