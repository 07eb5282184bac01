"""Per-key tool arguments (GLM-4.5): one `<arg_key>K</arg_key><arg_value>V</arg_value>` pair per
argument, a string value written raw and any other value as JSON.

Shared by the grammar (which binds each key to its property schema) and the parser (which
rebuilds the arguments JSON text), so both read a value the same way: raw iff its property
schema is a plain string (`type: "string"`, or only string `enum` / `const`).

What the grammar enforces for a tool whose parameters are an object schema with `properties`:
only declared keys, in the schema's property order, each at most once; every `required` key;
each non-string value is `%json` of its property schema (with the root's `$defs` /
`definitions`); a raw string value cannot contain the value end marker and keeps `enum`,
`const`, `minLength` and `maxLength`. Narrowings (never widenings): keys come in property
order, and no undeclared key is written (`additionalProperties`, `patternProperties` beyond
declared keys). Refused under strict level "full", because raw text or a fixed key order cannot
enforce them: `pattern` / `format` / `contentEncoding` / `contentMediaType` on a raw string,
`required` keys that are not declared, and object keywords at the top of the parameters
(`minProperties`, `maxProperties`, `dependentRequired`, `dependentSchemas`, `dependencies`,
`propertyNames`, `patternProperties`, `anyOf`, `oneOf`, `allOf`, `not`, `if`, `$ref`), and
`$ref`s that point outside `$defs` / `definitions`. Parameters without `properties` take any
keys and any values (the parser then reads a value as JSON when it parses, else as a string).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import UnsupportedSchemaError

_TOP_REFUSED = ("minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
                "dependencies", "propertyNames", "patternProperties", "anyOf", "oneOf", "allOf",
                "not", "if", "$ref")
_RAW_REFUSED = ("pattern", "format", "contentEncoding", "contentMediaType")
_DEFS = ("$defs", "definitions")


def properties(params: Any) -> Mapping[str, Any] | None:
    """The property schemas of a parameters schema, or None when it declares none."""
    if not isinstance(params, Mapping):
        return None
    props = params.get("properties")
    return props if isinstance(props, Mapping) and props else None


def is_raw_string(schema: Any) -> bool:
    """Whether a value of this property schema is written raw (a plain string)."""
    if not isinstance(schema, Mapping):
        return False
    t = schema.get("type")
    if t is not None:
        return t == "string"
    if "const" in schema:
        return isinstance(schema["const"], str)
    enum = schema.get("enum")
    return isinstance(enum, list) and bool(enum) and all(isinstance(e, str) for e in enum)


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
    out += [UnsupportedSchemaError(f"required key {key!r} is not a declared property",
                                   keyword="required", pointer=f"{pointer}/required/{i}")
            for i, key in enumerate(params.get("required") or ()) if key not in props]
    for key, schema in props.items():
        where = f"{pointer}/properties/{_escape(key)}"
        if is_raw_string(schema):
            out += [UnsupportedSchemaError(
                f"string arguments are written raw; {kw!r} cannot be enforced on raw text (use "
                "strict level 'names', drop the keyword, or leave the tool non-strict)",
                keyword=kw, pointer=f"{where}/{kw}") for kw in _RAW_REFUSED if kw in schema]
        out += [UnsupportedSchemaError(
            "a $ref inside a per-key argument must point into $defs or definitions",
            keyword="$ref", pointer=ref_at)
            for ref_at, ref in _refs(schema, where)
            if not any(ref.startswith(f"#/{d}/") for d in _DEFS)]
    return out


def value_schema(params: Mapping[str, Any], schema: Any) -> Any:
    """A property schema made standalone: the root's definitions travel with it."""
    if not isinstance(schema, Mapping):
        return schema
    defs = {d: params[d] for d in _DEFS if d in params}
    return {**schema, **defs} if defs else dict(schema)


def encode(value: Any) -> str:
    """A value as the model writes it: a string raw, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def decode(text: str, schema: Any, *, known: bool) -> str | None:
    """The JSON text of a value as written. With the property schema `known`, a raw string is
    quoted and anything else must be JSON (None if it is not); without it, the text is read
    as JSON when it parses and as a string otherwise."""
    if known and is_raw_string(schema):
        return json.dumps(text, ensure_ascii=False)
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
