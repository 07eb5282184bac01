"""A completion constraint as one Lark grammar, for an upstream that takes
`structured_outputs: {"grammar": LARK}` (llguidance's Lark dialect, `%json` included)."""

from __future__ import annotations

import json
from typing import Any

from ..formats.grammar import json_lark
from ..grammar import Choice, Guards, JsonObject, JsonSchema, Lark, Regex, Text
from .errors import APIError


def lark_for(constraint: Any, guards: Guards) -> str:
    if isinstance(constraint, Lark):
        return constraint.grammar
    if isinstance(constraint, JsonSchema):
        return f"start: {json_lark(constraint.schema, guards, lenient=not constraint.strict)}\n"
    if isinstance(constraint, JsonObject):
        return f"start: {json_lark({'type': 'object'}, guards)}\n"
    if isinstance(constraint, Choice):
        return "start: " + " | ".join(json.dumps(o) for o in constraint.options) + "\n"
    if isinstance(constraint, Regex):
        return "start: /" + constraint.pattern.replace("/", "\\/") + "/\n"
    if isinstance(constraint, Text):
        return "start: /(?s:.*)/\n"
    raise APIError(400, f"{type(constraint).__name__} cannot be sent upstream",
                   code="unsupported")
