"""Walking a JSON Schema's subschemas with their JSON pointers.

Used to name the pointer of a keyword the engine rejects, and by the runaway guards to rewrite
numeric and string subschemas. Property *names* are never mistaken for keywords: only
positions that hold a schema are visited.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

# keyword -> how its value holds subschemas
_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if",
        "then", "else", "unevaluatedProperties", "unevaluatedItems", "items")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def escape(token: str) -> str:
    """RFC 6901 escaping of one pointer segment."""
    return token.replace("~", "~0").replace("/", "~1")


def subschemas(
    schema: Any, pointer: str = "", *, skip: frozenset[str] = frozenset()
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (pointer, subschema) for `schema` and every schema nested in it, depth first.

    `skip` names keywords whose subschemas are not entered (e.g. `not`, where narrowing a
    subschema would widen the whole).
    """
    if not isinstance(schema, dict):
        return
    yield pointer, schema
    for key, value in schema.items():
        if key in skip:
            continue
        child = f"{pointer}/{escape(key)}"
        if key in _ONE and isinstance(value, dict):
            yield from subschemas(value, child, skip=skip)
        elif key in _LIST and isinstance(value, list):
            for i, item in enumerate(value):
                yield from subschemas(item, f"{child}/{i}", skip=skip)
        elif key in _MAP and isinstance(value, dict):
            for name, item in value.items():
                yield from subschemas(item, f"{child}/{escape(name)}", skip=skip)
        elif key == "dependencies" and isinstance(value, dict):
            for name, item in value.items():
                yield from subschemas(item, f"{child}/{escape(name)}", skip=skip)


def map_subschemas(schema: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of `schema` with every subschema directly inside it replaced by `fn` of it
    (the positions `subschemas` visits, booleans included)."""
    out = dict(schema)
    for key, value in schema.items():
        if key in _ONE and isinstance(value, dict | bool):
            out[key] = fn(value)
        elif key in _LIST and isinstance(value, list):
            out[key] = [fn(item) for item in value]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: fn(item) for name, item in value.items()}
        elif key == "dependencies" and isinstance(value, dict):
            out[key] = {name: fn(item) if isinstance(item, dict | bool) else item
                        for name, item in value.items()}
    return out


def resolve_pointer(schema: Any, pointer: str) -> Any:
    """The value at JSON pointer `pointer` ("" or "/a/0/b", unescaped per RFC 6901) inside
    `schema`; KeyError, IndexError or TypeError where there is none."""
    node = schema
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            if not key.isdigit():
                raise KeyError(pointer)
            node = node[int(key)]
        else:
            node = node[key]
    return node


_REFERENCES = ('"$ref"', '"$dynamicRef"', '"$recursiveRef"')


def has_reference(schema: Any) -> bool:
    """Whether a reference keyword occurs anywhere in `schema` (a validator built on it alone
    could not resolve it)."""
    text = json.dumps(schema)
    return any(k in text for k in _REFERENCES)


def keyword_pointers(schema: Any, keyword: str) -> list[str]:
    """Pointers to every occurrence of `keyword` used as a keyword inside `schema`."""
    return [f"{p}/{escape(keyword)}" for p, s in subschemas(schema) if keyword in s]


def format_pointers(schema: Any, fmt: str) -> list[str]:
    """Pointers to every `format` keyword whose value is `fmt`."""
    return [f"{p}/format" for p, s in subschemas(schema) if s.get("format") == fmt]
