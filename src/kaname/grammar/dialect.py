"""Which JSON Schema draft a schema is read in: one answer for the post-check, the rewrites
and the metaschema check.

`$schema` names it. Without one, draft 2020-12, except for a schema written in draft 7's
words: it uses `dependencies` (which 2019-09 split into `dependentRequired` and
`dependentSchemas`, leaving `dependencies` an unknown keyword that validators ignore) and
none of the keywords 2019-09 introduced. Its author meant `dependencies` to hold, so it is
read, enforced and post-checked as draft 7.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from ..errors import InvalidSchemaError
from .schema_walk import subschemas

_SINCE_2019 = frozenset({"$defs", "dependentRequired", "dependentSchemas", "prefixItems",
                         "unevaluatedProperties", "unevaluatedItems", "minContains",
                         "maxContains", "$anchor", "$dynamicRef", "$dynamicAnchor",
                         "$recursiveRef", "$recursiveAnchor", "$vocabulary"})


def dialect_of(schema: Any) -> type[Any]:
    """The jsonschema validator class `schema` is read with. A `$schema` that is not a
    string is an InvalidSchemaError (jsonschema would raise TypeError on it)."""
    if isinstance(schema, dict) and "$schema" in schema \
            and not isinstance(schema["$schema"], str):
        raise InvalidSchemaError("$schema is a URI string naming the draft",
                                 keyword="$schema", pointer="/$schema")
    if isinstance(schema, dict) and "$schema" not in schema and _draft7_words(schema):
        return jsonschema.Draft7Validator
    cls: type[Any] = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator)
    return cls


def _draft7_words(schema: dict[str, Any]) -> bool:
    keywords = {k for _, s in subschemas(schema) for k in s}
    return "dependencies" in keywords and not keywords & _SINCE_2019
