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
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jsonschema

from .schema_walk import has_reference
from .string_sets import matches_everything, pattern_complement, strings_outside

# Keywords that annotate and never fail an instance.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                         "deprecated", "readOnly", "writeOnly", "$schema", "$id", "id",
                         "$anchor", "definitions", "$defs", "contentMediaType",
                         "contentEncoding", "contentSchema"})
TYPES = ("null", "boolean", "object", "array", "number", "string")
_ALL_KINDS = frozenset({*TYPES, "integer"})  # "integer": integral numbers, "number": others
MAX_ENUM_STRINGS = 64  # strings of one enum whose complement is written as a pattern
MAX_BRANCHES = 64  # alternatives of one complement

Resolve = Callable[[str], Any]
# Marks a schema built as the complement of the schema it holds (rewrite.py's `not`), so that
# the complement of that is the schema itself, not a complement built twice. Rewriting
# removes the marks before compiling.
NEGATES = "x-kaname-negates"
# In these dialects `$ref` overrides its sibling keywords (jsonschema ignores them).
REF_OVERRIDES = (jsonschema.Draft3Validator, jsonschema.Draft4Validator,
                 jsonschema.Draft6Validator, jsonschema.Draft7Validator)


class _Refused(Exception):
    """This complement cannot be built; the message says why."""


def complement(schema: Any, dialect: type[Any], resolve: Resolve,
               within: Iterable[str] | None = None,
               keys: Iterable[str] | None = None) -> tuple[Any, str | None]:
    """(a schema accepting exactly what `schema` rejects, None) or (None, why not).
    `resolve` maps a local `$ref` to the schema it names (KeyError when it cannot).
    `within`: the instance kinds that matter (disjoint.KINDS: the types, with "integer" the
    integral numbers and "number" the others); the result is exact on those and may say
    anything of the others, so keywords that only apply to the others need no complement.
    `keys`: where the objects asked about have no keys but these (a closed schema beside),
    "some other key fails additionalProperties / patternProperties" is one of these keys
    present and failing."""
    kinds = frozenset(within) if within is not None else _ALL_KINDS
    universe = frozenset(keys) if keys is not None else None
    try:
        return _Complement(dialect, resolve).of(schema, (), kinds, universe), None
    except _Refused as e:
        return None, str(e)


