"""Runaway guards narrow the schema only, and say where they did."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kaname.grammar import GrammarCompiler, Guards, JsonSchema
from kaname.grammar.guards import apply_guards

SCHEMA = {
    "type": "object",
    "properties": {
        "qty": {"type": "integer"},
        "price": {"type": "number", "minimum": 0},
        "big": {"type": "integer", "minimum": 10**20},
        "step": {"type": "number", "multipleOf": 0.5, "maximum": 10},
        "name": {"type": "string"},
        "code": {"type": "string", "maxLength": 3},
        "neg": {"not": {"type": "integer"}},
        "any": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "list": {"type": "array", "minItems": 12},
        "short": {"type": "array", "maxItems": 2},
    },
}


def test_guards_bound_numbers_and_report_pointers():
    g = apply_guards(SCHEMA, Guards(max_string_length=10, max_array_items=5))
    props = g.schema["properties"]
    assert props["qty"]["maximum"] == 10**15 - 1 and props["qty"]["minimum"] == -(10**15 - 1)
    assert props["price"]["minimum"] == 0 and props["price"]["maximum"] == 10**15 - 1
    assert props["price"]["multipleOf"] == 1e-8
    assert "maximum" not in props["big"]  # a cap below the user's minimum would be unsatisfiable
    assert props["step"]["multipleOf"] == 0.5 and "minimum" in props["step"]
    assert props["name"]["maxLength"] == 10 and props["code"]["maxLength"] == 3
    assert props["neg"] == SCHEMA["properties"]["neg"]  # narrowing under `not` would widen
    assert props["any"] == SCHEMA["properties"]["any"]
    assert props["list"]["maxItems"] == 12 and props["short"]["maxItems"] == 2
    # untyped values (no additionalProperties, arrays without items) are bounded too, and the
    # caps name those places rather than kaname's own any-value definition
    untyped = ["/additionalProperties", "/properties/list/items", "/properties/short/items"]
    assert g.applied["untyped_values"]["at"] == untyped
    assert g.applied["max_array_items"]["at"] == ["/properties/list", *untyped]
    assert "/properties/qty" in g.applied["max_integer_digits"]["at"]
    assert set(untyped) <= set(g.applied["max_integer_digits"]["at"])
    assert g.applied["max_string_length"]["at"] == ["/properties/name", *untyped]
    assert props["neg"] == SCHEMA["properties"]["neg"]  # nothing written under `not`
    assert SCHEMA["properties"]["qty"] == {"type": "integer"}  # the caller's dict is untouched


def test_guarded_language_is_a_subset(gemma):
    """Everything the guarded grammar accepts is valid for the original schema, and what it
    rejects among valid instances is exactly what the caps exclude."""
    compiler = GrammarCompiler(gemma.tokenizer)
    schema = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
    c = compiler.compile(JsonSchema(schema))
    for n, ok in [(1, True), (-2.5, True), (123456789012345, True), (0.12345678, True),
                  (1234567890123456, False), (0.123456789, False)]:
        text = json.dumps({"n": n})
        jsonschema.validate({"n": n}, schema)
        m = c.new_matcher()
        accepted = m.consume_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()
        assert accepted is ok, text
    assert c.caps["max_integer_digits"]["value"] == 15
    assert c.caps["separators"]["value"] == [", ", ": "]


@pytest.mark.parametrize("guards, text, ok", [
    (Guards(), '{"a": 1}', True),
    (Guards(), '{"a":1}', False),  # fixed separators: the layout is forced
    # opt-in: a model's own one-line layout, at most one space after , and :
    (Guards(separators=(",", ":"), separator_space=1), '{"a": 1, "b": 2}', True),
    (Guards(separators=(",", ":"), separator_space=1), '{"a":1,"b":2}', True),
    (Guards(separators=(",", ":"), separator_space=1), '{"a":  1}', False),
    (Guards(separators=(",", ":"), separator_space=1), '{ "a": 1}', False),
    (Guards(separators=(",", ":"), separator_space=1), '{"a":\n1}', False),
    (Guards(separators=None, max_whitespace=2), '{ "a":  1}', True),
    (Guards(separators=None, max_whitespace=2), '{"a":   1}', False),
    (Guards(separators=None, max_whitespace=0), '{"a":1}', True),
    (Guards(separators=None, max_whitespace=None), '{"a":' + " " * 50 + "1}", True),
])
def test_whitespace_guard(gemma, guards, text, ok):
    c = GrammarCompiler(gemma.tokenizer, guards=guards).compile(
        JsonSchema({"type": "object", "properties": {"a": {"type": "integer"}}}))
    m = c.new_matcher()
    assert (m.consume_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()) is ok


@pytest.mark.parametrize("pattern, value", [("^[^\\\\]*$", "a\\b"), ('^[^"]*$', 'a"b'),
                                            ("^[A-Za-z0-9_][^<>*#.%&:\\\\+?/]*$", "a\\b")])
def test_negated_pattern_classes_exclude_escaped_characters(gemma, pattern, value):
    """llguidance 1.9.1 alone accepts these (a negated class matches the JSON escape); the
    random-logits property test found it on a JSONSchemaBench schema."""
    c = GrammarCompiler(gemma.tokenizer).compile(JsonSchema({"type": "string",
                                                             "pattern": pattern}))
    m = c.new_matcher()
    text = json.dumps(value)
    assert not (m.consume_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting())
    assert c.validate(text) is False
    assert c.caps["no_quote_or_backslash_escapes"]["at"] == ["/pattern"]
    m = c.new_matcher()
    assert m.consume_tokens(gemma.tokenizer.tokenize_str('"ab"')) and m.is_accepting()


@pytest.mark.parametrize("schema", [
    {},
    {"description": "anything"},
    {"type": "object", "properties": {"a": {"type": "integer"}}},  # instructor's default
    {"type": "object", "properties": {"x": {}, "y": True}, "required": ["x"]},
    {"type": "array"},
    {"type": "array", "prefixItems": [{"type": "string"}]},
])
def test_untyped_values_are_bounded_and_nothing_else_changes(gemma, schema):
    """Where a schema leaves a value untyped the number caps still apply (on Gemma an extra
    "price" key grew a 155-digit integer); every other valid value stays valid."""
    c = GrammarCompiler(gemma.tokenizer).compile(JsonSchema(schema))
    assert c.caps["untyped_values"]["at"]
    fits = {"a": 1, "x": {"q": [1.5, None, "s", True]}, "y": [], "n": -123456789012345}
    too_long = {"a": 1, "x": 1, "y": 1, "price": 10**30}
    too_fine = {"a": 1, "x": 1, "y": 1, "p": 0.123456789}
    declared = list(schema.get("properties", {}))
    for value, ok in [(fits, True), (too_long, False), (too_fine, False)]:
        # declared properties first: llguidance writes them in schema order
        value = {**{k: value[k] for k in declared}, **value}
        instance = value if schema.get("type") != "array" else ["s", value]
        if not jsonschema.Draft202012Validator(schema).is_valid(instance):
            continue
        m = c.new_matcher()
        text = json.dumps(instance)
        assert (m.consume_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()) \
            is ok, text


@pytest.mark.parametrize("fmt, base", [("date-time", "2024-02-29T23:59:59"), ("time", "23:59:59")])
def test_seconds_fraction_of_date_time_strings_is_bounded(gemma, fmt, base):
    """A `format: date-time` string ran to max_tokens on fraction digits in front of vLLM:
    the fraction cap bounds the seconds' fraction too (as a maxLength over the longest form)."""
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": fmt}},
              "required": ["at"], "additionalProperties": False}
    compiler = GrammarCompiler(gemma.tokenizer)
    guarded = compiler.compile(JsonSchema(schema))
    free = compiler.compile(JsonSchema(schema), guards=Guards(max_fraction_digits=None))
    cls = jsonschema.Draft202012Validator
    checker = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def accepts(c, text: str) -> bool:
        m = c.new_matcher()
        return m.consume_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()

    for digits in (0, 1, 8, 9, 40):
        for offset in ("+01:00", "Z"):
            frac = "." + "7" * digits if digits else ""
            text = json.dumps({"at": base + frac + offset})
            assert accepts(free, text)
            # with "+HH:MM" the cap is exact; "Z" is 5 characters shorter, so 5 more digits fit
            limit = 8 if offset != "Z" else 13
            assert accepts(guarded, text) == (digits <= limit), text
            checker.validate(json.loads(text))  # every one of them is valid: a narrowing only
    applied = apply_guards(schema, Guards()).applied
    assert applied["max_fraction_digits"]["at"] == ["/properties/at"]
    # a user's own maxLength stays as it is
    own = {"type": "string", "format": fmt, "maxLength": 64}
    assert apply_guards(own, Guards()).schema == own
    long = {"type": "string", "format": fmt, "minLength": 60}
    assert apply_guards(long, Guards()).schema["maxLength"] == 60  # still satisfiable
