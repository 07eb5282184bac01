"""Per-key tool arguments (GLM): one `<arg_key>K</arg_key><arg_value>V</arg_value>` pair per
argument, a string value written raw and any other value as JSON (the official templates:
`v if v is string else v | tojson`).

Shared by the grammar (which binds each key to its property schema) and the parser (which
rebuilds the arguments JSON text), so both read a value the same way (`raw`): as bare text when
its property schema is a string schema (`type: "string"`, or only string `enum` / `const`,
through a local `$ref` too), as bare text or `null` when it is an optional string
(`type: ["string", "null"]`, `anyOf` / `oneOf` of a string schema and `{"type": "null"}`, as
pydantic writes `Optional[str]`), and as JSON otherwise. An optional string's text `null` is
JSON null: GLM's templates write None as `null` and the string "null" as `null` too, so the
two cannot be told apart; kaname reads null, which the schema allows either way.

What the grammar enforces for a tool whose parameters are an object schema:

- declared keys in the schema's property order, each at most once, every `required` one;
- each JSON value is `%json` of its property schema (with the root's `$defs` / `definitions`);
- a raw value cannot contain the value end marker and keeps `enum`, `const`, `minLength`,
  `maxLength`, `pattern` and the `format`s `raw_text.py` has a regex for (what it accepts is
  within what the jsonschema post-check accepts; see there);
- undeclared keys (`additionalProperties` not false, no `patternProperties` /
  `propertyNames`), after the declared ones: a key that is not a declared one, its value bound
  to `additionalProperties`' schema where it is one (raw text or JSON as above), else any text
  (read back as JSON where it parses, else as a string, as the parser does without a schema).
  At most `MAX_EXTRA_ARGS` of them (the guards' `max_array_items` when set): a runaway guard;
  an undeclared key may repeat (a grammar cannot bind uniqueness; JSON readers keep the last).

Narrowings (never widenings): keys come in property order, undeclared ones after them, at most
`MAX_EXTRA_ARGS`. Refused under strict level "full", because raw text or a fixed key order
cannot enforce them: on a raw string a `pattern` or `format` without a regex (see
`raw_text.py`), `contentEncoding`, `contentMediaType` and combinators (`allOf`, `anyOf`,
`oneOf`, `not`, `if`, `$ref` beside other keywords); `required` keys that are not declared
(unless undeclared keys are allowed); object keywords at the top of the parameters
(`minProperties`, `maxProperties`, `dependentRequired`, `dependentSchemas`, `dependencies`,
`propertyNames`, `patternProperties`, `anyOf`, `oneOf`, `allOf`, `not`, `if`, `$ref`), and
`$ref`s that point outside `$defs` / `definitions`. Parameters without `properties` take any
keys (up to the cap) and any values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedSchemaError
from . import raw_text

_TOP_REFUSED = ("minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
                "dependencies", "propertyNames", "patternProperties", "anyOf", "oneOf", "allOf",
                "not", "if", "$ref")
_RAW_REFUSED = ("contentEncoding", "contentMediaType", "allOf", "anyOf", "oneOf", "not", "if",
                "$ref")
_DEFS = ("$defs", "definitions")
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly", "$id", "$schema", "$anchor"})
# undeclared arguments per call, unless the guards' max_array_items says otherwise
MAX_EXTRA_ARGS = 16


@dataclass(frozen=True)
class Raw:
    """A value written as bare text: `schema` is the string schema the text must satisfy,
    `nullable`: the text `null` is JSON null; `at`: the string schema's JSON pointer."""

    schema: Mapping[str, Any]
    nullable: bool = False
    at: str = ""


def properties(params: Any) -> Mapping[str, Any] | None:
    """The property schemas of a parameters schema, or None when it declares none."""
    if not isinstance(params, Mapping):
        return None
    props = params.get("properties")
    return props if isinstance(props, Mapping) and props else None


def is_raw_string(schema: Any) -> bool:
    """Whether a value of this schema is a string and only a string (written raw)."""
    if not isinstance(schema, Mapping):
        return False
    t = schema.get("type")
    if t is not None:
        return t == "string" or t == ["string"]
    if "const" in schema:
        return isinstance(schema["const"], str)
    enum = schema.get("enum")
    return isinstance(enum, list) and bool(enum) and all(isinstance(e, str) for e in enum)


