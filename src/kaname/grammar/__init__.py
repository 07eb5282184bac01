"""Constraints, runaway guards and their compilation to llguidance grammars."""

from .compiler import CompiledConstraint, GrammarCompiler, NotEnforced
from .constraints import (
    Choice,
    Constraint,
    JsonObject,
    JsonSchema,
    Lark,
    Regex,
    Text,
    from_response_format,
    to_constraint,
)
from .guards import Guards
from .matcher import Matcher

__all__ = [
    "Choice",
    "CompiledConstraint",
    "Constraint",
    "GrammarCompiler",
    "Guards",
    "JsonObject",
    "JsonSchema",
    "Lark",
    "Matcher",
    "NotEnforced",
    "Regex",
    "Text",
    "from_response_format",
    "to_constraint",
]
