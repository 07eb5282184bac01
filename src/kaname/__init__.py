"""kaname: constrained decoding, output valid by construction."""

from .decoding import SamplingParams
from .engine import Enforced, Engine, GenerationResult, Usage
from .errors import (
    ConstraintError,
    GrammarTooComplexError,
    InvalidGrammarError,
    InvalidRegexError,
    InvalidSchemaError,
    KanameError,
    ModelError,
    UnsupportedSchemaError,
)
from .grammar import Choice, Guards, JsonObject, JsonSchema, Lark, Regex, Text, to_constraint

__all__ = [
    "Choice",
    "ConstraintError",
    "Enforced",
    "Engine",
    "GenerationResult",
    "GrammarTooComplexError",
    "Guards",
    "InvalidGrammarError",
    "InvalidRegexError",
    "InvalidSchemaError",
    "JsonObject",
    "JsonSchema",
    "KanameError",
    "Lark",
    "ModelError",
    "Regex",
    "SamplingParams",
    "Text",
    "UnsupportedSchemaError",
    "Usage",
    "to_constraint",
]
