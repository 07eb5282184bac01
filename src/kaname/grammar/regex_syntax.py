"""Reading a pattern with Python's regex parser and writing it back in Rust's regex syntax
(llguidance's), where a pattern must keep one meaning across the two: what both readers of
`re._parser`'s tree share (custom tools' JSON escaping in `embed.py`, per-key raw values in
`formats/raw_text.py`)."""

from __future__ import annotations

# The regex parser behind `re` (Python >= 3.11 keeps it in re._parser): its syntax tree is the
# one piece of regex reading kaname needs; typeshed has no stubs for it.
import re._constants as constants  # type: ignore[import-not-found]
import re._parser as parser  # type: ignore[import-not-found]

__all__ = ["constants", "parser", "rust_char", "rust_only"]

# Rust's regex metacharacters, plus "/" (it would end a Lark regex literal); never "<" or ">",
# which Rust reads escaped as word boundaries.
_META = set("\\.+*?()|[]{}^$#&-~/")


def rust_char(ch: str) -> str:
    """One character as a Rust regex (or class member) that means exactly it."""
    if ch in _META:
        return "\\" + ch
    if 0x20 <= ord(ch) < 0x7F or ord(ch) > 0x7F:
        return ch
    return f"\\x{ord(ch):02x}"  # control characters (both Python's and Rust's syntax)


def rust_only(pattern: str) -> str | None:
    """What in `pattern` Rust's regex reads otherwise than Python's (which reads it as
    literals or refuses it), or None: a `[` inside a class (nested classes, `[:alpha:]`), the
    class set operations `&&`, `--`, `~~`, and Unicode classes `\\p{..}`."""
    depth = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if pattern[i + 1:i + 2] in ("p", "P"):
                return "Unicode classes (\\p{...})"
            i += 2
            continue
        if depth and (ch == "[" or pattern[i:i + 2] in ("&&", "--", "~~")):
            if not (ch == "-" and pattern[i + 2:i + 3] == "]"):
                return f"Rust's class syntax ({pattern[i:i + 3]!r} inside [...])"
        if ch == "[" and not depth:
            depth = 1
            j = i + 1 + (pattern[i + 1:i + 2] == "^")  # a ']' first in a class is a literal
            i = j + 1 if pattern[j:j + 1] == "]" else j
            continue
        if ch == "]" and depth:
            depth = 0
        i += 1
    return None
