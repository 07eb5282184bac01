"""What a `%json` schema would cost llguidance, checked before llguidance is given it.

llguidance bounds most of its work with its own limits (lexer fuel, items per row, grammar
symbols), but some of its JSON constructions are built whole before any limit is checked, and
their size grows faster than the schema. Such a schema would take the process's memory first,
so those constructions are counted here, from the schema alone, and refused with a 400 that
names the keyword, its pointer and the limit.

Measured here (llguidance 1.9.1, the Gemma vocabulary; docs/benchmarks.md, "Hostile
schemas"):

- `minProperties: 1` beside k optional properties and `additionalProperties: false`, where
  rewrite.py has not rewritten it (over MAX_FIRST_PRESENT optional properties, or beside
  `maxProperties`): llguidance writes one branch per property that may come first, each
  listing the ones after it. That is ~k² symbols, and as many items open at the `{`: from
  ~40 properties decoding stops at the first token (max_items_in_row), at ~170 llguidance
  panics on its 65,535-symbol table, at 1,000 the compile takes ~80 s and 2.8 GB, and at
  20,000 (a `propertyNames` enum rewritten into properties) it passed 16 GB.
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import GrammarTooComplexError
from .rewrite import MAX_FIRST_PRESENT
from .schema_walk import keyword_pointers, resolve_pointer, subschemas

# Optional properties beside `minProperties` that llguidance's own construction decodes.
MAX_OPTIONAL_BESIDE_MIN_PROPERTIES = 32


def cost_error(schema: Any, *, named_in: Any = None) -> GrammarTooComplexError | None:
    """The 400 for the first construction in `schema` (as llguidance will be given it) that
    llguidance would build at a cost past the limits above; None where there is none.
    `named_in`: the schema the user wrote, where `schema` is a rewrite of it; the error
    points into it."""
    for pointer, optional in _too_costly(schema):
        pointer = _user_pointer(pointer, "minProperties", named_in)
        return GrammarTooComplexError(
            f"'minProperties' at '{pointer}' beside {optional} optional properties is "
            "too costly for the grammar engine (its alternatives grow with the square of "
            f"their number); the limit is {MAX_OPTIONAL_BESIDE_MIN_PROPERTIES} here, "
            f"{MAX_FIRST_PRESENT} beside nothing but properties, required and "
            "additionalProperties: make some of them required, or drop minProperties",
            keyword="minProperties", pointer=pointer)
    return None


def without_costly(schema: Any) -> tuple[Any, list[str]]:
    """(`schema` without the keywords `cost_error` refuses, their pointers): what a lenient
    compile enforces, and what it reports as not enforced."""
    found = [pointer for pointer, _ in _too_costly(schema)]
    if not found:
        return schema, []
    out = copy.deepcopy(schema)
    for pointer in found:
        holder = resolve_pointer(out, pointer.rsplit("/", 1)[0])
        del holder["minProperties"]
    return out, found


def _too_costly(schema: Any) -> list[tuple[str, int]]:
    """(pointer of each minProperties past the limit, its optional properties)."""
    found = []
    for pointer, s in subschemas(schema):
        least = s.get("minProperties")
        props = s.get("properties")
        if not isinstance(least, int | float) or least < 1 or not isinstance(props, dict) \
                or s.get("additionalProperties") is not False:
            continue
        listed = s.get("required")
        required = set(listed) if isinstance(listed, list) else set()
        optional = len([k for k, v in props.items() if k not in required and v is not False])
        if optional > MAX_OPTIONAL_BESIDE_MIN_PROPERTIES:
            found.append((f"{pointer}/minProperties", optional))
    return found


def _user_pointer(pointer: str, keyword: str, user_schema: Any) -> str:
    """`pointer` where it names `keyword` in the user's schema too, else the user's first
    `keyword` (a rewrite may have moved it)."""
    if user_schema is None:
        return pointer
    try:
        resolve_pointer(user_schema, pointer)
        return pointer
    except (KeyError, IndexError, TypeError):
        return next(iter(keyword_pointers(user_schema, keyword)), pointer)
