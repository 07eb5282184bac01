"""Sets of strings written as regexes: every string outside a finite set, and a pattern with
some names taken out.

Both are written with positive character ranges only (a negated class would make kaname
narrow the string escapes, guards.py) and never with look-around, which llguidance lacks.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any

Ranges = list[tuple[int, int]]  # sorted, disjoint, inclusive code point ranges

_SURROGATE_START, _SURROGATE_END = 0xD800, 0xDFFF
_MAX_CODE_POINT = 0x10FFFF
CHARACTERS: Ranges = [(0, _MAX_CODE_POINT)]
_ANY_CHAR = "(?s:.)"
_MAX_WORDS = 64


def strings_outside(words: Iterable[str], alphabet: Ranges | None = None) -> str:
    """A regex (unanchored, to be wrapped in ^...$) matching every string of characters from
    `alphabet` (all characters by default) that is not in `words`: walking the words' trie, a
    string leaves the set where it stops at a node that ends no word, or goes on with a
    character no word continues with."""
    letters = CHARACTERS if alphabet is None else alphabet
    trie: dict[str, Any] = {}
    for w in words:
        if not all(_member(ord(ch), letters) for ch in w):
            continue  # not a string over the alphabet: nothing to take out
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # the end-of-word mark ("" is no character)
    rest = _ANY_CHAR if alphabet is None else _class(letters)
    return _outside(trie, letters, rest)


def _outside(node: dict[str, Any], letters: Ranges, rest: str) -> str:
    children = sorted(k for k in node if k)
    alternatives = [] if "" in node else [""]
    other = _class(_minus(letters, [ord(c) for c in children]))
    if other:
        alternatives.append(f"{other}{rest}*")
    for ch in children:
        alternatives.append(_code(ord(ch)) + _outside(node[ch], letters, rest))
    alternatives = list(dict.fromkeys(alternatives))
    if alternatives == [""]:
        return ""
    return "(?:" + "|".join(alternatives) + ")"


def pattern_without(pattern: str, names: Iterable[str]) -> str | None:
    """A regex matching what `pattern` matches (searched, as JSON Schema does) except
    `names`, or None where `pattern` is not one this can read: one that matches every string,
    a class repeated over the whole string (`^[a-z0-9_]*$`, `^([A-Z])+$`), or one of a few
    words (`^[ab]{1,2}$`)."""
    names = set(names)
    if matches_everything(pattern):
        return "^" + strings_outside(names) + "$"
    words = pattern_words(pattern, _MAX_WORDS)
    if words is not None:  # a few words: the others, spelled out
        rest = sorted(words - names)
        if not rest:
            return None
        return "^(?:" + "|".join("".join(_code(ord(c)) for c in w) for w in rest) + ")$"
    repeated = _repeated_class(pattern)
    if repeated is None or repeated[1] > 1 or repeated[2] is not None:
        return None
    letters, least, _ = repeated
    if least:
        names.add("")
    return "^" + strings_outside(names, letters) + "$"


def pattern_words(pattern: str, limit: int) -> set[str] | None:
    """Every string `pattern` matches, read as llguidance reads it (`$` at the very end),
    for a class repeated a bounded number of times (`^[0-9]{1,2}$`); None where there are
    more than `limit` or the pattern is not one this reads."""
    repeated = _repeated_class(pattern)
    if repeated is None:
        return None
    letters, least, most = repeated
    if most is None:
        return None
    size = sum(b - a + 1 for a, b in letters)
    if sum(size ** k for k in range(least, most + 1)) > limit:
        return None
    chars = [chr(c) for a, b in letters for c in range(a, b + 1)]
    return {"".join(t) for k in range(least, most + 1)
            for t in itertools.product(chars, repeat=k)}


def pattern_complement(pattern: str) -> str | None:
    """A regex matching exactly the strings in which a search for `pattern` fails, for a
    class repeated over the whole string (`^[C]*$`, `^[C]+$`, `^[C]{m,n}$`); None for other
    patterns.

    Read as jsonschema (Python's `re`) reads it, where `$` also matches before a final
    newline: "ab\n" matches `^[a-z]+$`, so the complement leaves out C+ followed by one
    newline. A failing string has a first character outside C that is not a newline, or is
    that newline with more after it, or is C repeated a number of times outside m..n,
    followed by one newline or not."""
    repeated = _repeated_class(pattern)
    if repeated is None:
        return None
    letters, least, most = repeated
    inside = _class(letters)
    if _member(ord("\n"), letters):
        if least > 1 or most is not None:
            return None  # C{m,n} and C{m,n} + newline overlap in ways not written here
        # a newline is in C: only characters outside C fail it
        outside = _class(_minus_ranges(CHARACTERS, letters))
        alternatives = [f"{inside}*{outside}{_ANY_CHAR}*"] if outside else []
        if least:
            alternatives.append("")
    else:
        other = _class(_minus(_minus_ranges(CHARACTERS, letters), [ord("\n")]))
        alternatives = [f"{inside}*{other}{_ANY_CHAR}*", f"{inside}*\\n{_ANY_CHAR}+"]
        for end in ("", "\\n"):  # too few or too many, with or without the final newline
            if least == 1:
                alternatives.append(end)
            elif least > 1:
                alternatives.append(f"{inside}{{0,{least - 1}}}{end}")
            if most is not None:
                alternatives.append(f"{inside}{{{most + 1},}}{end}")
    if not alternatives:
        return None
    return "^(?:" + "|".join(alternatives) + ")$"


def matches_everything(pattern: str) -> bool:
    """Whether a search for `pattern` succeeds in every string: it matches the empty string
    and nothing in it looks at what follows (no `$`, no boundary, no look-around) or back
    (no backreference, conditional, atomic group or possessive quantifier), so its empty
    match at the start of any string stands."""
    if any(t in pattern for t in ("$", "\\Z", "\\z", "\\b", "\\B", "(?=", "(?!", "(?<",
                                  "(?(", "(?>", "(?P=", "*+", "++", "?+", "}+")) \
            or re.search(r"\\[1-9]", pattern):
        return False  # also no backreference, conditional, atomic group or possessive
    try:
        return re.search(pattern, "") is not None
    except re.error:
        return False


_CLASS = r"\[(?P<body>(?:\\.|[^\]\\])+)\]"
_TIMES = r"[*+]|\{\d+(?:,\d*)?\}"
# ^[C]Q$, ^([C]Q)$, ^([C])Q$ (and with (?:...)); no Q is once
_REPEATED = re.compile(
    rf"\^(?:{_CLASS}(?P<q1>{_TIMES})?|\((?:\?:)?{_CLASS.replace('body', 'body2')}"
    rf"(?:(?P<q2>{_TIMES})\)|\)(?P<q3>{_TIMES})?))\$")


def _repeated_class(pattern: str) -> tuple[Ranges, int, int | None] | None:
    """(the class's characters, the least and most repetitions, None for no most) for
    `^[C]*$`, `^[C]+$`, `^[C]{m,n}$` and the same with the class in a group; None otherwise,
    or where the class holds anything but
    characters, ranges, escaped punctuation and `\\d` / `\\s` / `\\w` (and their negations),
    which are read as Python's `re` reads them, like the post-check."""
    m = _REPEATED.fullmatch(pattern)
    if m is None:
        return None
    body = m.group("body") or m.group("body2")
    if body.startswith("^"):
        return None
    items: list[tuple[int, bool]] = []  # (code point, written escaped)
    shorthand: Ranges = []  # what \\d, \\s, \\w... in the class stand for
    i = 0
    while i < len(body):
        if body[i] == "\\":
            if i + 1 >= len(body):
                return None
            if body[i + 1] in _SHORTHANDS:
                shorthand.extend(_shorthand(body[i + 1]))
            elif body[i + 1].isalnum():
                return None
            else:
                items.append((ord(body[i + 1]), True))
            i += 2
        elif body[i] == "[":
            return None  # a POSIX class or a nested set
        else:
            items.append((ord(body[i]), False))
            i += 1
    dashes = [j for j, item in enumerate(items) if item == (ord("-"), False)]
    if shorthand and any(0 < j < len(items) - 1 for j in dashes):
        return None  # a range beside a shorthand: where the shorthand stood is lost here
    codes: list[int] = []
    i = 0
    while i < len(items):
        if i + 2 < len(items) and items[i + 1] == (ord("-"), False):
            lo, hi = items[i][0], items[i + 2][0]
            if lo > hi:
                return None
            codes.extend(range(lo, hi + 1))
            i += 3
        else:
            codes.append(items[i][0])
            i += 1
    quantifier = m.group("q1") or m.group("q2") or m.group("q3") or "{1}"
    if quantifier in "*+":
        least, most = (0 if quantifier == "*" else 1), None
    else:
        low, _, high = quantifier[1:-1].partition(",")
        least = int(low)
        most = least if "," not in quantifier else (int(high) if high else None)
        if most is not None and most < least:
            return None
    return _union(_ranges(codes), shorthand), least, most


_SHORTHANDS = "dDsSwW"


@functools.cache
def _shorthand(letter: str) -> tuple[tuple[int, int], ...]:
    """The characters `\\<letter>` stands for, as jsonschema's regex engine (Python's `re`,
    Unicode-aware) reads it: every code point is asked once."""
    regex = re.compile("\\" + letter)
    return tuple(_ranges([c for c in range(_MAX_CODE_POINT + 1)
                          if not _in_surrogates(c) and regex.match(chr(c))]))


def _union(a: Ranges, b: Iterable[tuple[int, int]]) -> Ranges:
    merged: Ranges = []
    for lo, hi in sorted([*a, *b]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _ranges(codes: Sequence[int]) -> Ranges:
    out: Ranges = []
    for c in sorted(set(codes)):
        if out and c == out[-1][1] + 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def _member(code: int, letters: Ranges) -> bool:
    return any(a <= code <= b for a, b in letters)


def _minus(letters: Ranges, codes: Sequence[int]) -> Ranges:
    out: Ranges = []
    taken = sorted(set(codes))
    for a, b in letters:
        start = a
        for c in taken:
            if start <= c <= b:
                if c > start:
                    out.append((start, c - 1))
                start = c + 1
        if start <= b:
            out.append((start, b))
    return out


def _minus_ranges(letters: Ranges, taken: Ranges) -> Ranges:
    out: Ranges = []
    for a, b in letters:
        start = a
        for c, d in taken:
            if d < start or c > b:
                continue
            if c > start:
                out.append((start, c - 1))
            start = max(start, d + 1)
        if start <= b:
            out.append((start, b))
    return out


def _class(letters: Ranges) -> str:
    """A character class of `letters` ("" where there are none). A range may cover the
    surrogates, but not end in them: they are not characters."""
    letters = [(_SURROGATE_END + 1 if _in_surrogates(a) else a,
                _SURROGATE_START - 1 if _in_surrogates(b) else b) for a, b in letters]
    letters = [(a, b) for a, b in letters if a <= b]
    if not letters:
        return ""
    return "[" + "".join(_code(a) if a == b else f"{_code(a)}-{_code(b)}"
                         for a, b in letters) + "]"


def _in_surrogates(cp: int) -> bool:
    return _SURROGATE_START <= cp <= _SURROGATE_END


def _code(cp: int) -> str:
    return f"\\U{cp:08X}" if cp > 0xFFFF else f"\\u{cp:04X}"
