"""Numbers in a schema that llguidance cannot enforce exactly, found before it is given them.

llguidance 1.9.1 reads every number in a schema as an f64 and then:

- bounds of an `integer` become i64s (`ceil(minimum)`, `minimum + 1.0` where exclusive),
  saturating: `minimum: 1e19, maximum: 2e19` is enforced as exactly 9223372036854775807
  (what the model then writes, and the post-check refuses), `minimum: -2**63` beside a
  maximum near it overflows a negation and kills the process (SIGSEGV), and one-sided bounds
  from ~1e18 fail to build;
- bounds of a `number` are written out in decimal (`1e19` as twenty digits) and fail to build
  past i64, and below ~1e-100 (a regex nested once per decimal);
- an integer past 2**53 is rounded on the way in: `minimum: 9007199254740993` is enforced as
  ...992, `const: 18446744073709551617` is written ...552000;
- `multipleOf` becomes a decimal `coef * 10^-exp` with `coef` a u32, found by multiplying the
  f64 by ten until it is whole (0.0007 fails on 7.000000000000001, 123.456 too); two
  `multipleOf`s that meet (allOf) are combined with u32 arithmetic that wraps: `multipleOf`
  65536 and 65537 together are enforced as multiples of some other number.

Inside the ranges below every one of these is exact (bounds within ±2**53, written out with at
most MAX_FRACTION_DIGITS decimals; integers that are doubles; `multipleOf`s llguidance reads as
the decimal the schema says, and whose common multiples fit a u32). Outside them a strict
schema is refused (`UnsupportedSchemaError` naming keyword and pointer); a lenient one is
compiled without the keyword (where it sits under `not`, `if` or `oneOf`, without that
keyword: dropping inside them would narrow the whole) and the keyword is reported as not
enforced, for the post-check. A `$ref` from under `not` / `if` / `oneOf` into a definition
that loses a keyword is not followed (that part narrows there).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import UnsupportedSchemaError
from .schema_walk import subschemas

# |bound| below this: i64 conversion, `+ 1.0` and decimal writing are exact
MAX_MAGNITUDE = 2 ** 53
# decimals of a `number` bound written out ("0.000...1"): llguidance nests a regex group per
# decimal, and fails from ~100
MAX_FRACTION_DIGITS = 40
_U32 = 2 ** 32 - 1
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# where dropping a keyword would narrow the schema, or change which branch holds
_NEGATING = ("not", "if", "then", "else", "oneOf")
_CONDITIONAL = ("if", "then", "else")


@dataclass(frozen=True)
class Inexact:
    """A number keyword llguidance would not enforce as written: where, and why."""

    keyword: str
    pointer: str  # of the keyword
    why: str


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _as_double(v: int | float) -> float | None:
    """`v` as llguidance reads it, or None where that is not `v` exactly."""
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) and x == v else None


def _integer_only(s: dict[str, Any]) -> bool:
    t = s.get("type")
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
    return "integer" in types and "number" not in types


def _bound_problem(v: Any, integer_only: bool) -> str | None:
    if not _is_number(v):
        return None  # draft 4's exclusiveMinimum: true
    x = _as_double(v)
    if x is None:
        return (f"{v!r} is not a double, and llguidance reads it as one "
                f"({_rounded(v)})")
    if abs(x) >= MAX_MAGNITUDE:
        return (f"{v!r} is beyond ±2^53 ({MAX_MAGNITUDE}), where llguidance's number bounds "
                "are not exact")
    if not integer_only and x != 0:
        decimals = -min(Decimal(repr(x)).as_tuple().exponent, 0)  # type: ignore[operator]
        if decimals > MAX_FRACTION_DIGITS:
            return (f"{v!r} has {decimals} decimals written out; llguidance builds bounds of "
                    f"at most {MAX_FRACTION_DIGITS}")
    return None


def _rounded(v: int | float) -> str:
    try:
        return repr(float(v))
    except OverflowError:
        return "infinity"


def llguidance_decimal(v: Any) -> tuple[int, int] | None:
    """`multipleOf: v` as llguidance reads it, (coef, exp) for coef * 10^-exp, where that is
    `v` exactly; None where llguidance fails on it or reads another number."""
    if not _is_number(v):
        return None
    x = _as_double(v)
    if x is None or x <= 0:
        return None
    value, exp = x, 0
    while value != math.floor(value):  # llguidance: `while value.fract() != 0.0 { *= 10 }`
        value *= 10.0
        exp += 1
    if value > _U32:
        return None
    coef = int(value)
    while exp > 0 and coef % 10 == 0:
        coef //= 10
        exp -= 1
    if Decimal(coef).scaleb(-exp) != Decimal(repr(x)):
        return None
    return coef, exp


def _lcm(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """llguidance's `Decimal::lcm`, None where its u32 arithmetic would wrap."""
    if a[1] - b[1] > 9 or b[1] - a[1] > 9:
        return None
    x = a[0] * 10 ** max(b[1] - a[1], 0)
    y = b[0] * 10 ** max(a[1] - b[1], 0)
    if x > _U32 or y > _U32 or x * y > _U32:
        return None
    coef, exp = x * y // math.gcd(x, y), max(a[1], b[1])
    while exp > 0 and coef % 10 == 0:
        coef //= 10
        exp -= 1
    return coef, exp


