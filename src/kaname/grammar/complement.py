"""The complement of a JSON Schema, said without `not`: what `{"not": S}` accepts.

llguidance 1.9.1 has no `not`. `complement(S)` returns a schema that accepts exactly the
instances S rejects, built from keywords llguidance enforces, or None where this module cannot
build one (then `not` stays, and is refused naming its pointer). It is the base of three
rewrites (rewrite.py): `not`, `if`/`then`/`else` and `oneOf`.

Why it is exact: a schema is the conjunction of its keywords, so its complement is the
disjunction (`anyOf`) of each keyword's complement (De Morgan; `allOf` / `anyOf` / `oneOf` /
`not` / `if` inside S are handled the same way). A keyword other than `type`, `enum` and
`const` constrains one instance type only and passes every other type, so its complement is
"an instance of that type that fails it" (`minLength: 3` -> `{"type": "string", "maxLength":
2}`), which is a bound llguidance has. `type` complements to the other types. A schema with
`enum` / `const` admits a finite set of values, which the post-check's own validator filters
by the rest of the schema; the complement of a finite set is the other types, the numbers
between its numbers (exclusive bounds), the other boolean, and the strings outside it (a
pattern built from the set's trie, with positive character ranges only). Refused (None):
keywords whose failure is an existential ("some item", "some additional key") or a residue
(`multipleOf`, `type: integer` without `number`), patterns and formats (their complement is a
regular language this module does not construct), recursive `$ref`s, arrays or objects in an
`enum`, and anything the dialect does not define.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema

from .schema_walk import has_reference

# Keywords that annotate and never fail an instance.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                         "deprecated", "readOnly", "writeOnly", "$schema", "$id", "id",
                         "$anchor", "definitions", "$defs", "contentMediaType",
                         "contentEncoding", "contentSchema"})
TYPES = ("null", "boolean", "object", "array", "number", "string")
MAX_ENUM_STRINGS = 64  # strings of one enum whose complement is written as a pattern
MAX_BRANCHES = 64  # alternatives of one complement
_ANY_CHAR = "(?s:.)"
_MAX_CODE_POINT = 0x10FFFF

Resolve = Callable[[str], Any]
# In these dialects `$ref` overrides its sibling keywords (jsonschema ignores them).
REF_OVERRIDES = (jsonschema.Draft3Validator, jsonschema.Draft4Validator,
                 jsonschema.Draft6Validator, jsonschema.Draft7Validator)


class _Refused(Exception):
    """This complement cannot be built; the message says why."""


def complement(schema: Any, dialect: type[Any], resolve: Resolve) -> tuple[Any, str | None]:
    """(a schema accepting exactly what `schema` rejects, None) or (None, why not).
    `resolve` maps a local `$ref` to the schema it names (KeyError when it cannot)."""
    try:
        return _Complement(dialect, resolve).of(schema, ()), None
    except _Refused as e:
        return None, str(e)


class _Complement:
    def __init__(self, dialect: type[Any], resolve: Resolve):
        self.dialect = dialect
        self.resolve = resolve
        self.ref_overrides = dialect in REF_OVERRIDES

    def of(self, schema: Any, refs: tuple[str, ...]) -> Any:
        if schema is True:
            return False
        if schema is False:
            return True
        if not isinstance(schema, dict):
            raise _Refused("a schema that is neither an object nor a boolean")
        s = {k: v for k, v in schema.items()
             if k not in ANNOTATIONS and not k.startswith("x-")}
        if "$ref" in s:
            ref = s.pop("$ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise _Refused(f"a $ref that is not local ({ref!r})")
            if ref in refs:
                raise _Refused(f"a recursive $ref ({ref})")
            try:
                target = self.resolve(ref)
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise _Refused(f"a $ref that does not resolve ({ref})") from e
            if self.ref_overrides or not s:
                return self.of(target, (*refs, ref))
            # 2019-09 on: $ref is one more conjunct beside its siblings
            return _any_of([self.of(target, (*refs, ref)), self.of(s, refs)])
        if "enum" in s or "const" in s:
            return self._finite(schema, s)
        branches: list[Any] = []
        types = _types(s.pop("type", None))
        if types is not None:
            others = [t for t in TYPES if t not in types and not (t == "number" and "integer"
                                                                   in types)]
            if "integer" in types and "number" not in types:
                raise _Refused("type integer (its complement includes the non-integer "
                               "numbers)")
            if others:
                branches.append({"type": others})
        allowed = types or set(TYPES)
        for keyword in list(s):
            if keyword in _COMBINATORS or keyword in ("then", "else"):
                continue
            branches += self._keyword(keyword, s, allowed, refs)
        branches += self._combinators(s, refs)
        if len(branches) > MAX_BRANCHES:
            raise _Refused(f"{len(branches)} alternatives, above the bound of {MAX_BRANCHES}")
        return _any_of(branches)

    # -- keywords of one instance type ---------------------------------------------------

    def _keyword(self, keyword: str, s: dict[str, Any], allowed: set[str],
                 refs: tuple[str, ...]) -> list[Any]:
        """Instances of the keyword's type that fail it (none where that type is not
        allowed anyway: those instances already failed `type`)."""
        value = s[keyword]
        if keyword not in self.dialect.VALIDATORS and keyword not in _BOUNDS:
            return []  # not a keyword of the dialect: the post-check ignores it too
        if keyword in _VACUOUS_WHEN_TRUE and (value is True or value == {}):
            return []
        if keyword == "uniqueItems" and value is False:
            return []
        kind = _KIND.get(keyword)
        if kind is None:
            raise _Refused(f"{keyword!r} (its failure is not a bound llguidance has)")
        if kind not in allowed and not (kind == "number" and "integer" in allowed):
            return []
        if kind == "string":
            return [_typed("string", b) for b in _count_complement(keyword, value, "Length")]
        if kind == "array":
            return [_typed("array", b) for b in _count_complement(keyword, value, "Items")]
        if kind == "object":
            return self._object(keyword, s, refs)
        numeric = "number" if "number" in allowed else "integer"
        return [_typed(numeric, b) for b in self._number(keyword, s)]

    def _number(self, keyword: str, s: dict[str, Any]) -> list[dict[str, Any]]:
        value = s[keyword]
        if not _is_number(value) and not isinstance(value, bool):
            raise _Refused(f"{keyword} that is not a number")
        draft4 = self.dialect in (jsonschema.Draft3Validator, jsonschema.Draft4Validator)
        if keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            if draft4:
                return []  # a flag read with minimum / maximum
            return [{"maximum" if keyword == "exclusiveMinimum" else "minimum": value}]
        exclusive = draft4 and s.get("exclusive" + keyword[0].upper() + keyword[1:]) is True
        if keyword == "minimum":
            return [{"maximum": value} if exclusive else {"exclusiveMaximum": value}]
        return [{"minimum": value} if exclusive else {"exclusiveMinimum": value}]

    def _object(self, keyword: str, s: dict[str, Any], refs: tuple[str, ...]) -> list[Any]:
        value = s[keyword]
        if keyword in ("minProperties", "maxProperties"):
            return [_typed("object", b) for b in _count_complement(keyword, value,
                                                                    "Properties")]
        if keyword == "required":
            if not isinstance(value, list):
                raise _Refused("required that is not a list")
            return [_typed("object", {"properties": {k: False}}) for k in dict.fromkeys(value)]
        if keyword == "properties":
            if not isinstance(value, dict):
                raise _Refused("properties that is not an object")
            out = []
            for name, sub in value.items():
                failing = self.of(sub, refs)
                if failing is not False:
                    out.append(_typed("object", {"required": [name],
                                                 "properties": {name: failing}}))
            return out
        # additionalProperties / patternProperties: "some key whose value fails" is an
        # existential over keys, which JSON Schema cannot say without `not`
        raise _Refused(f"{keyword} (its failure is some key's value failing)")

    # -- combinators -----------------------------------------------------------------------

    def _combinators(self, s: dict[str, Any], refs: tuple[str, ...]) -> list[Any]:
        out: list[Any] = []
        for keyword in ("allOf", "anyOf", "oneOf"):
            if keyword not in s:
                continue
            parts = s[keyword]
            if not isinstance(parts, list) or not parts:
                raise _Refused(f"{keyword} that is not a non-empty list")
            failing = [self.of(p, refs) for p in parts]
            if keyword == "allOf":
                out += failing
            elif keyword == "anyOf":
                out.append(_all_of(failing))
            else:  # oneOf fails where none matches or two match
                out.append(_all_of(failing))
                out += [_all_of([copy.deepcopy(parts[i]), copy.deepcopy(parts[j])])
                        for i in range(len(parts)) for j in range(i + 1, len(parts))]
        if "not" in s:
            out.append(copy.deepcopy(s["not"]))
        if "if" in s and ("then" in s or "else" in s) and "if" in self.dialect.VALIDATORS:
            cond = s["if"]
            then, other = s.get("then", True), s.get("else", True)
            out.append(_all_of([copy.deepcopy(cond), self.of(then, refs)]))
            out.append(_all_of([self.of(cond, refs), self.of(other, refs)]))
        return out

    # -- finite sets -----------------------------------------------------------------------

    def _finite(self, schema: dict[str, Any], s: dict[str, Any]) -> Any:
        """The complement of a schema with `enum` / `const`: the values it lists that the
        rest of the schema also accepts (the post-check's validator decides) are all it
        admits."""
        values = [s["const"]] if "const" in s else s["enum"]
        if not isinstance(values, list):
            raise _Refused("enum that is not a list")
        if has_reference(s):
            raise _Refused("enum beside a $ref")
        check = self.dialect(schema, format_checker=self.dialect.FORMAT_CHECKER)
        return finite_complement([v for v in values if check.is_valid(v)])


_COMBINATORS = frozenset({"allOf", "anyOf", "oneOf", "not", "if"})
_KIND: dict[str, str] = {
    **dict.fromkeys(("minLength", "maxLength"), "string"),
    **dict.fromkeys(("minItems", "maxItems"), "array"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), "number"),
    **dict.fromkeys(("minProperties", "maxProperties", "required", "properties",
                     "additionalProperties", "patternProperties"), "object"),
    # items, contains, uniqueItems, pattern, format, multipleOf, dependencies,
    # propertyNames...: no entry, refused
}
# keywords whose value `true` (or `{}`) asserts nothing
_VACUOUS_WHEN_TRUE = frozenset({"items", "additionalItems", "additionalProperties",
                                "patternProperties", "propertyNames", "unevaluatedItems",
                                "unevaluatedProperties"})
# draft 4's boolean exclusiveMinimum / exclusiveMaximum are not in its VALIDATORS
_BOUNDS = frozenset({"exclusiveMinimum", "exclusiveMaximum"})


def _types(t: Any) -> set[str] | None:
    if t is None:
        return None
    names = [t] if isinstance(t, str) else t
    if not isinstance(names, list) or not all(n in (*TYPES, "integer") for n in names):
        raise _Refused(f"type {t!r}")
    return set(names)


def _typed(type_: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, **schema}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _count_complement(keyword: str, value: Any, noun: str) -> list[dict[str, Any]]:
    """`minX: n` fails below n (`maxX: n-1`, nothing when n is 0); `maxX: n` above it."""
    if not _is_number(value) or value < 0 or int(value) != value:
        raise _Refused(f"{keyword} that is not a non-negative integer")
    n = int(value)
    if keyword.startswith("min"):
        return [{f"max{noun}": n - 1}] if n > 0 else []
    return [{f"min{noun}": n + 1}]


def _any_of(branches: Sequence[Any]) -> Any:
    kept = [b for b in branches if b is not False]
    if any(b is True or b == {} for b in kept):
        return True
    if not kept:
        return False
    return kept[0] if len(kept) == 1 else {"anyOf": list(kept)}


def _all_of(parts: Sequence[Any]) -> Any:
    kept = [p for p in parts if p is not True and p != {}]
    if any(p is False for p in kept):
        return False
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else {"allOf": list(kept)}


# -- the complement of a finite set of values ------------------------------------------------


def finite_complement(values: Sequence[Any]) -> Any:
    """Every JSON value that is not one of `values` (scalars only)."""
    strings: set[str] = set()
    numbers: set[int | float] = set()
    booleans: set[bool] = set()
    null = False
    for v in values:
        if v is None:
            null = True
        elif isinstance(v, bool):
            booleans.add(v)
        elif _is_number(v):
            numbers.add(v)
        elif isinstance(v, str):
            strings.add(v)
        else:
            raise _Refused("an enum holding arrays or objects")
    whole = [t for t, present in (("null", null), ("boolean", bool(booleans)),
                                  ("number", bool(numbers)), ("string", bool(strings)))
             if not present]
    branches: list[Any] = [{"type": ["object", "array", *whole]}]
    if booleans and len(booleans) < 2:
        branches.append({"const": not next(iter(booleans))})
    if numbers:
        branches += _number_gaps(sorted(numbers))
    if strings:
        if len(strings) > MAX_ENUM_STRINGS:
            raise _Refused(f"{len(strings)} strings in an enum, above the bound of "
                           f"{MAX_ENUM_STRINGS}")
        branches.append({"type": "string", "pattern": "^" + strings_outside(strings) + "$"})
    return _any_of(branches)


def _number_gaps(numbers: list[int | float]) -> list[dict[str, Any]]:
    gaps: list[dict[str, Any]] = [{"type": "number", "exclusiveMaximum": numbers[0]}]
    for low, high in itertools.pairwise(numbers):
        if low != high:
            gaps.append({"type": "number", "exclusiveMinimum": low, "exclusiveMaximum": high})
    gaps.append({"type": "number", "exclusiveMinimum": numbers[-1]})
    return gaps


def strings_outside(words: set[str]) -> str:
    """A regex (unanchored, to be wrapped in ^...$) matching every string not in `words`:
    walking the words' trie, a string leaves the set where it stops at a node that ends no
    word, or goes on with a character no word continues with."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # the end-of-word mark ("" is no character)
    return _outside(trie)


def _outside(node: dict[str, Any]) -> str:
    children = sorted(k for k in node if k)
    alternatives = [] if "" in node else [""]
    other = _class_without(children)
    alternatives.append(f"{other}{_ANY_CHAR}*" if other else "")
    for ch in children:
        alternatives.append(_literal(ch) + _outside(node[ch]))
    alternatives = list(dict.fromkeys(alternatives))
    if alternatives == [""]:
        return ""
    return "(?:" + "|".join(alternatives) + ")"


def _class_without(chars: Sequence[str]) -> str:
    """A character class of every code point but `chars`, as positive ranges (a negated
    class would make kaname narrow the string escapes, guards.py)."""
    if not chars:
        return _ANY_CHAR
    ranges, start = [], 0
    for code in sorted(ord(c) for c in chars):
        if code > start:
            ranges.append((start, code - 1))
        start = code + 1
    if start <= _MAX_CODE_POINT:
        ranges.append((start, _MAX_CODE_POINT))
    # a range may cover the surrogates, but not end in them: they are not characters
    ranges = [(_SURROGATE_END + 1 if _in_surrogates(a) else a,
               _SURROGATE_START - 1 if _in_surrogates(b) else b) for a, b in ranges]
    ranges = [(a, b) for a, b in ranges if a <= b]
    if not ranges:
        return ""
    return "[" + "".join(_code(a) if a == b else f"{_code(a)}-{_code(b)}"
                         for a, b in ranges) + "]"


_SURROGATE_START, _SURROGATE_END = 0xD800, 0xDFFF


def _in_surrogates(cp: int) -> bool:
    return _SURROGATE_START <= cp <= _SURROGATE_END


def _code(cp: int) -> str:
    return f"\\U{cp:08X}" if cp > 0xFFFF else f"\\u{cp:04X}"


def _literal(ch: str) -> str:
    return _code(ord(ch))


# -- disjointness: two schemas no instance matches both ---------------------------------------

_MAX_REF_HOPS = 8


def disjoint(a: Any, b: Any, resolve: Resolve, dialect: type[Any],
             within: Any = True) -> bool:
    """True when no instance of `within` (the schema around a oneOf: its `type` is read) can
    match both `a` and `b` (False: not proven). Proven by
    finite value sets without a common value; by types with no common instance type; and
    where both admit objects only there, by a property both require whose allowed values
    (`const` / `enum`) do not meet, or by a key one requires that the other forbids
    (`properties: {k: false}`, or `additionalProperties: false` without k or patterns)."""
    overrides = dialect in REF_OVERRIDES
    a, b = _facts(a, resolve, overrides), _facts(b, resolve, overrides)
    if a is None or b is None:
        return False
    around = _facts({"type": within["type"]} if isinstance(within, dict) and "type" in within
                    else True, resolve, overrides)
    if around is not None:
        a.types &= around.types
    if a.values is not None and b.values is not None:
        return not any(_same(x, y) for x in a.values for y in b.values)
    common = a.types & b.types  # instance kinds: "integer" integral numbers, "number" others
    if not common:
        return True
    if common != {"object"}:
        return False
    for key in a.required & b.required:
        va, vb = a.pinned.get(key), b.pinned.get(key)
        if va is not None and vb is not None and not any(_same(x, y) for x in va for y in vb):
            return True
    return any(b.forbids(k) for k in a.required) or any(a.forbids(k) for k in b.required)


class _Facts:
    """What a schema says about the instances it admits, as far as `disjoint` reads it."""

    def __init__(self) -> None:
        self.types: set[str] = {*TYPES, "integer"}
        self.values: list[Any] | None = None  # a finite set, from enum / const
        self.required: set[str] = set()
        self.pinned: dict[str, list[Any]] = {}  # property -> its finite set of values
        self.properties: dict[str, Any] = {}
        self.closed = False  # additionalProperties false, no patternProperties

    def forbids(self, key: str) -> bool:
        return self.properties.get(key) is False or (self.closed and key not in self.properties)


def _facts(schema: Any, resolve: Resolve, overrides: bool, hops: int = 0) -> _Facts | None:
    facts = _Facts()
    if not _gather(schema, resolve, overrides, facts, hops):
        return None
    return facts


def _gather(schema: Any, resolve: Resolve, overrides: bool, f: _Facts, hops: int) -> bool:
    """Add what `schema` asserts to `f` (a conjunction); False where it cannot be read.
    `overrides`: a `$ref` hides its siblings (drafts up to 7), so only its target counts."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    if "$ref" in schema:
        if hops >= _MAX_REF_HOPS or not isinstance(schema["$ref"], str):
            return False
        try:
            target = resolve(schema["$ref"])
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        if not _gather(target, resolve, overrides, f, hops + 1):
            return False
        if overrides:
            return True
    t = schema.get("type")
    if t is not None:
        names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
        if names is None:
            return False
        if "number" in names:
            names.add("integer")
        f.types &= names
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list):
        f.values = values if f.values is None else [v for v in f.values
                                                    if any(_same(v, w) for w in values)]
        f.types &= {_type_of(v) for v in values}
    if isinstance(schema.get("required"), list):
        f.required |= {k for k in schema["required"] if isinstance(k, str)}
    props = schema.get("properties")
    if isinstance(props, dict):
        for k, sub in props.items():
            f.properties.setdefault(k, sub)
            sub_facts = _facts(sub, resolve, overrides, hops) if sub is not False else None
            if sub_facts is not None and sub_facts.values is not None:
                f.pinned[k] = sub_facts.values
    if schema.get("additionalProperties") is False and not schema.get("patternProperties"):
        f.closed = True
    for part in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        if not _gather(part, resolve, overrides, f, hops):
            return False
    return True


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"  # the integral numbers; "number" stands for the others
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _same(x: Any, y: Any) -> bool:
    """JSON Schema equality: 1 == 1.0, true != 1."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if _is_number(x) and _is_number(y):
        return bool(x == y)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y