def raw(params: Any, schema: Any, at: str = "", root: str = "") -> Raw | None:
    """How a value of `schema` is written: bare text (`Raw`) or JSON (None). `at` is the
    schema's pointer and `root` the parameters' (for pointers through `$ref`)."""
    s, at = _resolve(params, schema, at, root)
    if not isinstance(s, Mapping):
        return None
    if is_raw_string(s):
        if ("const" in s and not isinstance(s["const"], str)) or (
                isinstance(s.get("enum"), list)
                and not any(isinstance(e, str) for e in s["enum"])):
            return None  # no string can be valid: left to %json (it is unsatisfiable)
        return Raw(s, at=at)
    t = s.get("type")
    if isinstance(t, list) and len(t) == 2 and set(t) == {"string", "null"}:
        branch = {**s, "type": "string"}
        if "const" in s:
            return Raw(branch, at=at) if isinstance(s["const"], str) else None
        enum = s.get("enum")
        if enum is None:
            return Raw(branch, True, at)
        if not isinstance(enum, list) or not any(isinstance(e, str) for e in enum):
            return None
        branch["enum"] = [e for e in enum if isinstance(e, str)]
        return Raw(branch, None in enum, at)
    enum = s.get("enum")
    if t is None and "const" not in s and isinstance(enum, list) and None in enum \
            and any(isinstance(e, str) for e in enum) \
            and all(e is None or isinstance(e, str) for e in enum):
        return Raw({**s, "enum": [e for e in enum if e is not None]}, True, at)
    for kw in ("anyOf", "oneOf"):
        options = s.get(kw)
        if not isinstance(options, list) or len(options) != 2 or set(s) - _ANNOTATIONS - {kw}:
            continue
        nulls = [i for i, o in enumerate(options) if _is_null(params, o)]
        if len(nulls) != 1:
            continue
        i = 1 - nulls[0]
        branch, branch_at = _resolve(params, options[i], f"{at}/{kw}/{i}", root)
        if is_raw_string(branch):
            return Raw(branch, True, branch_at)
    return None


def _is_null(params: Any, schema: Any) -> bool:
    s, _ = _resolve(params, schema, "", "")
    if not isinstance(s, Mapping):
        return False
    rest = set(s) - _ANNOTATIONS
    return (rest == {"type"} and s["type"] in ("null", ["null"])) or (
        rest == {"const"} and s["const"] is None) or (rest == {"enum"} and s["enum"] == [None])


def _resolve(params: Any, schema: Any, at: str, root: str) -> tuple[Any, str]:
    """`schema` with a local `$ref` (alone but for annotations) followed into the parameters'
    `$defs` / `definitions`, and its pointer."""
    for _ in range(8):
        if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str) \
                or set(schema) - _ANNOTATIONS - {"$ref"}:
            return schema, at
        ref = schema["$ref"]
        if not any(ref.startswith(f"#/{d}/") for d in _DEFS):
            return schema, at
        node: Any = params
        for token in ref[2:].split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or token not in node:
                return schema, at
            node = node[token]
        schema, at = node, root + ref[1:]
    return schema, at


def extra(params: Any) -> Any:
    """What undeclared keys may carry: None (no undeclared key), True (any value) or the
    schema of their values (`additionalProperties`)."""
    if not isinstance(params, Mapping):
        return True
    if "patternProperties" in params or "propertyNames" in params \
            or params.get("unevaluatedProperties") is False:
        return None  # narrowing: those would bind the keys; no undeclared key is written
    ap = params.get("additionalProperties", True)
    if ap is False:
        return None
    if ap is True or (isinstance(ap, Mapping) and not set(ap) - _ANNOTATIONS):
        return True
    return ap


def extra_cap(max_array_items: int | None) -> int:
    return max_array_items if max_array_items is not None else MAX_EXTRA_ARGS


def check(params: Mapping[str, Any], pointer: str) -> None:
    """Refuse what per-key syntax cannot enforce (a strict tool)."""
    for problem in unenforceable(params, pointer):
        raise problem


def unenforceable(params: Mapping[str, Any], pointer: str) -> list[UnsupportedSchemaError]:
    """Everything per-key syntax cannot enforce in these parameters, with pointers."""
    out = [UnsupportedSchemaError(
        f"per-key tool arguments cannot enforce {kw!r} at the top of the parameters",
        keyword=kw, pointer=f"{pointer}/{kw}") for kw in _TOP_REFUSED if kw in params]
    props = properties(params) or {}
    more = extra(params)
    if more is None:
        out += [UnsupportedSchemaError(f"required key {key!r} is not a declared property",
                                       keyword="required", pointer=f"{pointer}/required/{i}")
                for i, key in enumerate(params.get("required") or ()) if key not in props]
    values = [(f"{pointer}/properties/{_escape(k)}", s) for k, s in props.items()]
    if isinstance(more, Mapping):
        values.append((f"{pointer}/additionalProperties", more))
    for where, schema in values:
        r = raw(params, schema, where, pointer)
        if r is not None:
            out += _raw_problems(r)
        out += [UnsupportedSchemaError(
            "a $ref inside a per-key argument must point into $defs or definitions",
            keyword="$ref", pointer=ref_at)
            for ref_at, ref in _refs(schema, where)
            if not any(ref.startswith(f"#/{d}/") for d in _DEFS)]
    return out


