"""Runaway guards: bounds on output that is legal but never ends.

Seen on real models: a stray `"` closes a string and the model then emits legal whitespace
until max_tokens; a number grows `1000000…` forever. Each guard narrows the schema only
(the guarded language is a subset of the user's), so output stays valid for the original
schema, which is what the post-check validates against. Every guard that took effect is
reported in `applied` so nothing is bounded silently.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from .schema_walk import escape, map_subschemas, resolve_pointer, subschemas

# Narrowing inside these would widen the whole schema (`not`), or change which branch
# matches (`oneOf`, `if`), so they are left alone.
_NO_REWRITE = frozenset({"not", "if", "oneOf"})


@dataclass(frozen=True)
class Guards:
    """Bounds applied to JSON constraints. `None` turns a guard off.

    separators: JSON item and key separators, fixed, with no other whitespace: the default
        `(", ", ": ")` is `json.dumps`'s layout, so no whitespace can run away and the
        separators and keys become forced tokens. `None` allows flexible whitespace, bounded by
        max_whitespace.
    max_whitespace: with separators=None, whitespace characters allowed at each place JSON
        allows whitespace (0 = compact JSON; None = unbounded).
    separator_space: with separators, at most this many spaces after each separator (and no
        other whitespace): `Guards(separators=(",", ":"), separator_space=1)` accepts both
        `json.dumps`'s layout and compact JSON (`{"a":1}`, which DeepSeek's and harmony's
        documentation write). Off by default: measured on the adversarial runtime, the
        optional space lets 2-4 of 60 runs grow free-form property names until max_tokens,
        where the fixed layout ends all 60 (docs/benchmarks.md, "JSON layout").
    max_integer_digits: digits before the decimal point of numbers without user bounds.
    max_fraction_digits: digits after the decimal point of numbers without `multipleOf`, and
        of the seconds of `date-time` / `time` strings without maxLength (as a maxLength).
    max_string_length: maxLength for strings without maxLength, enum or const (off by
        default: strings may legitimately be long). Keep it generous: it also applies to
        `format` and `pattern` strings, and a cap below their shortest match leaves no output.
    max_array_items: maxItems for arrays without maxItems (off by default; never below the
        array's minItems or its prefixItems).
    max_depth: nesting depth of what has no depth of its own (off by default): a recursive
        `$ref` is followed at most this many times (the definitions unrolled, the last level
        without the recursive branch), and an untyped value nests at most this many arrays /
        objects. Schemas whose recursion runs under `not` / `if` / `oneOf`, or through `#`,
        are left alone (cutting there could widen them).
    max_parallel_calls: tool calls one turn may make where parallel calls are allowed (the
        turn's grammar ends the calls there). A base model given tools can repeat one call
        until max_tokens (303 identical calls in one Codex turn on the embedded model); real
        agents' turns hold a handful (Claude Code batches a few reads), so 8.
    """

    separators: tuple[str, str] | None = (", ", ": ")
    max_whitespace: int | None = 8
    separator_space: int = 0
    max_integer_digits: int | None = 15
    max_fraction_digits: int | None = 8
    max_string_length: int | None = None
    max_array_items: int | None = None
    max_depth: int | None = None
    max_parallel_calls: int | None = 8

    def __post_init__(self) -> None:
        if self.max_parallel_calls is not None and self.max_parallel_calls < 1:
            raise ValueError("max_parallel_calls must be at least 1 (None: no cap)")

    def key(self) -> tuple[object, ...]:
        return (self.separators, self.max_whitespace, self.separator_space,
                self.max_integer_digits, self.max_fraction_digits, self.max_string_length,
                self.max_array_items, self.max_depth)


@dataclass
class GuardedSchema:
    schema: Any
    applied: dict[str, Any] = field(default_factory=dict)


def _types(s: dict[str, Any]) -> set[str]:
    t = s.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return set()


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


# A value of any type whose typed branches the guards can bound: what kaname writes wherever a
# schema leaves a value untyped (`{}`, `true`, an object's implicit additional properties, an
# array's implicit items), and what json_object content is made of.
ANY_VALUE_NAME = "kaname_any"


def _any_value(ref: dict[str, str]) -> dict[str, Any]:
    return {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "number"},
                      {"type": "string"}, {"type": "array", "items": dict(ref)},
                      {"type": "object", "additionalProperties": dict(ref)}]}


def _any_values(defs: str, depth: int | None) -> dict[str, Any]:
    """The any-value's definitions: one recursive value, or with a depth cap a chain of them,
    each level's arrays and objects holding the next, the last level's empty."""
    ref = {"$ref": f"#/{defs}/{ANY_VALUE_NAME}"}
    if depth is None:
        return {ANY_VALUE_NAME: _any_value(ref)}
    names = [ANY_VALUE_NAME, *(f"{ANY_VALUE_NAME}@{k}" for k in range(1, depth + 1))]
    out = {}
    for k, name in enumerate(names):
        if k < depth:
            out[name] = _any_value({"$ref": f"#/{defs}/{names[k + 1]}"})
        else:
            out[name] = {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "number"},
                                   {"type": "string"}, {"type": "array", "maxItems": 0},
                                   {"type": "object", "additionalProperties": False}]}
    return out


def _defs_key(root: dict[str, Any]) -> str:
    """Where definitions live in this schema's dialect: llguidance resolves `#/$defs/...` in
    a draft 4-7 schema only if it is written as `definitions`."""
    dialect = root.get("$schema")
    old = isinstance(dialect, str) and any(f"draft-0{n}" in dialect for n in (3, 4, 6, 7))
    return "definitions" if old or ("definitions" in root and "$defs" not in root) else "$defs"
# keywords that say nothing about which values are valid
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly", "$schema"})


def apply_guards(schema: Any, guards: Guards) -> GuardedSchema:
    """Return a narrowed copy of `schema` and which guards took effect (with pointers)."""
    out = copy.deepcopy(schema)
    applied: dict[str, Any] = {}
    if out is True:
        out = {}
    if not isinstance(out, dict):
        return GuardedSchema(out, applied)
    if guards.max_depth is not None:
        _unroll_recursion(out, guards.max_depth, applied)
    untyped = _type_untyped_values(out, guards.max_depth) if _bounds_values(guards) else []
    if untyped:
        applied["untyped_values"] = {"at": untyped}
    for pointer, s in subschemas(out, skip=_NO_REWRITE):
        types = _types(s)
        if types & {"integer", "number"}:
            _bound_number(s, pointer, "number" in types, guards, applied)
        if s.get("format") in _FRACTION_FORMATS and guards.max_fraction_digits is not None:
            _bound_seconds_fraction(s, pointer, guards.max_fraction_digits, applied)
        if "string" in types and guards.max_string_length is not None:
            if not _length_bounded(s):
                s["maxLength"] = max(guards.max_string_length, _num(s.get("minLength"), 0))
                applied.setdefault("max_string_length", {"value": guards.max_string_length,
                                                         "at": []})["at"].append(pointer or "/")
        if "array" in types and guards.max_array_items is not None and "maxItems" not in s:
            floor = max(_num(s.get("minItems"), 0), len(s.get("prefixItems") or []))
            s["maxItems"] = max(guards.max_array_items, int(floor))
            applied.setdefault("max_array_items", {"value": guards.max_array_items,
                                                   "at": []})["at"].append(pointer or "/")
    if untyped:
        _report_at_untyped(applied, untyped)
    return GuardedSchema(out, applied)


def _report_at_untyped(applied: dict[str, Any], untyped: list[str]) -> None:
    """A guard that took effect inside the any-value definition applies at the untyped places
    it stands for: report those, not kaname's own definition."""
    inside = ("/$defs/" + ANY_VALUE_NAME, "/definitions/" + ANY_VALUE_NAME)
    for name, cap in applied.items():
        at = cap.get("at")
        if name == "untyped_values" or not isinstance(at, list):
            continue
        mine = [p for p in at if p.startswith(inside)]
        if mine:
            cap["at"] = list(dict.fromkeys([p for p in at if p not in mine] + untyped))


# `not`, `if` and `oneOf` too: rewrite.py says them with allOf (their complement beside the
# rest), so they intersect once rewritten
_INTERSECTING = frozenset({"allOf", "dependentSchemas", "dependencies", "not", "if", "oneOf"})
_BRANCHING = frozenset({"anyOf", "oneOf", "$ref"})


def _intersects(s: dict[str, Any]) -> bool:
    """Whether llguidance intersects schemas at this node: `allOf`, dependencies, `not`,
    `if`, `oneOf` (which rewrite.py turns into intersections), or a branch or `$ref` beside
    other keywords."""
    keys = set(s) - _ANNOTATIONS
    return bool(_INTERSECTING & keys) or (bool(_BRANCHING & keys) and len(keys) > 1)


def _bounds_values(guards: Guards) -> bool:
    return any(v is not None for v in (guards.max_integer_digits, guards.max_fraction_digits,
                                       guards.max_string_length, guards.max_array_items,
                                       guards.max_depth))


def _type_untyped_values(root: dict[str, Any], depth: int | None = None) -> list[str]:
    """Make every value `root` leaves untyped a bounded any-value (`_any_value`), so that the
    guards reach it (seen on Gemma: an instructor schema without additionalProperties false, a
    "price" key the model added, and a 144-digit integer under it). The any-value accepts
    every JSON value, so this changes nothing but what the guards then bound. Returns the
    pointers it wrote at.

    Left alone: subschemas under `not` / `if` / `oneOf` (as every guard), schemas with an
    `$id` (or draft 4 `id`) below the root (a local `$ref` there would resolve against it), and
    schemas where llguidance intersects subschemas (`allOf`, a `$ref` or `anyOf` beside other
    keywords, dependencies, and `not` / `if` / `oneOf`, rewritten with allOf): it cannot
    intersect the recursive any-value with itself ("Schema intersection stack level
    exceeded", 13 of 350 JSONSchemaBench schemas lost)."""
    nodes = list(subschemas(root, skip=_NO_REWRITE))
    defs = _defs_key(root)
    if any("$id" in s or "id" in s for p, s in nodes if p) or not isinstance(
            root.get(defs, {}), dict) or ANY_VALUE_NAME in root.get(defs, {}):
        return []
    if any(_intersects(s) for _, s in subschemas(root)):
        return []
    ref = {"$ref": f"#/{defs}/{ANY_VALUE_NAME}"}
    at: list[str] = []
    for pointer, s in nodes:
        where = pointer or "/"
        if pointer and set(s) <= _ANNOTATIONS:  # `{}` or annotations only
            s.clear()
            s.update(ref)
            at.append(where)
            continue
        types = _types(s)
        objectish = "object" in types or (not types and ("properties" in s or
                                                          "patternProperties" in s))
        if objectish and s.get("additionalProperties", True) is True \
                and "unevaluatedProperties" not in s:
            s["additionalProperties"] = dict(ref)
            at.append(f"{pointer}/additionalProperties")
        if ("array" in types and s.get("items", True) is True and "unevaluatedItems" not in s
                and not isinstance(s.get("items"), list)):
            s["items"] = dict(ref)
            at.append(f"{pointer}/items")
        for key in ("properties", "$defs", "definitions", "patternProperties"):
            children = s.get(key)
            if isinstance(children, dict):
                for name, child in children.items():
                    if child is True:
                        children[name] = dict(ref)
                        at.append(f"{pointer}/{key}/{escape(name)}")
    if not root or set(root) <= _ANNOTATIONS:  # the whole schema is any value
        root["$ref"] = ref["$ref"]
        at.append("/")
    if at:
        root.setdefault(defs, {}).update(_any_values(defs, depth))
    return at


def _length_bounded(s: dict[str, Any]) -> bool:
    """A string subschema whose length is already bounded (by the user): no cap is added."""
    return any(k in s for k in ("maxLength", "enum", "const"))


def _num(x: Any, default: float) -> float:
    return x if _is_number(x) else default


def _bound_number(s: dict[str, Any], pointer: str, fractional: bool, guards: Guards,
                  applied: dict[str, Any]) -> None:
    where = pointer or "/"
    if guards.max_integer_digits is not None:
        limit = 10 ** guards.max_integer_digits - 1
        lo = s.get("minimum", s.get("exclusiveMinimum"))
        hi = s.get("maximum", s.get("exclusiveMaximum"))
        changed = False
        # Only add a bound the user's own bounds leave room for; otherwise the schema
        # would become unsatisfiable.
        if not _is_number(hi) and _num(lo, -limit) <= limit:
            s["maximum"] = limit
            changed = True
        if not _is_number(lo) and _num(hi, limit) >= -limit:
            s["minimum"] = -limit
            changed = True
        if changed:
            applied.setdefault("max_integer_digits", {"value": guards.max_integer_digits,
                                                      "at": []})["at"].append(where)
    if fractional and guards.max_fraction_digits is not None and "multipleOf" not in s:
        s["multipleOf"] = float(f"1e-{guards.max_fraction_digits}")
        applied.setdefault("max_fraction_digits", {"value": guards.max_fraction_digits,
                                                   "at": []})["at"].append(where)


# RFC 3339 allows any number of digits in a time's fraction of a second, and a model can write
# them until max_tokens (seen on vLLM with `format: date-time`). Everything else in these
# formats has a fixed length, so a maxLength bounds the fraction: the longest form without it
# is "YYYY-MM-DDTHH:MM:SS" + "." + "+HH:MM" (26 characters; "HH:MM:SS" + "." + "+HH:MM" is 15).
_FRACTION_FORMATS = {"date-time": 26, "time": 15}


def _bound_seconds_fraction(s: dict[str, Any], pointer: str, digits: int,
                            applied: dict[str, Any]) -> None:
    if _length_bounded(s):
        return
    # never below the user's minLength: that would leave no valid string
    s["maxLength"] = max(_FRACTION_FORMATS[s["format"]] + digits, int(_num(s.get("minLength"), 0)))
    applied.setdefault("max_fraction_digits", {"value": digits, "at": []})["at"].append(
        pointer or "/")


def whitespace_options(guards: Guards) -> dict[str, Any]:
    """llguidance JSON compile options for the whitespace guard."""
    if guards.separators is not None:
        item, key = guards.separators
        space = f" {{0,{guards.separator_space}}}" if guards.separator_space else ""
        return {"whitespace_flexible": False, "item_separator": re.escape(item) + space,
                "key_separator": re.escape(key) + space}
    if guards.max_whitespace is None:
        return {"whitespace_flexible": True}
    if guards.max_whitespace == 0:
        return {"whitespace_flexible": False}
    return {"whitespace_pattern": rf"[\x20\x0A\x0D\x09]{{0,{guards.max_whitespace}}}"}


# llguidance 1.9.1 lets a negated class in `pattern` match a JSON escape: `^[^\\]*$` accepts
# "a\\b" and `^[^"]*$` accepts "a\"b" (found by the random-logits property test). Where a
# schema has patterns, strings may therefore not use the `\"` and `\\` escapes at all (`\u`
# escapes of printable characters are refused by llguidance anyway): a narrowing, never a
# widening.
_PATTERN_KEYWORDS = ("pattern", "patternProperties", "propertyNames")
_SAFE_ESCAPES = "nrbtfu"


def escape_options(schema: Any) -> tuple[dict[str, Any], list[str]]:
    """(llguidance options, pointers of the patterns that made them necessary)."""
    from .schema_walk import keyword_pointers

    at = [p for k in _PATTERN_KEYWORDS for p in keyword_pointers(schema, k)
          if _negates(resolve_pointer(schema, p))]
    return ({"json_allowed_escapes": _SAFE_ESCAPES} if at else {}), at


_NEGATIONS = ("[^", "\\W", "\\S", "\\D")


def _negates(value: Any) -> bool:
    """Whether a pattern, or any key or string inside a patternProperties / propertyNames
    value, has a negated class: the construct that leaks."""
    if isinstance(value, str):
        return any(n in value for n in _NEGATIONS)
    if isinstance(value, dict):
        return any(_negates(k) or _negates(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_negates(v) for v in value)
    return False


def _unroll_recursion(root: dict[str, Any], depth: int, applied: dict[str, Any]) -> None:
    """Follow each recursive `$ref` at most `depth` times: every definition on a cycle gets
    `depth` copies (`NAME@1` ... `NAME@depth`), each level's recursive references point at the
    next level, and the last level's are `false` (the branch that would nest deeper is gone:
    an optional child, an empty list, the other `anyOf` branch). A narrowing, reported as
    `max_depth` at the recursive references."""
    refs = _local_refs(root)
    if not refs:
        return
    graph: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for (_, owner, target) in refs:
        if owner is not None:
            graph.setdefault(owner, set()).add(target)
    cyclic = {n for n in graph if _reaches(graph, n, n)}
    if not cyclic:
        return
    # where cutting is not a narrowing, or a reference reaches the root: leave it whole
    guarded = {p for p, _, _ in _local_refs(root, skip=_NO_REWRITE)}
    if any(t in cyclic and p not in guarded for p, _, t in refs) or any(
            isinstance(s.get("$ref"), str) and s["$ref"] in ("#", "#/")
            for _, s in subschemas(root)):
        return
    at = [p for p, owner, target in refs if owner in cyclic and target in cyclic]

    def level_name(node: tuple[str, str], k: int) -> tuple[str, str]:
        return (node[0], node[1] if k == 0 else f"{node[1]}@{k}")

    originals = {n: copy.deepcopy(root[n[0]][n[1]]) for n in cyclic}
    for k in range(depth + 1):
        for n in cyclic:
            body = root[n[0]][n[1]] if k == 0 else copy.deepcopy(originals[n])
            body = _retarget(root, body, cyclic, k, depth, level_name)
            key, name = level_name(n, k)
            root[key][name] = body
    applied["max_depth"] = {"value": depth, "at": at}


def _local_refs(root: dict[str, Any], skip: frozenset[str] = frozenset()
                ) -> list[tuple[str, tuple[str, str] | None, tuple[str, str]]]:
    """(pointer of the `$ref`, the definition it sits in or None, the definition it names)
    for every `$ref` to `#/$defs/NAME` or `#/definitions/NAME`."""
    out = []
    for pointer, s in subschemas(root, skip=skip):
        target = _def_of(root, s.get("$ref"))
        if target is None:
            continue
        parts = pointer.split("/")
        owner = (parts[1], parts[2].replace("~1", "/").replace("~0", "~")) \
            if len(parts) > 2 and parts[1] in ("$defs", "definitions") else None
        out.append((f"{pointer}/$ref", owner, target))
    return out


def _def_of(root: dict[str, Any], ref: Any) -> tuple[str, str] | None:
    if not isinstance(ref, str):
        return None
    for key in ("$defs", "definitions"):
        prefix = f"#/{key}/"
        if ref.startswith(prefix) and isinstance(root.get(key), dict):
            name = ref[len(prefix):].replace("~1", "/").replace("~0", "~")
            if "/" not in ref[len(prefix):] and name in root[key]:
                return key, name
    return None


def _reaches(graph: dict[Any, set[Any]], start: Any, goal: Any) -> bool:
    seen: set[Any] = set()
    todo = list(graph.get(start, ()))
    while todo:
        n = todo.pop()
        if n == goal:
            return True
        if n not in seen:
            seen.add(n)
            todo += graph.get(n, ())
    return False


def _retarget(root: dict[str, Any], node: Any, cyclic: set[tuple[str, str]], k: int,
              depth: int, level_name: Any) -> Any:
    """`node` with its references to definitions on a cycle pointing one level deeper, or,
    at the last level, with each such reference (the subschema holding it) `false`."""
    if not isinstance(node, dict):
        return node
    target = _def_of(root, node.get("$ref"))
    if target in cyclic:
        if k == depth:
            return False
        key, name = level_name(target, k + 1)
        node = {**node, "$ref": f"#/{key}/{escape(name)}"}
    return map_subschemas(node, lambda s: _retarget(root, s, cyclic, k, depth, level_name))
