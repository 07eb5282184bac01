"""Regexes for raw (unquoted) string values: a string schema's `pattern` and `format`.

Per-key formats (GLM) write a string argument as its bare text, so the text must be exactly
the string: a value's `pattern` and `format` become regexes over that text, intersected in one
lexeme with its length bounds and with "does not contain the value end marker" (llguidance's
`&` and `~` on terminals). What these regexes accept is a subset of what the jsonschema
post-check accepts, never more:

- `pattern` is read with Python's regex parser, the one the post-check (`re.search`) uses,
  and written back in Rust's syntax (llguidance's) node by node, so that no construct is
  read differently: unanchored, as JSON Schema says (a match anywhere in the text), unless it
  starts with `^` / ends with `$`. `\\d`, `\\D` are Unicode decimal digits in both; `\\w` is
  written `[\\p{L}\\p{N}_]` (Python's word characters: letters, numbers, underscore) and
  `\\s` `[\\s\\x1c-\\x1f]` (Python's whitespace adds the four separators to Unicode's). `$` is
  the end of the text (Python's also matches before a final newline: narrower). Refused
  (None): anchors anywhere but at the ends, `(?m)`, word boundaries, look-arounds,
  back-references, possessive and atomic repeats, `(?a)` / `(?L)`, and Rust's class syntax
  that Python reads as literals (`[[:alpha:]]`, `&&`, `--`, `~~` in a class).
- `format`: `date` (leap years included, as `datetime.date.fromisoformat`), `ipv4` (no
  leading zeros, as `ipaddress`), `uuid` (8-4-4-4-12 hex digits: the post-check also takes
  other spellings), `email` (RFC 5321 dot-atom mailboxes: the post-check takes any text with
  an "@"), `time` and `date-time` (RFC 3339; the post-check has no checker for them unless
  `rfc3339-validator` is installed, so there it passes any string), and the formats kaname
  writes as patterns for `%json` too (`byte`, `json-pointer`, `relative-json-pointer`,
  `uri-template`); `binary` and `password` assert nothing. Other formats (`hostname`, `ipv6`,
  `uri`, `duration`, ...) return None: the caller reports them (not strict) or refuses the
  tool (strict).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema

from ..grammar.lark import slashed
from ..grammar.regex_syntax import constants as _c
from ..grammar.regex_syntax import parser as _p
from ..grammar.regex_syntax import rust_char, rust_only
from ..grammar.rewrite import NO_ASSERTION_FORMATS, format_pattern

ANY = "(?s:.*)"

# --- formats -------------------------------------------------------------------------------

_YEAR = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"  # 0001-9999, as Python's date
_LEAP4 = "(?:0[48]|[2468][048]|[13579][26])"  # two digits divisible by 4 (not 00)
_LEAP = f"(?:[0-9]{{2}}{_LEAP4}|{_LEAP4}00)"  # divisible by 4, centuries by 400 (0000 is no year)
_MONTH_DAY = ("(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
              "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              "|02-(?:0[1-9]|1[0-9]|2[0-8]))")
DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP}-02-29)"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_HEX = "[0-9A-Fa-f]"
UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_ATOM = r"[A-Za-z0-9!#$%&'*+\-\/=?\^_`{|}\~]+"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
EMAIL = rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})*"


def _time(max_fraction_digits: int | None) -> str:
    fraction = "[0-9]+" if max_fraction_digits is None else f"[0-9]{{1,{max_fraction_digits}}}"
    return (f"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.{fraction})?"
            "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")


def format_regex(fmt: str, *, max_fraction_digits: int | None = None,
                 dialect: type[Any] = jsonschema.Draft202012Validator) -> str | None:
    """The regex (whole text) of a string `format`, `ANY` where it asserts nothing, None where
    kaname has none. `max_fraction_digits` bounds the seconds' fraction (a runaway guard)."""
    if fmt in NO_ASSERTION_FORMATS:
        return ANY
    if fmt == "date":
        return DATE
    if fmt == "time":
        return _time(max_fraction_digits)
    if fmt == "date-time":
        return f"{DATE}[Tt]{_time(max_fraction_digits)}"
    if fmt in ("ipv4", "uuid", "email"):
        return {"ipv4": IPV4, "uuid": UUID, "email": EMAIL}[fmt]
    anchored = format_pattern(fmt, dialect)  # "^...$"
    if anchored is None:
        return None
    return slashed(anchored[1:-1])


# --- patterns ------------------------------------------------------------------------------

class _Refused(Exception):
    pass