def _inexact_values(value: Any, path: str = "") -> Iterator[str]:
    """Integers inside a `const` / `enum` value that llguidance would write rounded (it writes
    them through an f64), as "value (at path)"."""
    todo = [(value, path)]
    while todo:
        v, at = todo.pop()
        if isinstance(v, dict):
            todo += [(x, f"{at}/{k}") for k, x in v.items()]
        elif isinstance(v, list):
            todo += [(x, f"{at}/{i}") for i, x in enumerate(v)]
        elif isinstance(v, int) and not isinstance(v, bool) and _as_double(v) is None:
            yield f"{v} (at '{at or '/'}')" if at else str(v)


def inexact_numbers(schema: Any) -> list[Inexact]:
    """Every number keyword of `schema` that llguidance would not enforce as written."""
    found: list[Inexact] = []
    common: tuple[int, int] | None = None  # of the distinct multipleOfs so far
    seen: set[tuple[int, int]] = set()
    first_multiple: Any = None
    for pointer, s in subschemas(schema):
        integer_only = _integer_only(s)
        for k in _BOUNDS:
            why = _bound_problem(s.get(k), integer_only) if k in s else None
            if why is not None:
                found.append(Inexact(k, f"{pointer}/{k}", why))
        if "multipleOf" in s and _is_number(s["multipleOf"]):
            v = s["multipleOf"]
            d = llguidance_decimal(v)
            if d is None:
                found.append(Inexact("multipleOf", f"{pointer}/multipleOf", (
                    f"llguidance reads multipleOf as a decimal of at most 10 digits, found by "
                    f"multiplying a double by ten, and gets another number than {v!r}")))
                continue
            if d in seen:
                continue
            merged = d if common is None else _lcm(common, d)
            if merged is None:
                found.append(Inexact("multipleOf", f"{pointer}/multipleOf", (
                    f"beside multipleOf {first_multiple!r} elsewhere in the schema, their "
                    "common multiple overflows the 32-bit arithmetic llguidance combines them "
                    "with")))
                continue
            common = merged
            seen.add(d)
            first_multiple = v if first_multiple is None else first_multiple
        for k in ("const", "enum"):
            if k in s:
                bad = next(_inexact_values(s[k]), None)
                if bad is not None:
                    found.append(Inexact(k, f"{pointer}/{k}", (
                        f"the integer {bad} is not a double, and llguidance writes it as one "
                        "(rounded)")))
    return found


def number_error(found: Inexact) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(
        f"'{found.keyword}' at '{found.pointer}' cannot be enforced exactly: {found.why}; "
        "change it, or set strict=false to enforce the rest and post-check it",
        keyword=found.keyword, pointer=found.pointer)


def _drops(schema: Any, found: list[Inexact]) -> list[tuple[str, str]]:
    """(keyword, pointer of the subschema holding it) to drop for a lenient compile: each
    inexact keyword, or the outermost `not` / `if` (with then / else) / `oneOf` above it."""
    pointers = [f.pointer for f in found]
    drops: dict[tuple[str, str], None] = {}
    covered: list[str] = []
    for pointer, s in subschemas(schema, skip=frozenset(_NEGATING)):
        for key in _NEGATING:
            inside = f"{pointer}/{key}"
            if key in s and any(p.startswith(inside + "/") for p in pointers):
                for k in (_CONDITIONAL if key in _CONDITIONAL else (key,)):
                    if k in s:
                        drops[(k, pointer)] = None
                covered.append(pointer + "/")
    for f in found:
        holder, keyword = f.pointer.rsplit("/", 1)
        if not any(f.pointer.startswith(c) and f.pointer[len(c):].split("/", 1)[0]
                   in _NEGATING for c in covered):
            drops[(keyword, holder)] = None
            if keyword in ("minimum", "maximum"):  # draft 4's exclusive flag goes with it
                drops[("exclusive" + keyword[:1].upper() + keyword[1:], holder)] = None
    return list(drops)


def exact_numbers(schema: Any, *, strict: bool) -> Any:
    """`schema` as it can be given to llguidance: itself where every number keyword is exact;
    strict, an UnsupportedSchemaError for the first that is not; lenient, a copy without the
    keywords (or the `not` / `if` / `oneOf` above them) that are not."""
    if not isinstance(schema, dict):
        return schema
    found = inexact_numbers(schema)
    if not found:
        return schema
    if strict:
        raise number_error(found[0])
    out = copy.deepcopy(schema)
    for keyword, holder in _drops(schema, found):
        node = out
        for part in holder.split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, dict) and keyword in node and \
                (keyword not in ("exclusiveMinimum", "exclusiveMaximum")
                 or isinstance(node[keyword], bool) or f"{holder}/{keyword}" in
                 {f.pointer for f in found}):
            del node[keyword]
    return out


def not_enforced_numbers(schema: Any) -> list[tuple[str, str]]:
    """(keyword, pointer) of what a lenient compile drops (`exact_numbers`), to report."""
    if not isinstance(schema, dict):
        return []
    found = inexact_numbers(schema)
    if not found:
        return []
    pointers = {f.pointer for f in found}
    out = []
    for keyword, holder in _drops(schema, found):
        at = f"{holder}/{keyword}"
        if keyword in _NEGATING or at in pointers:
            out.append((keyword, at))
    return out


__all__ = ["MAX_FRACTION_DIGITS", "MAX_MAGNITUDE", "Inexact", "exact_numbers",
           "inexact_numbers", "llguidance_decimal", "not_enforced_numbers", "number_error"]