class _Complement:
    def __init__(self, dialect: type[Any], resolve: Resolve):
        self.dialect = dialect
        self.resolve = resolve
        self.ref_overrides = dialect in REF_OVERRIDES

    def of(self, schema: Any, refs: tuple[str, ...], within: frozenset[str] = _ALL_KINDS,
           keys: frozenset[str] | None = None) -> Any:
        if isinstance(schema, dict) and NEGATES in schema:
            return copy.deepcopy(schema[NEGATES])  # the complement of a complement
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
                return self.of(target, (*refs, ref), within, keys)
            # 2019-09 on: $ref is one more conjunct beside its siblings
            return _any_of([self.of(target, (*refs, ref), within, keys),
                            self.of(s, refs, within, keys)])
        if "enum" in s or "const" in s:
            return self._finite(schema, s)
        branches: list[Any] = []
        types = _types(s.pop("type", None))
        if types is not None:
            others = [t for t in TYPES if t not in types and not (t == "number" and "integer"
                                                                   in types)]
            if "integer" in types and "number" not in types and "number" in within:
                raise _Refused("type integer (its complement includes the non-integer "
                               "numbers)")
            if others:
                branches.append({"type": others})
        allowed = _kinds(types) & within
        for keyword in list(s):
            if keyword in _COMBINATORS or keyword in ("then", "else"):
                continue
            branches += self._keyword(keyword, s, allowed, refs, keys)
        branches += self._combinators(s, refs, within, keys)
        if len(branches) > MAX_BRANCHES:
            raise _Refused(f"{len(branches)} alternatives, above the bound of {MAX_BRANCHES}")
        return _any_of(branches)

    # -- keywords of one instance type ---------------------------------------------------

    def _keyword(self, keyword: str, s: dict[str, Any], allowed: frozenset[str],
                 refs: tuple[str, ...], keys: frozenset[str] | None = None) -> list[Any]:
        """Instances of the keyword's type that fail it (none where that type is not
        allowed anyway: those instances already failed `type`)."""
        value = s[keyword]
        if keyword not in self.dialect.VALIDATORS and keyword not in _BOUNDS:
            return []  # not a keyword of the dialect: the post-check ignores it too
        if keyword in _VACUOUS_WHEN_TRUE and (value is True or value == {}):
            return []
        if keyword == "uniqueItems" and value is False:
            return []
        kind = _KIND.get(keyword) or _ONLY_OF.get(keyword)
        if kind is not None and not _kinds({kind}) & allowed:
            return []  # the instances it applies to are not asked about (or failed `type`)
        if keyword == "pattern" and isinstance(value, str):
            return self._pattern(value)
        if keyword == "propertyNames":
            return self._names(value, refs)
        if keyword not in _KIND:
            raise _Refused(f"{keyword!r} (its failure is not a bound llguidance has)")
        if kind == "string":
            return [_typed("string", b) for b in _count_complement(keyword, value, "Length")]
        if kind == "array":
            return [_typed("array", b) for b in _count_complement(keyword, value, "Items")]
        if kind == "object":
            return self._object(keyword, s, refs, keys)
        numeric = "number" if "number" in allowed else "integer"  # integral ones only
        return [_typed(numeric, b) for b in self._number(keyword, s)]

    def _names(self, names: Any, refs: tuple[str, ...]) -> list[dict[str, Any]]:
        """Objects with a key that fails `names`: where the strings failing it are a finite
        set, an object having one of them."""
        failing = _strings_of(self.of(names, refs, frozenset({"string"})))
        if failing is None:
            raise _Refused("propertyNames (its failure is some key failing, and the names "
                           "that fail it are not a finite set)")
        return [_typed("object", {"required": [k]}) for k in failing]

    def _pattern(self, pattern: str) -> list[dict[str, Any]]:
        if matches_everything(pattern):
            return []  # no string fails it
        failing = pattern_complement(pattern)
        if failing is None:
            raise _Refused("'pattern' (its complement is built only for a character class "
                           "repeated over the whole string)")
        return [{"type": "string", "pattern": failing}]

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

    def _object(self, keyword: str, s: dict[str, Any], refs: tuple[str, ...],
                keys: frozenset[str] | None = None) -> list[Any]:
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
        # existential over keys, which JSON Schema cannot say without `not`, unless the keys
        # an object may have are known
        if keys is None:
            raise _Refused(f"{keyword} (its failure is some key's value failing)")
        return [_typed("object", {"required": [k], "properties": {k: failing}})
                for k, sub in self._governed(keyword, s, keys)
                if (failing := self.of(sub, refs)) is not False]

    @staticmethod
    def _governed(keyword: str, s: dict[str, Any], keys: frozenset[str]) -> list[tuple[str, Any]]:
        """(key, the schema `keyword` holds its value to) for each of `keys` it governs:
        those a pattern matches (searched, as jsonschema does), or for additionalProperties
        those no name and no pattern takes."""
        props = s.get("properties", {})
        patterns = s.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(patterns, dict):
            raise _Refused(f"{keyword} beside properties or patterns that are not objects")
        try:
            if keyword == "patternProperties":
                return [(k, sub) for k in sorted(keys) for p, sub in patterns.items()
                        if re.search(p, k)]
            return [(k, s[keyword]) for k in sorted(keys) if k not in props
                    and not any(re.search(p, k) for p in patterns)]
        except re.error as e:
            raise _Refused(f"a pattern Python cannot read ({e})") from e

    # -- combinators -----------------------------------------------------------------------

    def _combinators(self, s: dict[str, Any], refs: tuple[str, ...],
                     within: frozenset[str], keys: frozenset[str] | None = None) -> list[Any]:
        out: list[Any] = []
        for keyword in ("allOf", "anyOf", "oneOf"):
            if keyword not in s:
                continue
            parts = s[keyword]
            if not isinstance(parts, list) or not parts:
                raise _Refused(f"{keyword} that is not a non-empty list")
            failing = [self.of(p, refs, within, keys) for p in parts]
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
            out.append(_all_of([copy.deepcopy(cond), self.of(then, refs, within, keys)]))
            out.append(_all_of([self.of(cond, refs, within, keys),
                                self.of(other, refs, within, keys)]))
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
}
# keywords whose complement is not built, by the kind they apply to: refused only where
# instances of that kind are asked about
_ONLY_OF: dict[str, str] = {
    **dict.fromkeys(("pattern", "format"), "string"),
    **dict.fromkeys(("items", "prefixItems", "additionalItems", "contains", "minContains",
                     "maxContains", "uniqueItems", "unevaluatedItems"), "array"),
    "multipleOf": "number",
    **dict.fromkeys(("propertyNames", "dependencies", "dependentRequired",
                     "dependentSchemas", "unevaluatedProperties"), "object"),
}


def _kinds(types: set[str] | None) -> frozenset[str]:
    """The instance kinds (numbers split into integral "integer" and the rest, "number")
    that JSON Schema types admit; all of them for None."""
    if types is None:
        return _ALL_KINDS
    return frozenset(types | {"integer"} if "number" in types else types)
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


MAX_MARK_CHARS = 50_000  # nested marks copy what they negate: bounded, as marks are a shortcut


def negating(failing: Any, negated: Any) -> Any:
    """`failing` (the complement of `negated`) marked as such (unmarked if `negated` is
    large)."""
    if len(json.dumps(negated)) > MAX_MARK_CHARS:
        return failing
    base = dict(failing) if isinstance(failing, dict) else {"allOf": [failing]}
    base[NEGATES] = copy.deepcopy(negated)
    return base


def _strings_of(schema: Any) -> list[str] | None:
    """The strings `schema` (exact on strings only) accepts, where it plainly lists them
    (enum / const, an anyOf of such, `false`); None otherwise."""
    if schema is False:
        return []
    if not isinstance(schema, dict):
        return None
    if set(schema) <= {"anyOf"} and isinstance(schema.get("anyOf"), list):
        found: list[str] = []
        for branch in schema["anyOf"]:
            more = _strings_of(branch)
            if more is None:
                return None
            found += more
        return list(dict.fromkeys(found))
    rest = set(schema) - {"type", "enum", "const"}
    if rest or not ("enum" in schema or "const" in schema):
        return None
    values = [schema["const"]] if "const" in schema else schema["enum"]
    if not isinstance(values, list):
        return None
    t = schema.get("type", "string")
    if t != "string" and not (isinstance(t, list) and "string" in t):
        return []
    return [v for v in dict.fromkeys(v for v in values if isinstance(v, str))]


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

