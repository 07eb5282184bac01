"""Constraint shapes and the errors for constraints that cannot be enforced."""

from __future__ import annotations

import pydantic
import pytest

from kaname import (
    Choice,
    ConstraintError,
    GrammarTooComplexError,
    InvalidGrammarError,
    InvalidRegexError,
    InvalidSchemaError,
    JsonObject,
    JsonSchema,
    Lark,
    Regex,
    Text,
    UnsupportedSchemaError,
    to_constraint,
)
from kaname.grammar import GrammarCompiler, Guards
from kaname.grammar.cache import MATCHER_BASE_BYTES


class Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def test_shapes_normalise():
    assert to_constraint(None) == Text()
    assert to_constraint({"type": "text"}) == Text()
    assert to_constraint({"type": "json_object"}) == JsonObject()
    c = to_constraint({"type": "json_schema",
                       "json_schema": {"name": "p", "schema": {"type": "string"}, "strict": False}})
    assert c == JsonSchema({"type": "string"}, strict=False, name="p")
    assert to_constraint({"type": "object"}) == JsonSchema({"type": "object"})
    assert to_constraint({"type": "regex", "regex": "a+"}) == Regex("a+")
    assert to_constraint({"type": "choice", "choice": ["x", "y"]}) == Choice(("x", "y"))
    assert to_constraint({"type": "grammar", "grammar": "start: \"a\""}) == Lark('start: "a"')
    p = to_constraint(Person)
    assert isinstance(p, JsonSchema) and p.strict and set(p.schema["required"]) == {"name", "age"}


def test_strict_unsupported_keyword_names_keyword_and_pointer(compiler):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema, strict=True))
    assert e.value.keyword == "uniqueItems"
    assert e.value.pointer == "/properties/tags/uniqueItems"
    assert "uniqueItems" in str(e.value) and "/properties/tags/uniqueItems" in str(e.value)


def test_property_named_like_a_keyword_is_not_blamed(compiler):
    schema = {"type": "object", "properties": {"not": {"type": "string"},
                                               "x": {"not": {"pattern": "^a"}}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert e.value.pointer == "/properties/x/not"


def test_lenient_reports_what_it_did_not_enforce(compiler):
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    c = compiler.compile(JsonSchema(schema, strict=False))
    assert [(n.keyword, n.pointer) for n in c.not_enforced] == [("uniqueItems", "/uniqueItems")]
    assert c.validate("[1, 2]") is True
    assert c.validate("[1, 1]") is False  # the post-check still sees the whole schema


def test_unknown_format(compiler):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema({"type": "object", "properties": {
            "a": {"type": "string", "format": "shoe-size"}}}))
    assert e.value.keyword == "format" and e.value.pointer == "/properties/a/format"


def test_invalid_schema_names_pointer(compiler):
    with pytest.raises(InvalidSchemaError) as e:
        compiler.compile(JsonSchema({"type": "object", "properties": {"a": {"type": "strin"}}}))
    assert e.value.pointer == "/properties/a/type"
    with pytest.raises(InvalidSchemaError):
        compiler.compile(JsonSchema({"$ref": "#/$defs/missing"}))


@pytest.mark.parametrize("bad, error, words", [
    (Regex("a("), InvalidRegexError, "unclosed group"),
    (Lark("start: /[/"), InvalidGrammarError, "unclosed character class"),
    (Lark("start: foo"), InvalidGrammarError, "foo"),
    (Choice(()), InvalidGrammarError, "non-empty"),
])
def test_bad_regex_and_grammar(compiler, bad, error, words):
    with pytest.raises(error) as e:
        compiler.compile(bad)
    assert words in str(e.value)


def test_too_costly_grammar_hits_a_limit(gemma):
    import llguidance as llg

    # A grammar bigger than the compiler's size limit fails fast instead of compiling for ever.
    tight = GrammarCompiler(gemma.tokenizer, limits=llg.LLParserLimits(max_grammar_size=1000))
    lark = "start: " + " | ".join(f'"w{i}" x{i}' for i in range(400)) + "\n" + "\n".join(
        f'x{i}: "a" "b" "c"' for i in range(400))
    with pytest.raises(GrammarTooComplexError) as e:
        tight.compile(Lark(lark))
    assert "too costly" in str(e.value)


def test_not_a_constraint():
    with pytest.raises(ConstraintError):
        to_constraint(42)


def test_cache_hits_and_bounds(gemma):
    # room for two small entries (each ~a matcher's fixed part), not three
    c = GrammarCompiler(gemma.tokenizer, cache_bytes=int(2.5 * MATCHER_BASE_BYTES))
    a = c.compile(Regex("a+"))
    assert c.compile(Regex("a+")) is a and c.hits == 1
    c.compile(Regex("b+"))
    c.compile(Regex("c+"))
    assert c.compile(Regex("a+")) is not a  # evicted: the cache stays bounded
    assert c.compile(Regex("a+"), guards=Guards(max_string_length=5)) is not None


def test_json_object_is_any_object(compiler):
    c = compiler.compile(JsonObject())
    m = c.new_matcher()
    text = '{"a": [1, {"b": null}], "c": "d"}'
    assert m.accept_tokens(compiler.tokenizer.tokenize_str(text)) and m.is_accepting()
    assert c.validate(text) is True and c.validate("[1]") is False


def deep_lark(n: int) -> str:
    return "start: s0\n" + "\n".join(f's{i}: s{i + 1} s{i + 1} | "x"' for i in range(n)) + \
        f'\ns{n}: "y"'


def test_deeply_nested_grammar_does_not_crash(compiler):
    """3,000 nested rules overflow llguidance's stack on a default 8 MiB thread (SIGSEGV).
    Built on a deep stack it compiles, but its first mask hits the per-step parser limit:
    the compile-time probe of the first mask reports that before any decoding."""
    with pytest.raises(GrammarTooComplexError, match=r"too costly.*Too many items"):
        compiler.compile(Lark(deep_lark(3000)))


def test_deeply_nested_schema_is_an_error_not_a_crash(compiler):
    schema: dict = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(GrammarTooComplexError, match="nested too deeply"):
        compiler.compile(JsonSchema(schema))


def test_oversized_constraint_is_refused_fast(gemma):
    small = GrammarCompiler(gemma.tokenizer, max_constraint_bytes=10_000)
    with pytest.raises(GrammarTooComplexError, match="too costly"):
        small.compile(Choice(tuple(f"option {i}" for i in range(2000))))


def test_cache_key_keeps_property_order(compiler):
    ab = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"]}
    ba = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
          "required": ["a", "b"]}
    first, second = compiler.compile(JsonSchema(ab)), compiler.compile(JsonSchema(ba))
    assert first.grammar_hash != second.grammar_hash
    m = second.new_matcher()
    assert m.accept_tokens(compiler.tokenizer.tokenize_str('{"b": 1, "a": 2}'))


def test_non_json_schema_values(compiler):
    with pytest.raises(InvalidSchemaError, match="JSON-serialisable"):
        compiler.compile(JsonSchema({"enum": {1, 2}}))
