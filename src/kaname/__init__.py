"""kaname: constrained decoding, output valid by construction."""

from .decoding import SamplingParams
from .engine import Enforced, Engine, Generation, Usage
from .errors import (
    ConstraintError,
    ContextLengthError,
    FormatParseError,
    GrammarTooComplexError,
    InvalidGrammarError,
    InvalidRegexError,
    InvalidSchemaError,
    KanameError,
    ModelError,
    NotEnforcedError,
    UnsupportedSchemaError,
)
from .grammar import Choice, Guards, JsonObject, JsonSchema, Lark, Regex, Text, to_constraint

__all__ = [
    "Choice",
    "ConstraintError",
    "ContextLengthError",
    "Enforced",
    "Engine",
    "FormatParseError",
    "Generation",
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
    "NotEnforcedError",
    "Regex",
    "SamplingParams",
    "Text",
    "UnsupportedSchemaError",
    "Usage",
    "to_constraint",
]