def _raw_problems(r: Raw) -> list[UnsupportedSchemaError]:
    s = r.schema
    why = ("string arguments are written raw; {kw!r} cannot be enforced on raw text{more} (use "
           "strict level 'names', drop the keyword, or leave the tool non-strict)")
    out = [UnsupportedSchemaError(why.format(kw=kw, more=""), keyword=kw,
                                  pointer=f"{r.at}/{kw}") for kw in _RAW_REFUSED if kw in s]
    pattern = s.get("pattern")
    if pattern is not None and (not isinstance(pattern, str)
                                or raw_text.pattern_regex(pattern) is None):
        out.append(UnsupportedSchemaError(why.format(
            kw="pattern", more=": its regex has constructs kaname cannot carry exactly (anchors "
            "inside, word boundaries, look-arounds, back-references, possessive repeats, (?m))"),
            keyword="pattern", pointer=f"{r.at}/pattern"))
    fmt = s.get("format")
    if fmt is not None and (not isinstance(fmt, str) or raw_text.format_regex(fmt) is None):
        out.append(UnsupportedSchemaError(why.format(
            kw="format", more=f" (format {fmt!r} has no regex)"), keyword="format",
            pointer=f"{r.at}/format"))
    return out


def raw_regexes(r: Raw, *, max_string_length: int | None = None,
                max_fraction_digits: int | None = None) -> list[str]:
    """The regexes (each over the whole text, Rust syntax) a raw value must match: its length
    bounds, enum / const, pattern and format, where enforceable (the rest is reported)."""
    s = r.schema
    out = []
    if "const" in s:
        out.append(raw_text.literal(s["const"]))
    elif isinstance(s.get("enum"), list):
        out.append("(?:" + "|".join(raw_text.literal(e) for e in s["enum"]
                                    if isinstance(e, str)) + ")")
    low, high = _count(s.get("minLength")) or 0, _count(s.get("maxLength"))
    if high is None and not out:  # the guard; an enum or const is bounded already
        high = max_string_length
    if low or high is not None:
        out.append(f"(?s:.{{{low},{'' if high is None else high}}})")
    if isinstance(s.get("pattern"), str):
        regex = raw_text.pattern_regex(s["pattern"])
        if regex is not None:
            out.append(regex)
    if isinstance(s.get("format"), str):
        regex = raw_text.format_regex(s["format"], max_fraction_digits=max_fraction_digits)
        if regex is not None and regex != raw_text.ANY:
            out.append(regex)
    return out


def _count(v: Any) -> int | None:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


PYTHON_BOOLEANS = {"True": "true", "False": "false"}


def is_boolean(params: Any, schema: Any) -> bool:
    """Whether `schema` is `{"type": "boolean"}` (annotations aside, through a local $ref)."""
    s, _ = _resolve(params, schema, "", "")
    return isinstance(s, Mapping) and s.get("type") == "boolean" \
        and not set(s) - _ANNOTATIONS - {"type"}


def value_schema(params: Mapping[str, Any], schema: Any) -> Any:
    """A property schema made standalone: the root's definitions travel with it."""
    if not isinstance(schema, Mapping):
        return schema
    defs = {d: params[d] for d in _DEFS if d in params}
    return {**schema, **defs} if defs else dict(schema)


def encode(value: Any) -> str:
    """A value as the model writes it: a string raw, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def decode(text: str, reading: Raw | None, *, known: bool,
           python_booleans: bool = False) -> str | None:
    """The JSON text of a value as written. With the schema `known`, a raw value is quoted (an
    optional string's `null` is null) and anything else must be JSON (None if it is not);
    without it, the text is read as JSON when it parses and as a string otherwise.
    `python_booleans`: "True" / "False" are JSON's true / false where the schema is known."""
    if known and reading is not None:
        if reading.nullable and text == "null":
            return "null"
        return json.dumps(text, ensure_ascii=False)
    if known and python_booleans and text in PYTHON_BOOLEANS:
        return PYTHON_BOOLEANS[text]
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return None if known else json.dumps(text, ensure_ascii=False)
    return text


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _refs(node: Any, where: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                found.append((f"{where}/$ref", v))
            else:
                found += _refs(v, f"{where}/{_escape(str(k))}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _refs(v, f"{where}/{i}")
    return found