@functools.lru_cache(maxsize=256)
def pattern_regex(pattern: str) -> str | None:
    """A regex (whole text, Rust syntax) for the strings in which `pattern` finds a match as
    the post-check's `re.search` does, or None where it cannot be said exactly (see the
    module docstring). The result is checked to build in llguidance."""
    if rust_only(pattern) is not None:
        return None
    try:
        tree = _p.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    flags = tree.state.flags
    if flags & (re.MULTILINE | re.ASCII | re.LOCALE):
        return None
    items = list(tree)
    start = bool(items) and items[0] == (_c.AT, _c.AT_BEGINNING)
    items = items[1:] if start else items
    end = bool(items) and items[-1] == (_c.AT, _c.AT_END)
    items = items[:-1] if end else items
    try:
        body = _seq(items, bool(flags & re.DOTALL))
    except _Refused:
        return None
    if flags & re.IGNORECASE:
        body = f"(?i:{body})"
    out = f"{'' if start else ANY}(?:{body}){'' if end else ANY}"
    return out if _builds(out) else None


def _seq(items: Any, dotall: bool) -> str:
    return "".join(_node(op, av, dotall) for op, av in items)


def _node(op: Any, av: Any, dotall: bool) -> str:
    if op is _c.LITERAL:
        return _char(chr(av))
    if op is _c.NOT_LITERAL:
        return f"[^{_char(chr(av))}]"
    if op is _c.ANY:
        return "(?s:.)" if dotall else "."
    if op is _c.IN:
        return _class(av)
    if op is _c.SUBPATTERN:
        _group, add, remove, sub = av
        if (add | remove) & ~(re.IGNORECASE | re.DOTALL | re.VERBOSE | re.UNICODE):
            raise _Refused
        inner = bool(add & re.DOTALL) or (dotall and not remove & re.DOTALL)
        on = "i" if add & re.IGNORECASE else ""
        off = "i" if remove & re.IGNORECASE else ""
        head = f"?{on}{'-' + off if off else ''}:" if on or off else "?:"
        return f"({head}{_seq(sub, inner)})"
    if op is _c.BRANCH:
        return "(?:" + "|".join(_seq(alt, dotall) for alt in av[1]) + ")"
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):  # a lazy repeat matches the same strings
        lo, hi, sub = av
        top = "" if hi is _c.MAXREPEAT else str(hi)
        return f"(?:{_seq(sub, dotall)}){{{lo},{top}}}"
    raise _Refused  # anchors inside, \b, look-arounds, back-references, possessive / atomic


# Python's \w (str.isalnum or "_") and \s (str.isspace) in Rust's Unicode classes
_CATEGORIES = {
    _c.CATEGORY_DIGIT: (r"\d", r"\d"), _c.CATEGORY_NOT_DIGIT: (r"\D", r"\D"),
    _c.CATEGORY_WORD: (r"[\p{L}\p{N}_]", r"\p{L}\p{N}_"),
    _c.CATEGORY_NOT_WORD: (r"[^\p{L}\p{N}_]", r"[^\p{L}\p{N}_]"),
    _c.CATEGORY_SPACE: (r"[\s\x1c-\x1f]", r"\s\x1c-\x1f"),
    _c.CATEGORY_NOT_SPACE: (r"[^\s\x1c-\x1f]", r"[^\s\x1c-\x1f]"),
}


def _class(items: Any) -> str:
    items = list(items)
    negated = bool(items) and items[0][0] is _c.NEGATE
    items = items[1:] if negated else items
    if not negated and len(items) == 1 and items[0][0] is _c.CATEGORY:
        return _category(items[0][1], 0)
    body = "".join(_class_item(op, av) for op, av in items)
    return f"[{'^' if negated else ''}{body}]"


def _category(av: Any, inside: int) -> str:
    if av not in _CATEGORIES:
        raise _Refused
    return str(_CATEGORIES[av][inside])


def _class_item(op: Any, av: Any) -> str:
    if op is _c.LITERAL:
        return _char(chr(av))
    if op is _c.RANGE:
        return f"{_char(chr(av[0]))}-{_char(chr(av[1]))}"
    if op is _c.CATEGORY:
        return _category(av, 1)
    raise _Refused


def _char(ch: str) -> str:
    """One character as a Rust regex that means exactly it."""
    if 0xD800 <= ord(ch) <= 0xDFFF:  # a lone surrogate is no character of any text
        raise _Refused
    return rust_char(ch)


def literal(text: str) -> str:
    """`text` as a regex matching exactly it."""
    return "".join(_char(ch) for ch in text)


def _builds(regex: str) -> bool:
    import llguidance as llg

    from ..grammar.compiler import default_limits

    grammar = llg.LLMatcher.grammar_from_lark(f"start: V\nV: /{regex}/\n")
    is_error, _ = llg.LLMatcher.validate_grammar_with_warnings(grammar, None,
                                                                limits=default_limits())
    return not is_error
