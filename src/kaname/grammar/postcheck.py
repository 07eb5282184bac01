"""The jsonschema post-check, reading numbers as JSON writes them, and never raising.

Two things made the post-check disagree with a grammar that was followed:

- Numbers. `json.loads` rounds every decimal to a double, and jsonschema's `multipleOf` then
  divides doubles: 0.07 is not a multiple of 0.01 there (0.07 / 0.01 = 7.000000000000001),
  nor 2.1 of 0.7, and `exclusiveMinimum: 0.1` refuses 0.1000000000000000001 (a double 0.1).
  llguidance enforces numbers as the decimals they are written as (JSON Schema's meaning),
  so here the answer and the schema are both read with `Decimal` (exact), and `multipleOf`
  is decided on integers. Bounds and `const` / `enum` compare Decimals exactly; a schema's
  number compares as the decimal its JSON text says (the shortest one of its double).
- Depth. jsonschema descends about two Python frames per subschema (a `$ref` hop, an allOf,
  a property), so a `$ref` chain of ~490 hops, or an answer nested as deep, exceeds Python's
  recursion limit: RecursionError, a 500. A schema whose validation needs more than
  MAX_VALIDATION_DEPTH descents is refused when compiled (`validation_depth_error`, a 400
  naming the limit and the pointer). An answer nested deeper than Python can read or check
  (possible where the schema recurses or leaves values untyped: the grammar bounds no depth
  unless the `max_depth` guard is set) is reported not valid: it could not be checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import jsonschema

from ..errors import GrammarTooComplexError
from .dialect import dialect_of
from .schema_walk import escape

# Descents (subschema applications, `$ref` hops) one validation may need. Measured here:
# jsonschema takes ~2 frames a descent (a `$ref` chain of 493 hops validates from an empty
# stack, 494 does not) and the post-check runs ~10-25 frames deep, under the default limit of
# 1,000 frames; this leaves ~60 descents for what the answer's own nesting adds.
MAX_VALIDATION_DEPTH = 420


def exact_validator(schema: Any) -> Any:
    """A validator for `schema` (in its dialect, formats checked) over Decimal-read JSON."""
    cls = _exact_class(dialect_of(schema))
    return cls(_decimals(schema), format_checker=cls.FORMAT_CHECKER)


def is_valid(validator: Any, text: str) -> bool:
    """Whether JSON `text` is valid for `validator` (`exact_validator`'s); False where it is
    not JSON, or is nested too deeply for Python to read or check."""
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return False
    try:
        return bool(validator.is_valid(value))
    except RecursionError:
        return False


def json_object_valid(text: str) -> bool:
    """json_object's post-check: `text` is one JSON object (False where it cannot be read)."""
    try:
        return isinstance(json.loads(text, parse_float=Decimal, parse_constant=_not_json),
                          dict)
    except (ValueError, RecursionError):
        return False


def _not_json(constant: str) -> Any:
    """`NaN`, `Infinity`, `-Infinity`: Python's json reads them, JSON has no such values
    (and Decimal bounds raise on them)."""
    raise ValueError(f"{constant} is not JSON")


def _decimals(schema: Any) -> Any:
    return json.loads(json.dumps(schema), parse_float=Decimal)


_classes: dict[type[Any], type[Any]] = {}


def _exact_class(cls: type[Any]) -> type[Any]:
    if cls not in _classes:
        checker = cls.TYPE_CHECKER
        if checker.is_type(1.0, "integer"):  # draft 6 on: 1.0 is an integer, and so "1.0"
            checker = checker.redefine("integer", _is_integer)
        _classes[cls] = jsonschema.validators.extend(
            cls, {"multipleOf": _multiple_of(cls.VALIDATORS["multipleOf"])},
            type_checker=checker)
    return _classes[cls]


def _is_integer(checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    if isinstance(instance, float):
        return instance.is_integer()
    return isinstance(instance, Decimal) and instance.is_finite() and \
        instance == instance.to_integral_value()


def _multiple_of(fallback: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    def multiple_of(validator: Any, db: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "number"):
            return
        exact = _exactly_multiple(instance, db)
        if exact is None:  # a double or a non-finite value: jsonschema's own reading
            yield from fallback(validator, db, instance, schema)
        elif not exact:
            yield jsonschema.ValidationError(f"{instance} is not a multiple of {db}")
    return multiple_of


def _exactly_multiple(x: Any, m: Any) -> bool | None:
    """Whether `x` is an integer multiple of `m` (ints or finite Decimals), decided on
    integers without expanding exponents; None for other values."""
    xs, ms = _int_exp(x), _int_exp(m)
    if xs is None or ms is None:
        return None
    (a, ea), (b, eb) = xs, ms
    if b == 0:
        return None
    if a == 0:
        return True
    k = ea - eb  # x / m = (a / b) * 10^k
    if k >= 0:
        return a * pow(10, k, abs(b)) % b == 0
    if -k > len(str(abs(a))):  # b * 10^-k > |a| > 0
        return False
    return a % (b * 10 ** -k) == 0


def _int_exp(v: Any) -> tuple[int, int] | None:
    """(a, e) with v = a * 10^e, for an int or a finite Decimal."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v, 0
    if not isinstance(v, Decimal) or not v.is_finite():
        return None
    sign, digits, exponent = v.as_tuple()
    assert isinstance(exponent, int)  # finite
    try:
        a = int("".join(map(str, digits)) or "0")
    except ValueError:  # more digits than Python converts
        return None
    return (-a if sign else a), exponent


# --- how deep validation descends -------------------------------------------------------------

_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if",
        "then", "else", "unevaluatedProperties", "unevaluatedItems", "items")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "dependentSchemas", "dependencies")


def validation_depth_error(schema: Any) -> GrammarTooComplexError | None:
    """The 400 for a schema whose validation may descend more than MAX_VALIDATION_DEPTH
    subschemas and `$ref` hops in a row (a recursive `$ref` is counted once: its depth follows
    the answer's), naming the limit and where the deepest path goes; None otherwise."""
    depth, path = _deepest(schema)
    if depth <= MAX_VALIDATION_DEPTH:
        return None
    pointer = path or "/"
    return GrammarTooComplexError(
        f"schema is too deep to post-check: validating it descends {depth} subschemas and "
        f"$ref hops in a row (to '{pointer}'), the limit is {MAX_VALIDATION_DEPTH}; flatten "
        "the chain of references or the nesting", pointer=pointer)


def _deepest(schema: Any) -> tuple[int, str]:
    """(descents, pointer of the deepest subschema reached) over the paths from the root,
    following local `$ref`s, a cycle cut where it closes; iterative (the schema may be deeper
    than Python recursion) and linear (each subschema's height is computed once)."""
    height: dict[str, tuple[int, str]] = {}  # pointer -> (descents below it, deepest there)
    successors: dict[str, list[str]] = {}
    on_path: set[str] = set()
    todo: list[tuple[str, Any, bool]] = [("", schema, False)]
    while todo:
        pointer, node, done = todo.pop()
        if done:
            on_path.discard(pointer)
            best = (0, pointer)
            for child in successors.pop(pointer):
                h = height.get(child)  # None: a cycle back to the path
                if h is not None and h[0] + 1 > best[0]:
                    best = (h[0] + 1, h[1])
            height[pointer] = best
            continue
        if pointer in height or pointer in on_path:
            continue
        if not isinstance(node, dict):
            height[pointer] = (0, pointer)
            continue
        children = list(_children(pointer, node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target = _resolve(schema, ref)
            if target is not None:
                children.append((ref[1:], target))
        on_path.add(pointer)
        successors[pointer] = [p for p, _ in children]
        todo.append((pointer, node, True))
        todo += [(p, c, False) for p, c in children if p not in height and p not in on_path]
    return height.get("", (0, ""))


def _children(pointer: str, node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        at = f"{pointer}/{escape(key)}"
        if key in _ONE and isinstance(value, dict):
            yield at, value
        elif key in _LIST and isinstance(value, list):
            yield from ((f"{at}/{i}", v) for i, v in enumerate(value))
        elif key in _MAP and isinstance(value, dict):
            yield from ((f"{at}/{escape(k)}", v) for k, v in value.items())


def _resolve(schema: Any, ref: str) -> Any:
    node = schema
    for part in ref[1:].split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return None
    return node


__all__ = ["MAX_VALIDATION_DEPTH", "exact_validator", "is_valid", "json_object_valid",
           "validation_depth_error"]
