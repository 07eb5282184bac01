"""Which branches of a `oneOf` can match the same instance: the proofs that let the oneOf
rewrite (rewrite.py) do without complements.

Two questions, each answered soundly (a "no" means "not proven", never a wrong "yes"):

- `disjoint(a, b)`: no instance (of the kinds asked about) matches both. Proven by finite value
  sets without a common value, by kinds of instance no one of which both admit, and for
  objects by a key one of them requires whose value schemas in the two are disjoint (the
  same proof, one level down: a discriminator `"kind": {"const": "cat"}` against `"dog"`, a
  key the other forbids, a string against an array).
- `vacuous_kinds(s)`: the kinds of instance of which `s` accepts every one, because no
  keyword of `s` applies to them (`required` says nothing about strings). When two branches
  of a oneOf accept every instance of a kind, every such instance matches both, so the oneOf
  rejects that kind as a whole.

Kinds are JSON Schema's types with the numbers split in two: "integer" (integral numbers,
1.0 included) and "number" (the others), as `type: integer` draws the line. Keywords a
validator's dialect does not define are ignored, as jsonschema (the post-check) ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from .complement import ANNOTATIONS, REF_OVERRIDES

KINDS = frozenset({"null", "boolean", "object", "array", "string", "integer", "number"})
_MAX_REF_HOPS = 8
_MAX_DEPTH = 4  # levels of property values the object proof descends

Resolve = Callable[[str], Any]

# The kind each type-specific keyword applies to (it passes every instance of the others;
# jsonschema's format checkers pass every non-string too).
KEYWORD_KIND: dict[str, str] = {
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
    **dict.fromkeys(("items", "prefixItems", "additionalItems", "contains", "minContains",
                     "maxContains", "minItems", "maxItems", "uniqueItems",
                     "unevaluatedItems"), "array"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                     "multipleOf"), "number"),
    **dict.fromkeys(("properties", "patternProperties", "additionalProperties", "required",
                     "minProperties", "maxProperties", "propertyNames", "dependencies",
                     "dependentRequired", "dependentSchemas", "unevaluatedProperties"),
                    "object"),
}


def kinds_of(type_value: Any) -> set[str] | None:
    """The kinds a `type` keyword admits (None where it is not a valid `type`)."""
    names = [type_value] if isinstance(type_value, str) else type_value
    if not isinstance(names, list):
        return None
    out: set[str] = set()
    for n in names:
        if n == "number":
            out |= {"integer", "number"}
        elif n in KINDS:
            out.add(n)
        else:
            return None
    return out


def type_of_kinds(kinds: Iterable[str]) -> list[str] | None:
    """A `type` list admitting exactly `kinds` (None where none does: non-integral numbers
    without the integral ones)."""
    kinds = set(kinds)
    if "number" in kinds and "integer" not in kinds:
        return None
    names: list[str] = [k for k in ("null", "boolean", "object", "array", "string")
                        if k in kinds]
    if "number" in kinds:
        names.append("number")
    elif "integer" in kinds:
        names.append("integer")
    return names


# -- kinds a schema accepts whole ----------------------------------------------------------


def vacuous_kinds(schema: Any, resolve: Resolve, dialect: type[Any], hops: int = 0) -> set[str]:
    """The kinds of instance of which `schema` accepts every one (a subset where unsure)."""
    if schema is True:
        return set(KINDS)
    if not isinstance(schema, dict):
        return set()
    out = set(KINDS)
    if "$ref" in schema:
        target = _resolved(schema["$ref"], resolve, hops)
        if target is None:
            return set()
        out &= vacuous_kinds(target, resolve, dialect, hops + 1)
        if dialect in REF_OVERRIDES:
            return out
    for keyword, value in schema.items():
        if keyword in ("$ref", "then", "else") or keyword in ANNOTATIONS:
            continue
        if keyword not in dialect.VALIDATORS and keyword not in KEYWORD_KIND:
            continue  # not a keyword of the dialect: the validator ignores it
        kind = KEYWORD_KIND.get(keyword)
        if kind == "number":
            out -= {"integer", "number"}
        elif kind is not None:
            out.discard(kind)
        elif keyword == "type":
            out &= kinds_of(value) or set()
        elif keyword == "allOf" and isinstance(value, list):
            for part in value:
                out &= vacuous_kinds(part, resolve, dialect, hops)
        elif keyword == "anyOf" and isinstance(value, list):
            # a kind one branch accepts whole is accepted whole (sufficient, not necessary)
            out &= set().union(*(vacuous_kinds(p, resolve, dialect, hops) for p in value))
        elif keyword == "if":  # whatever `if` says, `then` or `else` decides
            out &= vacuous_kinds(schema.get("then", True), resolve, dialect, hops)
            out &= vacuous_kinds(schema.get("else", True), resolve, dialect, hops)
        else:  # enum, const, not, oneOf, $dynamicRef...: not read here
            return set()
    return out


def admitted_kinds(schema: Any, resolve: Resolve, dialect: type[Any], depth: int = 0) -> set[str]:
    """The kinds of instance `schema` may admit (a superset: all where it is not read)."""
    overrides = dialect in REF_OVERRIDES
    union = _alternatives(schema, resolve, overrides) if depth < _MAX_DEPTH else None
    if union is not None:
        return set().union(*(admitted_kinds(x, resolve, dialect, depth + 1) for x in union))
    facts = _facts(schema, resolve, overrides)
    return set(KINDS) if facts is None else facts.kinds


def finite_values(schema: Any, resolve: Resolve, dialect: type[Any]) -> list[Any] | None:
    """Values that include every instance `schema` admits, where its enum / const (through
    `$ref` and `allOf`) make them finitely many; None otherwise."""
    facts = _facts(schema, resolve, dialect in REF_OVERRIDES)
    return None if facts is None else facts.values


# -- disjointness ----------------------------------------------------------------------------


def disjoint(a: Any, b: Any, resolve: Resolve, dialect: type[Any],
             within: Iterable[str] = KINDS, required: Iterable[str] = (),
             depth: int = 0) -> bool:
    """True when no instance of the kinds `within` can match both `a` and `b` (False: not
    proven). `required`: keys every instance asked about has (the schema around a oneOf
    requires them)."""
    overrides = dialect in REF_OVERRIDES
    if depth < _MAX_DEPTH:
        for one, other in ((a, b), (b, a)):
            union = _alternatives(one, resolve, overrides)
            if union is not None:  # each alternative must be disjoint from the other schema
                return all(disjoint(x, other, resolve, dialect, within, required, depth + 1)
                           for x in union)
    fa, fb = _facts(a, resolve, overrides), _facts(b, resolve, overrides)
    if fa is None or fb is None:
        return False
    keys = {k for k in required if isinstance(k, str)}
    fa.required |= keys
    fb.required |= keys
    common = fa.kinds & fb.kinds & set(within)
    if not common:
        return True
    if fa.values is not None and fb.values is not None:
        return not any(_same(x, y) and _kind_of(x) in common for x in fa.values
                       for y in fb.values)
    if common != {"object"} or depth >= _MAX_DEPTH:
        return False
    return _keyed_apart(fa, fb, resolve, dialect, depth) \
        or _keyed_apart(fb, fa, resolve, dialect, depth)


def _alternatives(schema: Any, resolve: Resolve, overrides: bool) -> list[Any] | None:
    """Schemas whose union is `schema`, where it is an `anyOf` / `oneOf` (reached through
    `$ref`s): the rest of it beside each branch. None where it is not one."""
    for hops in range(_MAX_REF_HOPS):
        if not isinstance(schema, dict) or "$ref" not in schema:
            break
        if len(schema) > 1 and not overrides:
            return None  # $ref beside other keywords: a conjunction, read by _facts
        schema = _resolved(schema["$ref"], resolve, hops)
    if not isinstance(schema, dict) or "$ref" in schema:
        return None
    key = "anyOf" if "anyOf" in schema else "oneOf"  # a oneOf admits no more than its anyOf
    branches = schema.get(key)
    if not isinstance(branches, list) or not branches:
        return None
    rest = {k: v for k, v in schema.items() if k != key}
    return [{"allOf": [rest, branch]} for branch in branches]


def _keyed_apart(a: _Facts, b: _Facts, resolve: Resolve, dialect: type[Any],
                 depth: int) -> bool:
    """Some key `a` requires takes values in `a` that it cannot take in `b`."""
    for key in sorted(a.required):
        mine, theirs = a.value_schemas(key), b.value_schemas(key)
        if any(disjoint(x, y, resolve, dialect, depth=depth + 1)
               for x in mine for y in theirs):
            return True
    return False


class _Facts:
    """What a schema says about the instances it admits, as far as `disjoint` reads it: the
    schema is the conjunction of `parts` (itself, its `allOf` members and `$ref` targets)."""

    def __init__(self) -> None:
        self.kinds: set[str] = set(KINDS)
        self.values: list[Any] | None = None  # a finite set, from enum / const
        self.required: set[str] = set()
        self.parts: list[dict[str, Any]] = []

    def value_schemas(self, key: str) -> list[Any]:
        """Schemas the value of `key` must match where it is present (some of them)."""
        out: list[Any] = []
        for part in self.parts:
            props, patterns = part.get("properties"), part.get("patternProperties")
            # `additionalProperties` applies where no name and no pattern matches the key
            additional = True
            if isinstance(props, dict) and key in props:
                out.append(props[key])
                additional = False
            if isinstance(patterns, dict):
                for pattern, sub in patterns.items():
                    try:
                        hit = re.search(pattern, key)  # as jsonschema matches them
                    except (re.error, TypeError):
                        additional = False  # unsure whether it matches
                        continue
                    if hit:
                        out.append(sub)
                        additional = False
            elif patterns is not None:
                additional = False
            if additional and "additionalProperties" in part:
                out.append(part["additionalProperties"])
        return out


def _facts(schema: Any, resolve: Resolve, overrides: bool) -> _Facts | None:
    facts = _Facts()
    if not _gather(schema, resolve, overrides, facts, 0):
        return None
    return facts


def _gather(schema: Any, resolve: Resolve, overrides: bool, f: _Facts, hops: int) -> bool:
    """Add what `schema` asserts to `f` (a conjunction); False where it cannot be read.
    `overrides`: a `$ref` hides its siblings (drafts up to 7), so only its target counts."""
    if schema is True:
        return True
    if schema is False:
        f.kinds = set()
        return True
    if not isinstance(schema, dict):
        return False
    if "$ref" in schema:
        target = _resolved(schema["$ref"], resolve, hops)
        if target is None or not _gather(target, resolve, overrides, f, hops + 1):
            return False
        if overrides:
            return True
    f.parts.append(schema)
    if "type" in schema:
        kinds = kinds_of(schema["type"])
        if kinds is None:
            return False
        f.kinds &= kinds
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list):
        f.values = values if f.values is None else [v for v in f.values
                                                    if any(_same(v, w) for w in values)]
        f.kinds &= {_kind_of(v) for v in values}
    if isinstance(schema.get("required"), list):
        f.required |= {k for k in schema["required"] if isinstance(k, str)}
    all_of = schema.get("allOf")
    for part in all_of if isinstance(all_of, list) else ():
        if not _gather(part, resolve, overrides, f, hops):
            return False
    return True


def _resolved(ref: Any, resolve: Resolve, hops: int) -> Any:
    if hops >= _MAX_REF_HOPS or not isinstance(ref, str):
        return None
    try:
        return resolve(ref)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _kind_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _same(x: Any, y: Any) -> bool:
    """JSON Schema equality: 1 == 1.0, true != 1."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return bool(x == y)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y
