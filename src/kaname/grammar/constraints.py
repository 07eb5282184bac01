"""What a caller may constrain generation to, and how loose inputs become one of them.

Every constraint compiles to one llguidance grammar (see `compiler.py`); this module only says
what was asked for. `to_constraint` accepts the shapes users already have: an OpenAI
`response_format` dict, a pydantic model class, a JSON Schema dict, or a constraint object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConstraintError, InvalidGrammarError, InvalidSchemaError


@dataclass(frozen=True)
class JsonSchema:
    """JSON matching `schema`. strict=True: every keyword is enforced or the request fails;
    strict=False: unsupported keywords are skipped, reported, and post-checked with jsonschema."""

    schema: Mapping[str, Any] | bool
    strict: bool = True
    name: str | None = None


@dataclass(frozen=True)
class JsonObject:
    """Any JSON object (OpenAI's `json_object` mode)."""


@dataclass(frozen=True)
class Regex:
    """Text fully matching `pattern` (llguidance / Rust regex syntax, anchored)."""

    pattern: str


@dataclass(frozen=True)
class Lark:
    """Text in the language of a Lark grammar in llguidance's dialect (`%json`, `<|special|>`)."""

    grammar: str


@dataclass(frozen=True)
class Choice:
    """Exactly one of the given strings."""

    options: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Text:
    """Free text; control and placeholder tokens are still excluded."""


Constraint = JsonSchema | JsonObject | Regex | Lark | Choice | Text

_RESPONSE_FORMAT_TYPES = {"text", "json_object", "json_schema", "regex", "grammar", "choice"}


def _is_pydantic_model(value: Any) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return False
    return isinstance(value, type) and issubclass(value, BaseModel)


def to_constraint(value: Any) -> Constraint:
    """Normalise a constraint given in any accepted shape; raise ConstraintError otherwise."""
    if value is None:
        return Text()
    if isinstance(value, JsonSchema | JsonObject | Regex | Lark | Choice | Text):
        return value
    if _is_pydantic_model(value):
        return JsonSchema(value.model_json_schema(), strict=True, name=value.__name__)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InvalidSchemaError(f"constraint is not valid JSON: {e}") from e
    if isinstance(value, bool):
        return JsonSchema(value)
    if not isinstance(value, Mapping):
        raise ConstraintError(
            f"cannot use a {type(value).__name__} as a constraint; pass a response_format dict, "
            "a JSON Schema dict or a pydantic model class"
        )
    kind = value.get("type")
    if isinstance(kind, str) and kind in _RESPONSE_FORMAT_TYPES:
        return from_response_format(value)
    return JsonSchema(value)


def from_response_format(rf: Mapping[str, Any] | None) -> Constraint:
    """The one reader of an OpenAI `response_format` (and kaname's regex / grammar / choice
    kinds). `json_schema.strict` defaults to false, as OpenAI's does: the schema is enforced
    where it can be, the rest reported and post-checked. Pointers are relative to `rf`."""
    if rf is None:
        return Text()
    if not isinstance(rf, Mapping):
        raise ConstraintError("response_format must be an object", pointer="")
    kind = rf.get("type")
    if kind not in _RESPONSE_FORMAT_TYPES:
        raise ConstraintError(f"unsupported response_format type {kind!r}; expected one of "
                              f"{', '.join(sorted(_RESPONSE_FORMAT_TYPES))}", pointer="/type")
    if kind == "text":
        return Text()
    if kind == "json_object":
        return JsonObject()
    if kind == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, Mapping):
            raise InvalidSchemaError(
                "response_format.json_schema must be an object with a 'schema' field",
                pointer="/json_schema",
            )
        schema = spec.get("schema", {})
        if _is_pydantic_model(schema):
            schema = schema.model_json_schema()
        if not isinstance(schema, Mapping | bool):
            raise InvalidSchemaError(
                "response_format.json_schema.schema must be a JSON object",
                pointer="/json_schema/schema",
            )
        return JsonSchema(schema, strict=spec.get("strict") is True, name=spec.get("name"))
    if kind == "regex":
        return Regex(_required_str(rf, "regex"))
    if kind == "grammar":
        return Lark(_required_str(rf, "grammar"))
    options = rf.get("choice")
    if not isinstance(options, Sequence) or isinstance(options, str):
        raise InvalidGrammarError("response_format.choice must be a list of strings")
    return Choice(tuple(options))


def _required_str(rf: Mapping[str, Any], key: str) -> str:
    value = rf.get(key)
    if not isinstance(value, str):
        raise ConstraintError(f"response_format.{key} must be a string", pointer=f"/{key}")
    return value
