"""Where a JSON value ends, read without recursion.

`json.loads` recurses once per nesting level and raises RecursionError near Python's limit
(~1,000 levels, fewer deep in a server's stack). A grammar that allows any value (`{}`, an
untyped property, a recursive schema) lets a model write `[[[[...]]]]` 5,000 deep, and the
turn's parser must still find where it ends: it falls back to this scan when `json.loads`
gives up.
"""

from __future__ import annotations

import re

_WS = re.compile(r"[ \t\n\r]*")
_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
_SCALAR = re.compile(_STRING + r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
                     r"|true|false|null")
_KEY = re.compile(_STRING + r"[ \t\n\r]*:[ \t\n\r]*")


def scan_json(text: str, pos: int = 0) -> tuple[int, int] | None:
    """(end, depth) of the JSON value that starts at `text[pos]` (no whitespace before it),
    depth being how many arrays / objects nest at its deepest; None where no complete value
    starts there (invalid, or cut short)."""
    closers: list[str] = []
    depth = 0
    i = pos
    while True:
        c = text[i:i + 1]
        if c in ("{", "["):  # a container: open it, then its first key / value or its end
            close = "}" if c == "{" else "]"
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            if text.startswith(close, i):
                depth = max(depth, len(closers) + 1)
                i += 1
            else:
                closers.append(close)
                depth = max(depth, len(closers))
                if close == "}":
                    m = _KEY.match(text, i)
                    if m is None:
                        return None
                    i = m.end()
                continue
        else:
            m = _SCALAR.match(text, i)
            if m is None:
                return None
            i = m.end()
        while True:  # after a value: close what ends here, or go on to the next item
            if not closers:
                return i, depth
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            c = text[i:i + 1]
            if c == closers[-1]:
                closers.pop()
                i += 1
                continue
            if c != ",":
                return None
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            if closers[-1] == "}":
                m = _KEY.match(text, i)
                if m is None:
                    return None
                i = m.end()
            break


__all__ = ["scan_json"]
