"""Schema-to-schema rewrites: keywords llguidance 1.9.1 refuses, said in words it enforces.

`rewrite_schema` returns an equivalent copy of a JSON Schema (the same set of valid
instances) in which some keywords `%json` refuses are replaced by ones it compiles:

- integer-valued keywords written as decimals (`maxItems: 2.0`) become integers;
- keywords that assert nothing are dropped (`uniqueItems: false`, `uniqueItems` on arrays of
  at most one item, `minContains` / `maxContains` without `contains`);
- `format`s llguidance does not know become anchored `pattern`s that are exactly the format
  (`byte`, `json-pointer`, `relative-json-pointer`, `uri-template`, `uri-reference`, `iri`,
  `iri-reference`) or are dropped where the
  format asserts nothing (OpenAPI's `binary`, `password`). Where the jsonschema post-check
  has no checker for the format (it then passes any string), that is narrower than the
  post-check and reported in the caps (`formats_as_patterns`);
- `dependentRequired`, `dependentSchemas` and draft 4-7 `dependencies` become `anyOf`s of
  "key absent" / "key and its dependencies present" (few keys only);
- `uniqueItems: true` over a tiny finite item domain becomes an `enum` of the duplicate-free
  arrays;
- `contains` (with `minContains`) on arrays with a small `maxItems` becomes an `anyOf` over
  the positions of the matches;
- `propertyNames` with a finite set of names (`enum` / `const` / `false`), a `pattern` or
  length bounds becomes properties / patternProperties with `additionalProperties: false`;
- `not: S` becomes S's complement (complement.py), `if` / `then` / `else` an `anyOf` of
  `if` with `then` and `if`'s complement with `else`, and a `oneOf` llguidance does not
  prove exclusive an `anyOf` of each branch beside the complements of the branches it is not
  proven disjoint from.

Each rewrite is a function whose docstring says why it is exact. A keyword whose rewrite
does not apply (too many alternatives, an unbounded domain, a dialect that does not define it)
is left as it is, so the compiler still refuses it, naming keyword and pointer; `refused`
says why. Rewrites are equivalences, so unlike the runaway guards they also apply under
`not`, `if` and `oneOf`. Key order stays llguidance's: properties in schema order, then keys
that are only `required`, in the order given.

The caller's schema is never modified (the post-check validates against it); rewriting works
on a deep copy.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jsonschema

from .complement import NEGATES, REF_OVERRIDES, complement, negating
from .dialect import dialect_of
from .disjoint import (
    KEYWORD_KIND,
    KINDS,
    admitted_kinds,
    disjoint,
    kinds_of,
    type_of_kinds,
    vacuous_kinds,
)
from .disjoint import (
    finite_values as disjoint_facts_values,
)
from .guards import ANY_VALUE_NAME
from .intersect import Intersection, same_json
from .schema_walk import escape, has_reference, resolve_pointer, subschemas
from .string_sets import pattern_without, pattern_words

# Above these the rewrite is not made and the keyword stays refused.
MAX_DEPENDENCY_ALTERNATIVES = 64  # product of the branches of all dependencies of one object
MAX_UNIQUE_ARRAYS = 256  # duplicate-free arrays enumerated for one uniqueItems
MAX_CONTAINS_ALTERNATIVES = 64  # position choices enumerated for one contains

_INTEGER_KEYWORDS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties",
                     "minProperties", "maxContains", "minContains")
_NOT_ARRAY = ["null", "boolean", "object", "number", "string"]
_NOT_OBJECT = ["null", "boolean", "array", "number", "string"]
# In these dialects `$ref` overrides its sibling keywords: those are not rewritten (jsonschema
# ignores them, and a rewrite would make llguidance enforce more of them, not the same).
_REF_OVERRIDES = REF_OVERRIDES


@dataclass
class Rewritten:
    """The rewritten schema, which rewrites were made (name, pointer) and which were not
    (pointer of the keyword -> why)."""

    schema: Any
    applied: list[tuple[str, str]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    # pointers of formats enforced as patterns that the jsonschema post-check does not check
    # (it passes every string there): narrower than the post-check, so reported in the caps
    unchecked_formats: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


@dataclass
class _Context:
    dialect: type[Any]
    ref_fragments: list[str]
    nested_dialects: bool
    out: Rewritten
    root: Any

    def resolve(self, ref: str) -> Any:
        """The subschema a local `$ref` ("#/a/b") names in the schema being rewritten."""
        fragment = unquote(ref.split("#", 1)[1])
        if fragment and not fragment.startswith("/"):
            raise KeyError(ref)  # an anchor name
        return resolve_pointer(self.root, fragment)

    def complement(self, schema: Any, within: Any = None,
                   keys: Any = None) -> tuple[Any, str | None]:
        return complement(schema, self.dialect, self.resolve, within, keys)

    def valid(self, value: Any, schema: Any) -> bool | None:
        """Whether jsonschema (the post-check's validator) accepts `value` for `schema`, a
        subschema whose references name the root's definitions; None where it cannot
        tell."""
        wrapper = {k: self.root[k] for k in ("$schema", "definitions", "$defs")
                   if k in self.root}
        wrapper["allOf"] = [schema]
        try:
            check = self.dialect(wrapper, format_checker=self.dialect.FORMAT_CHECKER)
            return bool(check.is_valid(value))
        except Exception:  # an unresolvable reference, a schema jsonschema refuses
            return None

    def intersection(self, a: Any, b: Any) -> Any | None:
        return Intersection(self.resolve, self.dialect, self.valid).of(a, b)

    def conjunction(self, parts: list[Any]) -> Any:
        """`allOf: parts`, said without `allOf` where intersect.py can (llguidance then has
        no intersection to make, which it cannot make through a recursive reference)."""
        merged = parts[0]
        for part in parts[1:]:
            merged = self.intersection(merged, part)
            if merged is None:
                return {"allOf": parts}
        return merged

    def applied(self, rule: str, pointer: str) -> None:
        self.out.applied.append((rule, pointer or "/"))

    def refuse(self, pointer: str, keyword: str, why: str) -> None:
        self.out.refused[f"{pointer}/{escape(keyword)}"] = why

    def referenced(self, pointer: str, keyword: str) -> bool:
        """Whether a `$ref` points into `keyword` at `pointer` (then it must stay where it is)."""
        inside = f"{pointer}/{escape(keyword)}"
        return any(f == inside or f.startswith(inside + "/") for f in self.ref_fragments)

    def knows(self, keyword: str) -> bool:
        """Whether the schema's dialect (the one the post-check validates with) defines
        `keyword`; a keyword it does not define is not guessed at."""
        if self.nested_dialects or self.dialect is jsonschema.Draft3Validator:
            return False  # draft 3 (string dependencies, boolean required) is left alone
        if keyword in ("minContains", "maxContains"):  # read by jsonschema's `contains`
            return self.dialect in (jsonschema.Draft201909Validator,
                                    jsonschema.Draft202012Validator)
        return keyword in self.dialect.VALIDATORS


def rewrite_schema(schema: Any) -> Rewritten:
    """An equivalent copy of `schema` that llguidance can compile more of (see the module
    docstring); `schema` itself is not modified."""
    out = copy.deepcopy(schema)
    result = Rewritten(out)
    if not isinstance(out, dict):
        return result
    nodes = _nodes(out)
    dialect = dialect_of(schema)
    ctx = _Context(dialect, _ref_fragments(out),
                   any(dialect_of(s) is not dialect for p, s in nodes if p and "$schema" in s),
                   result, out)
    # unevaluatedProperties first, while every subschema still evaluates the keys it was
    # written with (the other rewrites change which properties a subschema names).
    for pointer, s in reversed(nodes):
        if not ("$ref" in s and ctx.dialect in _REF_OVERRIDES):
            _unevaluated_properties(s, pointer, ctx)
    if any("unevaluatedProperties" in n or "unevaluatedItems" in n for _, n in nodes):
        # What stays reads which keys / items the subschemas beside it evaluate, which the
        # rewrites below change; llguidance refuses it anyway (strict) or leaves it to the
        # post-check (lenient), so nothing more is rewritten.
        return result
    # Bottom-up: a subschema is rewritten before a rewrite of its parent may move it.
    for pointer, s in reversed(nodes):
        if _finite_values(s, pointer, ctx):
            continue
        _integers(s, pointer, ctx)
        _no_ops(s, pointer, ctx)
        if "$ref" in s and ctx.dialect in _REF_OVERRIDES:
            continue
        _format(s, pointer, ctx)
        _dependencies(s, pointer, ctx)
        _contains(s, pointer, ctx)  # before uniqueItems, which refuses next to contains
        _unique_items(s, pointer, ctx)
        _property_names(s, pointer, ctx)
        _names_out_of_patterns(s, pointer, ctx)
        _min_properties(s, pointer, ctx)
        _not(s, pointer, ctx)
        _if_then_else(s, pointer, ctx)
        _one_of(s, pointer, ctx)
        _implied_type(s, pointer, ctx)
    if result.changed:
        _unmark(out)
    return result


def _unmark(node: Any) -> None:
    """Remove the complement marks (complement.NEGATES) the `not` rewrite left."""
    if isinstance(node, dict):
        node.pop(NEGATES, None)
        for v in node.values():
            _unmark(v)
    elif isinstance(node, list):
        for v in node:
            _unmark(v)


def _nodes(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every subschema with its pointer, depth first, then the subtrees of `$ref` targets
    the walk does not reach (a schema kept under a key that is no keyword, `#/paypal/...`):
    they are rewritten like the rest, as what they are is read through the reference."""
    nodes = list(subschemas(schema))
    seen = {id(node) for _, node in nodes}
    pending = _ref_fragments(schema)
    while pending:
        fragment = unquote(pending.pop())
        if fragment and not fragment.startswith("/"):
            continue  # an anchor name
        try:
            target = resolve_pointer(schema, fragment)
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(target, dict) or id(target) in seen:
            continue
        found = list(subschemas(target, fragment))
        nodes += [(p, n) for p, n in found if id(n) not in seen]
        seen |= {id(n) for _, n in found}
        pending += _ref_fragments(target)
    return nodes


def _ref_fragments(schema: Any) -> list[str]:
    """The JSON-pointer fragments of every `$ref` in `schema` (unescaped as written)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and "#" in ref:
                found.append(ref.split("#", 1)[1])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return found


def _add_all_of(s: dict[str, Any], *schemas: Any) -> None:
    """Append to `allOf` (existing entries keep their index, so `$ref`s into them hold)."""
    all_of = s.get("allOf")
    if not isinstance(all_of, list):
        all_of = s["allOf"] = []
    all_of.extend(schemas)


# --- 0. a finite set of values absorbs its siblings ----------------------------------------

MAX_FINITE_VALUES = 256


def _finite_values(s: dict[str, Any], pointer: str, ctx: _Context) -> bool:
    """A schema with `enum` / `const`, or an `allOf` member that is one, -> `enum` of the
    listed values the whole schema accepts (jsonschema, the post-check's validator, decides),
    every other keyword dropped. Returns whether it was made.

    Exact: such a schema accepts only listed values, and of those exactly the ones it
    validates. Made only where something beside the values is a keyword llguidance may not
    enforce (not for a plain `{"type": "string", "enum": [...]}`), where no `$ref` is inside
    (the value check would need the root) and none points into it, and for at most
    MAX_FINITE_VALUES values."""
    values = _listed_values(s)
    if values is None or len(values) > MAX_FINITE_VALUES:
        return False
    rest = set(s) - {"enum", "const", "type", *_ANNOTATIONS}
    if not rest or has_reference(s) or any(
            ctx.referenced(pointer, k) for k in s):
        return False
    check = ctx.dialect(s, format_checker=ctx.dialect.FORMAT_CHECKER)
    kept = [v for v in values if check.is_valid(v)]
    for k in list(s):
        if k not in _ANNOTATIONS and k not in ("$schema", "$id", "id"):
            del s[k]
    s["enum"] = kept
    ctx.applied("a finite set of values", pointer or "/")
    return True


def _listed_values(s: dict[str, Any]) -> list[Any] | None:
    if "const" in s:
        return [s["const"]]
    if isinstance(s.get("enum"), list):
        return list(s["enum"])
    for part in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
        if isinstance(part, dict) and ("const" in part or isinstance(part.get("enum"), list)):
            return [part["const"]] if "const" in part else list(part["enum"])
    return None


# --- 1. integers written as decimals -------------------------------------------------------


def _integers(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`maxItems: 2.0` -> `maxItems: 2` (and minItems, min/maxLength, min/maxProperties,
    min/maxContains).

    Exact: these keywords compare a count with the value, and a count is below, equal to or
    above 2.0 exactly when it is so for 2. JSON Schema (draft 6 on) calls 2.0 an integer, the
    metaschema accepts it, llguidance refuses it ("Expected positive integer")."""
    for k in _INTEGER_KEYWORDS:
        v = s.get(k)
        if isinstance(v, float) and v.is_integer() and v >= 0:
            s[k] = int(v)
            ctx.applied("integer", f"{pointer}/{k}")


# --- 2. keywords that assert nothing -------------------------------------------------------


def _no_ops(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """Drop `uniqueItems: false`, `uniqueItems` where `maxItems` <= 1, and `minContains` /
    `maxContains` without `contains`; llguidance refuses all of them.

    Exact: `uniqueItems: false` is the keyword's default and holds for every instance; an
    array of at most one item has no two equal items; `minContains` and `maxContains`
    only modify `contains` and are ignored without it (and are unknown, so ignored, before
    2019-09)."""
    if s.get("uniqueItems") is False:
        del s["uniqueItems"]
        ctx.applied("uniqueItems: false", f"{pointer}/uniqueItems")
    most = _count(s.get("maxItems"))
    if s.get("uniqueItems") is True and most is not None and most <= 1:
        del s["uniqueItems"]
        ctx.applied("uniqueItems with maxItems <= 1", f"{pointer}/uniqueItems")
    if "contains" not in s:
        for k in ("minContains", "maxContains"):
            if k in s:
                del s[k]
                ctx.applied(f"{k} without contains", f"{pointer}/{k}")


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# --- 3. formats as patterns ----------------------------------------------------------------

# RFC 6901 `unescaped` (%x00-2E / %x30-7D / %x7F-10FFFF: any character but "/" and "~"),
# written as positive ranges: a negated class would trigger kaname's escape narrowing.
_UNESCAPED = r"[\x00-\x2E\x30-\x7D\x7F-\U0010FFFF]"
JSON_POINTER = rf"(?:/(?:{_UNESCAPED}|~[01])*)*"
_NON_NEGATIVE = r"(?:0|[1-9][0-9]*)"
_HEX = "[0-9A-Fa-f]"
_PCT = f"%{_HEX}{_HEX}"
# RFC 3987 ucschar and iprivate, which RFC 6570 allows in literals
_UCS = (r"\xA0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\U00010000-\U0001FFFD\U00020000-\U0002FFFD"
        r"\U00030000-\U0003FFFD\U00040000-\U0004FFFD\U00050000-\U0005FFFD"
        r"\U00060000-\U0006FFFD\U00070000-\U0007FFFD\U00080000-\U0008FFFD"
        r"\U00090000-\U0009FFFD\U000A0000-\U000AFFFD\U000B0000-\U000BFFFD"
        r"\U000C0000-\U000CFFFD\U000D0000-\U000DFFFD\U000E1000-\U000EFFFD")
_PRIVATE = r"\uE000-\uF8FF\U000F0000-\U000FFFFD\U00100000-\U0010FFFD"
_LITERAL = rf"[\x21\x23-\x24\x26\x28-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E{_UCS}{_PRIVATE}]"
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}}"

def _hex(chars: str) -> str:
    """Characters as `\\xHH` escapes: literal in and out of a class, for both regex
    engines (a bare `-`, `&` or `~` in a class can mean set operations to llguidance's)."""
    return "".join(f"\\x{ord(c):02X}" for c in chars)


_UNRESERVED = "A-Za-z0-9" + _hex("-._~")
_SUB_DELIMS = _hex("!$&'()*+,;=")


def _rfc3986(ucs: str = "", private: str = "") -> tuple[str, str]:
    """(URI, URI-reference) of RFC 3986 section 3 and 4.1, rule for rule, anchored; with
    `ucs` added to unreserved and `private` to the query, RFC 3987's IRI and IRI-reference.
    IPv4address needs no rule of its own: every one is also a reg-name."""
    unres = _UNRESERVED + ucs
    pchar = f"(?:[{unres}{_SUB_DELIMS}{_hex(':@')}]|{_PCT})"
    seg, seg_nz = f"{pchar}*", f"{pchar}+"
    seg_nz_nc = f"(?:[{unres}{_SUB_DELIMS}{_hex('@')}]|{_PCT})+"
    query = f"(?:{pchar}|[{_hex('/?')}{private}])*"
    fragment = f"(?:{pchar}|[{_hex('/?')}])*"
    scheme = f"[A-Za-z][A-Za-z0-9{_hex('+-.')}]*"
    userinfo = f"(?:[{unres}{_SUB_DELIMS}{_hex(':')}]|{_PCT})*"
    h16 = f"{_HEX}{{1,4}}"
    dec = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    ls32 = f"(?:{h16}:{h16}|{dec}\\.{dec}\\.{dec}\\.{dec})"

    def head(n: int) -> str:  # [ *n( h16 ":" ) h16 ]
        return f"(?:(?:{h16}:){{0,{n}}}{h16})?" if n else f"(?:{h16})?"

    ipv6 = "|".join([f"(?:{h16}:){{6}}{ls32}", f"::(?:{h16}:){{5}}{ls32}",
                     f"{head(0)}::(?:{h16}:){{4}}{ls32}", f"{head(1)}::(?:{h16}:){{3}}{ls32}",
                     f"{head(2)}::(?:{h16}:){{2}}{ls32}", f"{head(3)}::{h16}:{ls32}",
                     f"{head(4)}::{ls32}", f"{head(5)}::{h16}", f"{head(6)}::"])
    future = f"[vV]{_HEX}+\\.[{_UNRESERVED}{_SUB_DELIMS}{_hex(':')}]+"
    host = f"(?:\\[(?:{ipv6}|{future})\\]|(?:[{unres}{_SUB_DELIMS}]|{_PCT})*)"
    authority = f"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    abempty = f"(?:/{seg})*"
    absolute = f"/(?:{seg_nz}(?:/{seg})*)?"
    tail = f"(?:\\?{query})?(?:#{fragment})?"
    uri = f"{scheme}:(?://{authority}{abempty}|{absolute}|{seg_nz}(?:/{seg})*|){tail}"
    relative = f"(?://{authority}{abempty}|{absolute}|{seg_nz_nc}(?:/{seg})*|){tail}"
    return f"^{uri}$", f"^(?:{uri}|{relative})$"


_IRI, _IRI_REFERENCE = _rfc3986(_UCS, _PRIVATE)


# format -> anchored pattern, each exactly the format's grammar
FORMAT_PATTERNS: dict[str, str] = {
    # OpenAPI `byte`: base64 (RFC 4648 section 4) with its padding. As every base64 decoder
    # does by default, unused bits of the last character are not checked ("QR==" passes).
    "byte": r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
    # RFC 6901: json-pointer = *( "/" reference-token ), escapes "~0" and "~1" only
    "json-pointer": f"^{JSON_POINTER}$",
    # draft-handrews-relative-json-pointer-01 (drafts 7 and 2019-09)
    "relative-json-pointer": f"^{_NON_NEGATIVE}(?:#|{JSON_POINTER})$",
    # RFC 6570 URI-Template, level 4 (the whole grammar)
    "uri-template": rf"^(?:{_LITERAL}|{_PCT}|{_EXPRESSION})*$",
    # RFC 3986 URI-reference (llguidance has `uri` itself); RFC 3987 IRI and IRI-reference
    "uri-reference": _rfc3986()[1],
    "iri": _IRI,
    "iri-reference": _IRI_REFERENCE,
}
# draft-bhutton-relative-json-pointer-00 (draft 2020-12) adds an index manipulation,
# not allowed before "#"
_RELATIVE_POINTER_2020 = (f"^{_NON_NEGATIVE}(?:(?:[+-][1-9][0-9]*)?{JSON_POINTER}|#)$")
# OpenAPI formats that say nothing about a string's characters: "binary" is "any sequence of
# octets", "password" a hint to obscure the input
NO_ASSERTION_FORMATS = frozenset({"binary", "password"})


def format_pattern(fmt: str, dialect: type[Any] = jsonschema.Draft202012Validator) -> str | None:
    """The anchored pattern that is exactly `fmt`, where this module has one."""
    if fmt == "relative-json-pointer" and dialect is jsonschema.Draft202012Validator:
        return _RELATIVE_POINTER_2020
    return FORMAT_PATTERNS.get(fmt)


def _format(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """A `format` llguidance does not know -> a `pattern` that is exactly the format.

    Exact: `format` and `pattern` both constrain strings only (other instances pass both),
    and each pattern in FORMAT_PATTERNS is the format's grammar (its RFC's ABNF, regular,
    translated rule for rule), anchored at both ends. Next to an existing `pattern` the
    format's pattern goes into `allOf`, so both must hold, as before. The OpenAPI formats in
    NO_ASSERTION_FORMATS constrain no string and are dropped.

    Exact for the format, but where jsonschema has no checker for it (always for `byte`; for
    the others unless its optional packages are installed) the post-check treats the format
    as an annotation and passes any string: there the grammar is narrower than the post-check,
    and the pointer is listed in `unchecked_formats` (the caps report it)."""
    fmt = s.get("format")
    if not isinstance(fmt, str):
        return
    if fmt in NO_ASSERTION_FORMATS:
        del s["format"]
        ctx.applied(f"format {fmt} (asserts nothing)", f"{pointer}/format")
        return
    regex = format_pattern(fmt, ctx.dialect)
    if regex is None:
        return
    del s["format"]
    if "pattern" in s:
        _add_all_of(s, {"pattern": regex})
    else:
        s["pattern"] = regex
    ctx.applied(f"format {fmt} as pattern", f"{pointer}/format")
    if fmt not in ctx.dialect.FORMAT_CHECKER.checkers:
        ctx.out.unchecked_formats.append(f"{pointer}/format")


# --- 4. dependencies as anyOf --------------------------------------------------------------


def _absent(key: str) -> dict[str, Any]:
    return {"properties": {key: False}}


def _dependencies(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`dependentRequired` / `dependentSchemas` (2019-09 on) and `dependencies` (drafts 4-7)
    -> one `anyOf` per key K in `allOf`: [K absent, K present and what K requires].

    Exact: the keywords apply to objects only, and to an object only when K is present.
    "K absent" is `{"properties": {K: false}}`, which every non-object and every object
    without K passes and every object with K fails. The second branch is `required: [K, *D]`
    for a list D (D must be present when K is), or `required: [K]` with `allOf: [S]` for a
    schema S (the whole object must match S when K is present). The branches exclude each
    other, so exactly one applies to each object. A schema `true` (or an empty list) asks
    nothing and is dropped, as are keys of D the object's `required` already lists; `false`
    leaves only "K absent". Refused (left as it is) above
    MAX_DEPENDENCY_ALTERNATIVES combinations of branches, where a `$ref` points into the
    keyword, or where the schema's dialect does not define the keyword."""
    alternatives: list[list[Any]] = []
    moved: list[str] = []
    required = s.get("required")
    required = required if isinstance(required, list) else []
    for keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
        value = s.get(keyword)
        if not isinstance(value, dict) or not ctx.knows(keyword) \
                or ctx.referenced(pointer, keyword):
            continue
        branches = [_dependency(k, v, required) for k, v in value.items()]
        if any(b is None for b in branches):
            ctx.refuse(pointer, keyword, "a dependency that is neither a list nor a schema")
            continue
        alternatives += [b for b in branches if b]
        moved.append(keyword)
    if not moved:
        return
    combinations = math.prod(len(b) for b in alternatives)
    if combinations > MAX_DEPENDENCY_ALTERNATIVES:
        for keyword in moved:
            ctx.refuse(pointer, keyword, f"{combinations} combinations of dependencies, "
                                         f"above the bound of {MAX_DEPENDENCY_ALTERNATIVES}")
        return
    for keyword in moved:
        del s[keyword]
        ctx.applied(f"{keyword} as anyOf", f"{pointer}/{keyword}")
    if alternatives:
        _add_all_of(s, *(b[0] if len(b) == 1 else {"anyOf": b} for b in alternatives))


def _dependency(key: str, value: Any, required: list[Any]) -> list[Any] | None:
    """The branches for one dependency ([] when it asks nothing), None if not understood.
    Keys the object's own `required` lists are present anyway and need no branch."""
    if isinstance(value, list) and all(isinstance(d, str) for d in value):
        needed = [d for d in dict.fromkeys(value) if d != key and d not in required]
        return [_absent(key), {"required": [key, *needed]}] if needed else []
    if value is True or value == {}:
        return []
    if value is False:
        return [_absent(key)]
    if isinstance(value, dict):
        return [_absent(key), {"required": [key], "allOf": [value]}]
    return None


# --- 5. uniqueItems over a finite domain ---------------------------------------------------


def _unique_items(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`uniqueItems: true` with items from a tiny finite set -> an `enum` of every
    duplicate-free array of them that the length bounds allow.

    Exact: the items are limited to the values of `items`' `enum` / `const` (or `type`
    boolean / null) that pass the whole `items` schema (checked with jsonschema, the
    post-check's own validator), so every valid array is a duplicate-free sequence of them,
    and the enum lists each such sequence within minItems..maxItems. Values are strings,
    integers, booleans and null only, where equality is identity of the JSON text (true is not
    1 in JSON Schema). The enum constrains arrays only: a schema that also admits other
    types gets `anyOf: [{"type": those}, {"enum": ...}]`. Refused with `prefixItems`, tuple
    `items`, `contains`, a `$ref` in `items`, or above MAX_UNIQUE_ARRAYS arrays."""
    if s.get("uniqueItems") is not True:
        return
    domain = _unique_refusal(s) or _domain(s["items"], ctx)
    if isinstance(domain, str):
        ctx.refuse(pointer, "uniqueItems", domain)
        return
    low = _count(s.get("minItems")) or 0
    most = _count(s.get("maxItems"))
    high = len(domain) if most is None else min(most, len(domain))
    total = 0
    for k in range(low, high + 1):  # stops early: for 250 values the count has 500 digits
        total += math.perm(len(domain), k)
        if total > MAX_UNIQUE_ARRAYS:
            break
    if low > high:
        ctx.refuse(pointer, "uniqueItems", "no duplicate-free array satisfies minItems")
    elif total > MAX_UNIQUE_ARRAYS:
        ctx.refuse(pointer, "uniqueItems", f"more than {MAX_UNIQUE_ARRAYS} duplicate-free "
                                           f"arrays of {len(domain)} values")
    else:
        arrays = [list(p) for k in range(low, high + 1)
                  for p in itertools.permutations(domain, k)]
        del s["uniqueItems"]
        _add_for_arrays(s, {"enum": arrays})
        ctx.applied("uniqueItems as enum", f"{pointer}/uniqueItems")


def _unique_refusal(s: dict[str, Any]) -> str | None:
    if "prefixItems" in s or "contains" in s:
        return "uniqueItems next to prefixItems or a contains that stayed"
    items = s.get("items")
    if not isinstance(items, dict | bool):
        return "uniqueItems without an items schema" if items is None else \
            "uniqueItems with tuple items"
    return None


def _domain(items: Any, ctx: _Context) -> list[Any] | str:
    """The finite set of values `items` admits, or why there is none to enumerate."""
    if items is False:
        return []
    if not isinstance(items, dict):
        return "uniqueItems over items that are not a finite set of values"
    if has_reference(items):
        return "uniqueItems over items with a $ref"
    if "const" in items:
        values = [items["const"]]
    elif isinstance(items.get("enum"), list):
        values = list(items["enum"])
    else:
        types = items.get("type")
        types = [types] if isinstance(types, str) else types
        if not isinstance(types, list) or not types or \
                not set(types) <= {"boolean", "null"}:
            return "uniqueItems over items that are not a finite set of values"
        values = ([True, False] if "boolean" in types else []) + \
            ([None] if "null" in types else [])
    if not all(v is None or isinstance(v, str | bool) or type(v) is int for v in values):
        return "uniqueItems over values other than strings, integers, booleans and null"
    validator = ctx.dialect(items, format_checker=ctx.dialect.FORMAT_CHECKER)
    unique: dict[str, Any] = {}
    for v in values:
        if validator.is_valid(v):
            unique.setdefault(json.dumps(v), v)
    return list(unique.values())


def _add_for_arrays(s: dict[str, Any], schema: Any) -> None:
    """Add `schema` to `allOf` for arrays only: where `type` admits other instances too (or
    is absent), as `anyOf: [{"type": the others}, schema]`."""
    t = s.get("type")
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if types == ["array"]:
        _add_all_of(s, schema)
    else:
        others = _NOT_ARRAY if types is None else [x for x in types if x != "array"]
        _add_all_of(s, {"anyOf": [{"type": others}, schema]})


# --- 6. contains over bounded arrays -------------------------------------------------------


def _contains(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`contains: S` (at least `minContains` items, default 1, match S) on arrays with
    `maxItems: m` -> `anyOf` over the sets P of positions, |P| = minContains, P within 0..m-1,
    of `{"minItems": max(P)+1, "prefixItems": [S at the positions of P, true elsewhere]}`
    (`items: [...]` before draft 2020-12).

    Exact: an array has at least n items matching S exactly when some n of its positions hold
    items matching S; positions are below maxItems, and `minItems` makes each position in P
    exist (prefixItems alone passes shorter arrays). `items` and the other keywords of the
    array still apply to every item (llguidance intersects them position by position).
    `minContains: 0` makes `contains` hold for every array and drops it; a `maxContains` at or
    above maxItems cannot fail and is dropped. Refused: another `maxContains` (it needs the
    complement of S), no `maxItems`, more than MAX_CONTAINS_ALTERNATIVES position sets, tuple
    `items` (drafts up to 2019-09), and `minContains` / `maxContains` in a dialect that does not
    define them."""
    if "contains" not in s or not ctx.knows("contains") or ctx.referenced(pointer, "contains"):
        return
    if isinstance(s.get("items"), list) or "additionalItems" in s:
        # llguidance does not intersect tuple `items` with prefixItems position by position
        # (measured: ["a"] then passed `items: [{"type": "string"}]` with contains)
        ctx.refuse(pointer, "contains", "contains next to tuple items")
        return
    for k in ("minContains", "maxContains"):
        if k in s and not ctx.knows(k):
            ctx.refuse(pointer, "contains", f"{k} is not a keyword of the schema's dialect")
            return
    high = _count(s.get("maxItems"))
    need = _count(s.get("minContains"))
    need = 1 if need is None else need
    most = _count(s.get("maxContains"))
    if most is not None and (high is None or most < high):
        ctx.refuse(pointer, "contains", "maxContains below maxItems")
        return
    if need > 0 and high is None:
        ctx.refuse(pointer, "contains", "contains on arrays without maxItems")
        return
    alternatives = math.comb(high, need) if high is not None and need > 0 else 0
    if alternatives > MAX_CONTAINS_ALTERNATIVES:
        ctx.refuse(pointer, "contains", f"{alternatives} position sets, above the bound of "
                                        f"{MAX_CONTAINS_ALTERNATIVES}")
        return
    target = s.pop("contains")
    s.pop("minContains", None)
    s.pop("maxContains", None)
    ctx.applied("contains as anyOf", f"{pointer}/contains")
    if need == 0:
        return
    assert high is not None
    # llguidance reads the dialect too: before 2020-12 a tuple is `items: [...]` (it ignores
    # `prefixItems` there), from 2020-12 on `prefixItems`
    tuple_keyword = "prefixItems" if ctx.dialect is jsonschema.Draft202012Validator else "items"
    branches = []
    for positions in itertools.combinations(range(high), need):
        prefix = [copy.deepcopy(target) if i in positions else True
                  for i in range(positions[-1] + 1)]
        branches.append({"minItems": positions[-1] + 1, tuple_keyword: prefix})
    _add_for_arrays(s, {"anyOf": branches} if branches else False)


# --- 7. propertyNames as the keys an object may have ----------------------------------------

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly"})
_NAME_BOUNDS = frozenset({"type", "pattern", "minLength", "maxLength"})


def _property_names(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`propertyNames: S` -> the keys S allows, said with `properties`, `patternProperties`
    and `additionalProperties: false`.

    Exact: propertyNames, properties and additionalProperties all apply to objects only, and
    a key's value was validated by its property schema, or else by additionalProperties; both
    stay so for every key S allows, and a key S refuses cannot be present. Where S allows a
    finite set of names (`enum` / `const` filtered by the rest of S with the post-check's
    validator, or `false`): declared properties outside it become `false`, names of the set
    not declared become properties with additionalProperties' schema, and additionalProperties
    becomes false; patternProperties beside it meet the names they match there (each
    allowed name is then a property: the regexes have nothing left to match). S may be a
    `$ref` to such a schema. Where S is a `pattern` or length bounds (and `type: string`), with
    additionalProperties true or absent: patternProperties `{P: {}}` (a search, as `pattern`
    is; the bounds as `^[\\s\\S]{min,max}$`; the guards' any-value stays the value schema
    there), additionalProperties false, and the declared
    properties whose name S refuses become `false`. Left as it is (refused): anything else in
    S, patternProperties beside a pattern, unevaluatedProperties beside it, a `$ref` into
    it, a dialect without the keyword."""
    if "propertyNames" not in s or not ctx.knows("propertyNames") or any(
            ctx.referenced(pointer, k) for k in ("propertyNames", "properties",
                                                 "patternProperties", "additionalProperties")):
        return
    names_schema = s["propertyNames"]
    if isinstance(names_schema, dict) and set(names_schema) - _ANNOTATIONS == {"$ref"}:
        try:  # a reference to the names (often an enum in the definitions)
            names_schema = ctx.resolve(names_schema["$ref"])
        except (KeyError, IndexError, TypeError, ValueError):
            return
    props = s.get("properties", {})
    patterns = s.get("patternProperties", {})
    if not isinstance(props, dict) or not isinstance(names_schema, bool | dict) \
            or not isinstance(patterns, dict):
        return
    rest = set(names_schema) - _ANNOTATIONS if isinstance(names_schema, dict) else set()
    finite = names_schema is False or "enum" in rest or "const" in rest
    if "unevaluatedProperties" in s or (patterns and not finite):
        ctx.refuse(pointer, "propertyNames", "patternProperties (beside names that are not a "
                                             "finite set) or unevaluatedProperties beside it")
        return
    if names_schema is True or (isinstance(names_schema, dict) and not rest):
        del s["propertyNames"]
        ctx.applied("propertyNames that allows every name", f"{pointer}/propertyNames")
        return
    name_ok = _name_check(names_schema, ctx)
    allowed = {k: name_ok(k) for k in props}
    if None in allowed.values():
        return
    kept = {k: (v if allowed[k] else False) for k, v in props.items()}
    if finite:
        values = [] if names_schema is False else names_schema.get(
            "enum", [names_schema.get("const")])
        if not isinstance(values, list):
            return
        names = [n for n in dict.fromkeys(v for v in values if isinstance(v, str))
                 if name_ok(n)]
        extra = s.get("additionalProperties", True)
        listed = {**kept, **{n: copy.deepcopy(extra) for n in names if n not in kept}}
        if patterns:  # every allowed name is now a property: patterns meet it there
            try:
                matching = {n: [copy.deepcopy(v) for r, v in patterns.items()
                                if re.search(r, n)] for n in names}
            except re.error:
                return
            for n in names:
                if matching[n]:
                    base = [kept[n]] if n in kept else []
                    listed[n] = _all_of_schemas([*base, *matching[n]])
            s.pop("patternProperties")
        s["properties"] = listed
    else:
        pattern = _names_pattern(names_schema, rest) if isinstance(names_schema, dict) \
            else None
        if pattern is None:
            ctx.refuse(pointer, "propertyNames", "only enum / const, or a pattern or length "
                                                 "bounds, are rewritten")
            return
        extra = s.get("additionalProperties", True)
        if extra not in (True, {}) and not _any_value(extra):
            ctx.refuse(pointer, "propertyNames", "a pattern beside an additionalProperties "
                                                 "schema")
            return
        if kept:
            s["properties"] = kept
        # the guards' bounded any-value (they run first) accepts every value, as true does
        s["patternProperties"] = {pattern: {} if extra is True else extra}
    s["additionalProperties"] = False
    del s["propertyNames"]
    ctx.applied("propertyNames as the keys allowed", f"{pointer}/propertyNames")


def _name_check(names_schema: Any, ctx: _Context) -> Callable[[str], bool | None]:
    """Whether a name passes `names_schema`, as the post-check's validator says, in time
    linear in the names checked: a name is looked up in an `enum` rather than validated
    against it (jsonschema compares it with every member: 20,000 names against their own
    enum took ~100 s here), and the rest of the schema is validated only where it says more
    than annotations."""
    if not isinstance(names_schema, dict) or "enum" not in names_schema \
            or not isinstance(names_schema["enum"], list) or "$ref" in names_schema:
        # (beside a $ref, drafts 4-7 ignore the enum: the validator knows which applies)
        return lambda name: ctx.valid(name, names_schema)
    members = {v for v in names_schema["enum"] if isinstance(v, str)}
    rest = {k: v for k, v in names_schema.items() if k != "enum"}
    if not set(rest) - _ANNOTATIONS:
        return lambda name: name in members
    return lambda name: name in members and ctx.valid(name, rest)


def _all_of_schemas(parts: list[Any]) -> Any:
    return parts[0] if len(parts) == 1 else {"allOf": parts}


def _any_value(schema: Any) -> bool:
    """Whether `schema` is the guards' any-value (every JSON value, numbers bounded)."""
    return isinstance(schema, dict) and set(schema) == {"$ref"} and schema["$ref"] in (
        f"#/$defs/{ANY_VALUE_NAME}", f"#/definitions/{ANY_VALUE_NAME}")


def _names_pattern(names_schema: dict[str, Any], rest: set[str]) -> str | None:
    """One pattern for a pattern, or for length bounds; None for anything else."""
    if rest - _NAME_BOUNDS or names_schema.get("type", "string") != "string":
        return None
    pattern = names_schema.get("pattern")
    low, high = names_schema.get("minLength"), names_schema.get("maxLength")
    if pattern is not None:
        return pattern if isinstance(pattern, str) and low is None and high is None else None
    low = _count(low) if low is not None else 0
    high = _count(high) if high is not None else None
    if low is None or (high is None and names_schema.get("maxLength") is not None):
        return None
    return f"^[\\s\\S]{{{low},{'' if high is None else high}}}$"


# --- 8. not, if/then/else and oneOf through the complement ----------------------------------

MAX_ONE_OF_BRANCHES = 8  # oneOf rewritten as n branches, each with n-1 complements
MAX_DISJOINT_BRANCHES = 64  # where no complement is needed (pairwise proofs only)


def _not(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`not: S` -> `allOf: [complement of S]` (complement.py says why that is exact and
    when there is none). Left as it is (refused) where S has no complement here, or a `$ref`
    points into it."""
    if "not" not in s or ctx.referenced(pointer, "not"):
        return
    # `not` applies to the same object: where this schema is closed, only its keys matter
    failing, why = ctx.complement(s["not"], keys=_closed_keys(s, ctx))
    if why is not None:
        ctx.refuse(pointer, "not", why)
        return
    _add_all_of(s, negating(failing, s.pop("not")))
    ctx.applied("not as its complement", f"{pointer}/not")


def _if_then_else(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`if: I, then: T, else: E` -> `allOf: [{anyOf: [allOf [I, T], allOf [not-I, E]]}]`
    (T and E default to true; without both, `if` asserts nothing and is dropped).

    Exact: an instance either matches I, and must then match T, or does not, and must then
    match E; the two branches exclude each other. Refused where I has no complement
    (complement.py), a `$ref` points into the keywords, or the dialect predates `if`."""
    if "if" not in s or not ctx.knows("if") or any(
            ctx.referenced(pointer, k) for k in ("if", "then", "else")):
        return
    cond = s["if"]
    then, other = s.get("then", True), s.get("else", True)
    if then is not True or other is not True:
        failing, why = ctx.complement(cond)
        if why is not None:
            ctx.refuse(pointer, "if", why)
            return
        _add_all_of(s, {"anyOf": [ctx.conjunction([cond, then]),
                                  ctx.conjunction([failing, other])]})
    for k in ("if", "then", "else"):
        s.pop(k, None)
    ctx.applied("if/then/else as anyOf", f"{pointer}/if")


def _one_of(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`oneOf: [A1..An]` -> `anyOf` over i of `allOf: [Ai, complement of each Aj that Ai is
    not proven disjoint from]` (just `anyOf: [A1..An]` where every pair is), beside a `type`
    that leaves out the kinds of instance two branches accept whole.

    Exact: an instance is valid when it matches exactly one branch, that is, for some i it
    matches Ai and no other. An instance of a kind two branches accept whole (no keyword of
    theirs applies to it: `required` to a string) matches both, so that kind is left out
    (disjoint.vacuous_kinds); likewise an object with none of the names of two branches
    that say nothing of objects but `properties`, so one of those names is required.
    Among the kinds left, a branch disjoint from Ai (disjoint.disjoint: no common kind,
    finite value sets or a required key whose value schemas do not meet) cannot match
    beside it, so its complement is implied there; the complement of Aj needs to be exact
    only on the kinds Ai admits (and, where Ai is closed, on its keys). Refused above
    MAX_ONE_OF_BRANCHES branches where complements are needed (MAX_DISJOINT_BRANCHES where
    none is), where a needed complement cannot be built, or where a `$ref` points into the
    keyword. llguidance proves some oneOfs exclusive by itself: those stay
    as they are."""
    branches = s.get("oneOf")
    if not isinstance(branches, list) or not branches or ctx.referenced(pointer, "oneOf") \
            or _llguidance_proves_exclusive(branches, ctx):
        return
    if _finite_one_of(s, branches, pointer, ctx):
        return
    if len(branches) > MAX_DISJOINT_BRANCHES:
        ctx.refuse(pointer, "oneOf", f"{len(branches)} branches, above the bound of "
                                     f"{MAX_DISJOINT_BRANCHES}")
        return
    n = len(branches)
    around = kinds_of(s["type"]) if "type" in s else set(KINDS)
    whole = [vacuous_kinds(b, ctx.resolve, ctx.dialect) for b in branches]
    shared = {k for k in around or () if sum(k in w for w in whole) >= 2}
    if len(shared & {"integer", "number"}) == 1:
        shared -= {"integer", "number"}  # `type` cannot leave out one half of the numbers
    kinds = (around or set(KINDS)) - shared
    required: list[str] = [k for k in s.get("required") or () if isinstance(k, str)] \
        if isinstance(s.get("required"), list) else []
    # objects with none of the names of two branches that only name properties match both
    present: list[list[str]] = []
    if "object" in kinds:
        named = [_only_named(b, ctx) for b in branches]
        for i, j in itertools.combinations(range(n), 2):
            first, second = named[i], named[j]
            if first is not None and second is not None:
                either = sorted(first | second)
                if either and either not in present:  # none: vacuous_kinds saw it
                    present.append(either)
    required += [k for names in present if len(names) == 1 for k in names
                 if k not in required]
    apart = {(i, j) for i in range(n) for j in range(i + 1, n)
             if disjoint(branches[i], branches[j], ctx.resolve, ctx.dialect, within=kinds,
                         required=required)}
    if len(apart) < n * (n - 1) // 2 and n > MAX_ONE_OF_BRANCHES:
        ctx.refuse(pointer, "oneOf", f"{n} branches not all proven disjoint, above the bound "
                                     f"of {MAX_ONE_OF_BRANCHES} for complements")
        return
    alternatives: list[Any] = []
    for i, branch in enumerate(branches):
        overlapping = [j for j in range(n) if j != i and (min(i, j), max(i, j)) not in apart]
        if not overlapping:
            alternatives.append(branch)
            continue
        own = _kinds_admitted(branch, ctx) & kinds
        keys = _closed_keys(branch, ctx)
        parts = [branch]
        for j in overlapping:
            failing, why = ctx.complement(branches[j], own, keys)
            if why is not None:
                ctx.refuse(pointer, "oneOf", why)
                return
            parts.append(failing)
        alternatives.append(ctx.conjunction(copy.deepcopy(parts)))
    del s["oneOf"]
    if shared:
        kept = type_of_kinds(kinds)
        _add_all_of(s, {"type": kept} if kept else False)
    for names in present:
        _add_all_of(s, {"required": names} if len(names) == 1
                    else {"anyOf": [{"required": [k]} for k in names]})
    if "anyOf" in s:
        _add_all_of(s, {"anyOf": alternatives})
    else:  # in place: llguidance reads a sibling anyOf without an intersection
        s["anyOf"] = alternatives
    ctx.applied("oneOf as anyOf of exclusive branches", f"{pointer}/oneOf")


def _finite_one_of(s: dict[str, Any], branches: list[Any], pointer: str,
                   ctx: _Context) -> bool:
    """A oneOf whose every branch admits finitely many values -> `enum` of the values exactly
    one branch accepts (jsonschema decides). Exact: those are the instances that match
    exactly one branch. Returns whether it was made."""
    listed = [disjoint_facts_values(b, ctx.resolve, ctx.dialect) for b in branches]
    if any(v is None for v in listed):
        return False
    candidates: list[Any] = []
    for values in listed:
        for v in values or ():
            if not any(same_json(v, w) for w in candidates):
                candidates.append(v)
    if len(candidates) > MAX_FINITE_VALUES:
        return False
    kept = []
    for v in candidates:
        verdicts = [ctx.valid(v, b) for b in branches]
        if None in verdicts:
            return False
        if sum(bool(x) for x in verdicts) == 1:
            kept.append(v)
    del s["oneOf"]
    _add_all_of(s, {"enum": kept} if kept else False)
    ctx.applied("oneOf of finite sets as the values one branch accepts", f"{pointer}/oneOf")
    return True


MAX_CLOSED_KEYS = 64


def _only_named(schema: Any, ctx: _Context) -> set[str] | None:
    """The property names of a schema admitting objects whose only object keyword is
    `properties` (so it accepts every object that has none of those names); None where it
    says more about objects."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return None
    for k, v in schema.items():
        if k in _ANNOTATIONS or k == "properties" or k not in ctx.dialect.VALIDATORS:
            continue
        if k == "type":
            if "object" not in (kinds_of(v) or set()):
                return None
        elif KEYWORD_KIND.get(k, "object") == "object":
            return None  # an object keyword, or enum / const / a combinator
    props = schema.get("properties", {})
    return set(props) if isinstance(props, dict) else None


def _closed_keys(schema: Any, ctx: _Context) -> set[str] | None:
    """The only keys objects matching `schema` can have, where it says so plainly
    (`additionalProperties: false`, no patternProperties, through `$ref`s); None otherwise."""
    for _ in range(8):
        if not (isinstance(schema, dict) and "$ref" in schema
                and (len(schema) == 1 or ctx.dialect in REF_OVERRIDES)):
            break
        try:
            schema = ctx.resolve(schema["$ref"])
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    if not isinstance(schema, dict) or schema.get("additionalProperties") is not False \
            or "$ref" in schema:
        return None
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    if not isinstance(props, dict) or not isinstance(patterns, dict):
        return None
    keys = set(props)
    for pattern in patterns:  # keys a pattern allows, where they are few
        words = pattern_words(pattern, MAX_CLOSED_KEYS)
        if words is None:
            return None
        keys |= words
    return keys


def _kinds_admitted(schema: Any, ctx: _Context) -> set[str]:
    """The kinds of instance `schema` may admit (all where its `type` is not read)."""
    if isinstance(schema, dict) and "type" in schema:
        return kinds_of(schema["type"]) or set(KINDS)
    return set(KINDS)


def _llguidance_proves_exclusive(branches: list[Any], ctx: _Context) -> bool:
    """Whether llguidance compiles `oneOf: branches` by itself (the root's definitions and
    `$schema` beside it, so that references and the dialect read as in the whole schema)."""
    from .lark import _builds, _json_body  # lark.py imports this module

    probe = {k: ctx.root[k] for k in ("$schema", "definitions", "$defs") if k in ctx.root}
    probe["oneOf"] = branches
    try:
        return _builds(_json_body(probe, {}))
    except Exception:  # any failure to build means "not by itself"
        return False


# --- 9. minProperties beside optional properties --------------------------------------------

MAX_MIN_PROPERTIES_ALTERNATIVES = 64
# Optional properties of which one must be present, as branches "the first one present is
# p": 128 build in ~0.7 s; llguidance's own construction (and branches `required: [p]`) open
# ~k² items at the `{`, past its max_items_in_row (2000) from ~36-44 (costs.py).
MAX_FIRST_PRESENT = 128


def _min_properties(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`minProperties: N` beside properties that are not all required (llguidance counts
    keys only where every listed property is required) -> an `anyOf` over which optional
    properties are present.

    Exact: the required keys are always there, so K = N - len(required) more keys are
    needed (none: minProperties asserts nothing and is dropped). For K = 1: one branch per
    optional property p, "p is the first optional property present" (p required, those
    before it `false`), and on open objects one more: none present and at least N keys
    (`properties: {o: false}` for each optional o lets llguidance count them). With
    `additionalProperties: false` and K > 1, only optional properties can make up the
    count: some K of them present (one branch per choice). Left as it is beside
    `maxProperties` or `patternProperties`, for K > 1 on open objects, above
    MAX_FIRST_PRESENT optional properties for K = 1, or above
    MAX_MIN_PROPERTIES_ALTERNATIVES branches for K > 1 (costs.py refuses what llguidance
    could not build from what is left)."""
    least, props = _count(s.get("minProperties")), s.get("properties")
    required = s.get("required", [])
    if least is None or not isinstance(props, dict) or not isinstance(required, list) \
            or "maxProperties" in s or "patternProperties" in s \
            or ctx.referenced(pointer, "minProperties"):
        return
    optional = [k for k, v in props.items() if k not in required and v is not False]
    if not optional:
        return
    needed = least - len(set(required))
    if needed <= 0:
        del s["minProperties"]
        ctx.applied("minProperties met by required", f"{pointer}/minProperties")
        return
    closed = s.get("additionalProperties") is False and set(required) <= set(props)
    if needed == 1 and len(optional) <= MAX_FIRST_PRESENT:
        # the first present: a key at the `{` is in one branch only, so the parser keeps
        # ~k items open there rather than ~k² (all `required: [p]` branches admit p's
        # predecessors first)
        branches: list[Any] = [
            {"required": [k], **({"properties": dict.fromkeys(optional[:i], False)}
                                 if i else {})}
            for i, k in enumerate(optional)]
        if not closed:
            branches.append({"properties": dict.fromkeys(optional, False),
                             "minProperties": least})
    elif closed:
        if math.comb(len(optional), needed) > MAX_MIN_PROPERTIES_ALTERNATIVES:
            return
        branches = [{"required": list(c)} for c in itertools.combinations(optional, needed)]
        if not branches:  # too few keys for any object: only the other types pass
            branches = [{"type": _NOT_OBJECT}]
    else:
        return
    del s["minProperties"]
    _add_all_of(s, branches[0] if len(branches) == 1 else {"anyOf": branches})
    ctx.applied("minProperties as anyOf", f"{pointer}/minProperties")


# --- 10. unevaluatedProperties where what is evaluated is fixed ---------------------------

_BRANCHING = ("anyOf", "oneOf", "if", "dependentSchemas", "$dynamicRef", "$recursiveRef")


def _unevaluated_properties(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """`unevaluatedProperties: U` where the subschemas that evaluate properties are this
    schema, its `allOf` members and `$ref` targets (and theirs), with no branching
    (anyOf / oneOf / if / dependentSchemas) -> dropped where one of them has
    `additionalProperties` (it evaluates every key), else `additionalProperties: U` with
    the names they declare added as `properties: {name: {}}`.

    Exact: all those subschemas must hold for the instance to be valid, so the keys they
    evaluate are exactly the names in their `properties` (or every key, with an
    `additionalProperties` among them), whatever the instance; unevaluatedProperties then
    applies U to the other keys, as additionalProperties beside those names does.
    Left as it is beside patternProperties in any of them, or a `$ref` into it."""
    if "unevaluatedProperties" not in s or not ctx.knows("unevaluatedProperties") \
            or ctx.referenced(pointer, "unevaluatedProperties"):
        return
    names: list[str] = []
    every = False
    stack: list[Any] = [s]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        if any(k in node for k in _BRANCHING) or "patternProperties" in node:
            return
        if node is not s and ("unevaluatedProperties" in node
                              or "additionalProperties" in node):
            every = True
        if node is s and "additionalProperties" in s:
            return  # both on one schema: additionalProperties decides alone, left to it
        if isinstance(node.get("properties"), dict):
            names += node["properties"]
        if isinstance(node.get("allOf"), list):
            stack += node["allOf"]
        if "$ref" in node:
            try:
                stack.append(ctx.resolve(node["$ref"]))
            except (KeyError, IndexError, TypeError, ValueError):
                return
    rest = s.pop("unevaluatedProperties")
    if every:
        ctx.applied("unevaluatedProperties where every key is evaluated",
                    f"{pointer}/unevaluatedProperties")
        return
    props = s.setdefault("properties", {})
    for name in names:
        props.setdefault(name, {})
    s["additionalProperties"] = rest
    ctx.applied("unevaluatedProperties as additionalProperties",
                f"{pointer}/unevaluatedProperties")


# --- 11. intersections llguidance would make through a recursive reference ---------------


def _names_out_of_patterns(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """A property a `patternProperties` regex also matches -> the property's schema made the
    intersection of the two (intersect.py), and the regex rewritten without the property's
    name (string_sets.pattern_without).

    Exact: jsonschema validates such a property against both schemas; afterwards it meets
    one schema that accepts exactly what both did, and the regex still matches every other
    name it matched. Made only where a `$ref` is in one of the two (llguidance intersects
    the others itself, but not through a recursive reference), and only where every such
    intersection and regex can be built; left as it is where a `$ref` points into the
    properties or patterns."""
    props, patterns = s.get("properties"), s.get("patternProperties")
    if not isinstance(props, dict) or not isinstance(patterns, dict) or not patterns \
            or ctx.referenced(pointer, "properties") \
            or ctx.referenced(pointer, "patternProperties"):
        return
    named: dict[str, list[str]] = {}
    for regex in patterns:
        try:
            names = [k for k in props if re.search(regex, k)]  # as jsonschema matches them
        except re.error:
            return
        if names:
            named[regex] = names
    if not any(has_reference(props[k]) or has_reference(patterns[regex])
               for regex, names in named.items() for k in names):
        return
    merged = dict(props)
    renamed: dict[str, str] = {}
    for regex, names in named.items():
        narrower = pattern_without(regex, names)
        if narrower is None or narrower in patterns:
            return
        renamed[regex] = narrower
        for k in names:
            meet = ctx.intersection(merged[k], patterns[regex])
            if meet is None:
                return
            merged[k] = meet
    s["properties"] = merged
    s["patternProperties"] = {renamed.get(r, r): v for r, v in patterns.items()}
    ctx.applied("properties out of the patternProperties they match",
                f"{pointer}/patternProperties")


def _implied_type(s: dict[str, Any], pointer: str, ctx: _Context) -> None:
    """Beside an `anyOf`: a `type` whose every branch admits only those types, and an
    `additionalProperties` that is `true` / `{}`, -> dropped.

    Exact: the `type` rejects nothing the `anyOf` accepts, and `additionalProperties: {}` is
    the keyword's default (no unevaluatedProperties is left to read it: rewrite_schema). llguidance
    intersects keywords beside an `anyOf` with each branch, which fails through a
    recursive reference."""
    branches = s.get("anyOf")
    if not isinstance(branches, list) or not branches:
        return
    more = s.get("additionalProperties")
    if (more is True or more == {}) and not ctx.referenced(pointer, "additionalProperties"):
        del s["additionalProperties"]
        ctx.applied("additionalProperties: {} beside anyOf", f"{pointer}/additionalProperties")
    kinds = kinds_of(s["type"]) if "type" in s else None
    if kinds is None or not all(admitted_kinds(b, ctx.resolve, ctx.dialect) <= kinds
                                for b in branches):
        return
    del s["type"]
    ctx.applied("type implied by anyOf", f"{pointer}/type")
