"""The intersection of two schemas said without `allOf`, where it is short to say.

llguidance intersects schemas itself (`allOf`, keywords beside a `$ref` or an `anyOf`, a
property that a patternProperties regex also matches), but not through a reference that is
still being defined, that is inside a recursive definition ("circular references with sibling
keys are not supported"). The rewrites that meet such an intersection ask `Intersection.of`
for one llguidance does not have to make:

- identical schemas (annotations aside) are one; `true` / `{}` is the other side; `false`
  is `false`;
- a `$ref` is its target (one level: the target's own references stay references);
- an `anyOf` loses the branches disjoint from the other side (disjoint.py), and the other
  side is taken into each branch left;
- a finite set (`enum` / `const`) is the values both sides accept (jsonschema, the
  post-check's validator, decides);
- two plain schemas merge keyword by keyword: `type` to the common kinds, bounds to the
  tighter one, `required` to the union, each property to the intersection of its two
  schemas (a property one side does not name meets that side's `additionalProperties`),
  `items` to the intersection of the two.

Each step is exact: a schema is the conjunction of its keywords, and each merged keyword
accepts exactly what the two it replaces accept together. Anything else (patternProperties,
different patterns, draft 4's boolean exclusive bounds, oneOf / not / if...) gives None: the
caller leaves the schemas as they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .complement import ANNOTATIONS, REF_OVERRIDES
from .disjoint import KINDS, disjoint, kinds_of, type_of_kinds

Resolve = Callable[[str], Any]
MAX_DEPTH = 8

_MINIMA = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
_MAXIMA = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
_EQUAL = ("pattern", "format", "multipleOf")  # kept where only one side has it, or both alike
_MERGED = frozenset({"type", "enum", "const", "properties", "additionalProperties",
                     "required", "items", "uniqueItems", *_MINIMA, *_MAXIMA, *_EQUAL})


class Intersection:
    def __init__(self, resolve: Resolve, dialect: type[Any],
                 valid: Callable[[Any, Any], bool | None]):
        """`valid(value, schema)`: whether jsonschema accepts the value (None: cannot tell,
        e.g. a reference it cannot resolve)."""
        self.resolve = resolve
        self.dialect = dialect
        self.valid = valid
        self.overrides = dialect in REF_OVERRIDES

    def of(self, a: Any, b: Any, depth: int = 0) -> Any | None:
        """A schema accepting exactly what both `a` and `b` accept, without `allOf`; None
        where this module does not build one."""
        if depth > MAX_DEPTH:
            return None
        a, b = _bare(a), _bare(b)
        if a is None or b is None:
            return None
        if same_json(a, b):
            return a
        for x, y in ((a, b), (b, a)):
            if x is True or x == {}:
                return y
            if x is False:
                return False
        if not isinstance(a, dict) or not isinstance(b, dict):
            return None
        # (the side written first keeps its properties first: llguidance's key order)
        for x, y, first in ((a, b, True), (b, a, False)):
            if "$ref" in x:
                if len(x) > 1 and not self.overrides:
                    return None  # from 2019-09 a $ref beside keywords is a conjunction
                try:
                    target = self.resolve(x["$ref"])
                except (KeyError, IndexError, TypeError, ValueError):
                    return None
                return self.of(target, y, depth + 1) if first else \
                    self.of(y, target, depth + 1)
        for x, y, first in ((a, b, True), (b, a, False)):
            if isinstance(x.get("anyOf"), list):
                return self._any_of(x, y, depth, first)
        if "enum" in a or "const" in a or "enum" in b or "const" in b:
            return self._values(a, b)
        if not set(a) <= _MERGED or not set(b) <= _MERGED:
            return None
        return self._merge(a, b, depth)

    def _any_of(self, x: dict[str, Any], y: Any, depth: int, first: bool) -> Any | None:
        rest = {k: v for k, v in x.items() if k != "anyOf"}
        kept = []
        for branch in x["anyOf"]:
            if disjoint({"allOf": [rest, branch]}, y, self.resolve, self.dialect):
                continue
            with_rest = self.of(rest, branch, depth + 1)
            if with_rest is None:
                return None
            meet = self.of(with_rest, y, depth + 1) if first else \
                self.of(y, with_rest, depth + 1)
            if meet is None:
                return None
            if meet is not False:
                kept.append(meet)
        if not kept:
            return False
        return kept[0] if len(kept) == 1 else {"anyOf": kept}

    def _values(self, a: dict[str, Any], b: dict[str, Any]) -> Any | None:
        listed = a if "enum" in a or "const" in a else b
        values = [listed["const"]] if "const" in listed else listed["enum"]
        if not isinstance(values, list):
            return None
        kept = []
        for v in values:
            verdicts = (self.valid(v, a), self.valid(v, b))
            if None in verdicts:
                return None
            if all(verdicts):
                kept.append(v)
        return {"enum": kept} if kept else False

    def _merge(self, a: dict[str, Any], b: dict[str, Any], depth: int) -> Any | None:
        out: dict[str, Any] = {}
        if "type" in a or "type" in b:
            kinds = set(KINDS)
            for side in (a, b):
                if "type" in side:
                    admitted = kinds_of(side["type"])
                    if admitted is None:
                        return None
                    kinds &= admitted
            names = type_of_kinds(kinds)
            if names is None:
                return None
            if not names:
                return False
            out["type"] = names[0] if len(names) == 1 else names
        for k in _MINIMA + _MAXIMA:
            values = [s[k] for s in (a, b) if k in s]
            if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
                return None  # draft 4's exclusive flags, or not a number
            if values:
                out[k] = max(values) if k in _MINIMA else min(values)
        for k in _EQUAL:
            values = [s[k] for s in (a, b) if k in s]
            if len(values) == 2 and values[0] != values[1]:
                return None
            if values:
                out[k] = values[0]
        if a.get("uniqueItems") is True or b.get("uniqueItems") is True:
            out["uniqueItems"] = True
        if "items" in a or "items" in b:
            if isinstance(a.get("items"), list) or isinstance(b.get("items"), list):
                return None  # tuples: not merged here
            items = self.of(a.get("items", True), b.get("items", True), depth + 1)
            if items is None:
                return None
            if items is not True:
                out["items"] = items
        if not self._object(a, b, out, depth):
            return None
        return out

    def _object(self, a: dict[str, Any], b: dict[str, Any], out: dict[str, Any],
                depth: int) -> bool:
        pa, pb = a.get("properties", {}), b.get("properties", {})
        ra, rb = a.get("required", []), b.get("required", [])
        if not all(isinstance(v, dict) for v in (pa, pb)) or \
                not all(isinstance(v, list) for v in (ra, rb)):
            return False
        more_a = a.get("additionalProperties", True)
        more_b = b.get("additionalProperties", True)
        properties: dict[str, Any] = {}
        for name in dict.fromkeys([*pa, *pb]):
            meet = self.of(pa.get(name, more_a), pb.get(name, more_b), depth + 1)
            if meet is None:
                return False
            properties[name] = meet
        if properties:
            out["properties"] = properties
        if "additionalProperties" in a or "additionalProperties" in b:
            more = self.of(more_a, more_b, depth + 1)
            if more is None:
                return False
            if more is not True:
                out["additionalProperties"] = more
        required = list(dict.fromkeys([*ra, *rb]))
        if required:
            out["required"] = required
        return True


def same_json(a: Any, b: Any) -> bool:
    """Whether two values are the same JSON text (not ==: in Python 1 == True)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _bare(schema: Any) -> Any:
    """`schema` without its annotations; None where it sets a base URI (`$id`), which a
    move would change the meaning of its references by."""
    if not isinstance(schema, dict):
        return schema
    if "$id" in schema or isinstance(schema.get("id"), str):
        return None
    return {k: v for k, v in schema.items()
            if k not in ANNOTATIONS and not k.startswith("x-")}
