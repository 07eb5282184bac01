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
    to_constraint,
)
from .guards import Guards

__all__ = [
    "Choice",
    "CompiledConstraint",
    "Constraint",
    "GrammarCompiler",
    "Guards",
    "JsonObject",
    "JsonSchema",
    "Lark",
    "NotEnforced",
    "Regex",
    "Text",
    "to_constraint",
]
