"""kaname's exceptions.

    KanameError
     ├── ConstraintError             the constraint a caller gave cannot be enforced (HTTP 400)
     │    ├── InvalidSchemaError     not a valid JSON Schema (names the JSON pointer)
     │    ├── UnsupportedSchemaError valid, but a keyword cannot be enforced under strict mode
     │    ├── InvalidRegexError
     │    ├── InvalidGrammarError    Lark grammar or choice list does not compile
     │    └── GrammarTooComplexError a parser limit was hit while compiling or matching
     └── ModelError                  the model could not be found, assembled or loaded

Constraint errors carry `keyword` and `pointer` where they apply, so a server can answer
with an OpenAI-shaped 400 that says exactly what to change.
"""

from __future__ import annotations


class KanameError(Exception):
    """Base class of every error kaname raises on purpose."""


class ConstraintError(KanameError, ValueError):
    """The constraint cannot be enforced as given; fix the request."""

    def __init__(self, message: str, *, keyword: str | None = None, pointer: str | None = None):
        super().__init__(message)
        self.message = message
        self.keyword = keyword
        self.pointer = pointer


class InvalidSchemaError(ConstraintError):
    """The JSON Schema itself is invalid (fails its metaschema or does not compile)."""


class UnsupportedSchemaError(ConstraintError):
    """The schema uses a keyword the grammar engine cannot enforce; use strict=False to relax."""


class InvalidRegexError(ConstraintError):
    """The regular expression does not parse."""


class InvalidGrammarError(ConstraintError):
    """The Lark grammar (or choice list) does not compile."""


class GrammarTooComplexError(ConstraintError):
    """Compiling or matching the grammar exceeded a parser limit; simplify the constraint."""


class ModelError(KanameError):
    """The model could not be located, assembled or loaded."""
