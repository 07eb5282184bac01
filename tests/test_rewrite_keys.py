"""The rewrites about an object's keys and the complements they lean on (grammar/rewrite.py,
complement.py, string_sets.py, dialect.py): `minProperties` beside optional properties,
`unevaluatedProperties` where what is evaluated is fixed, `propertyNames` through a `$ref` and
beside `patternProperties`, the complement of a repeated-class `pattern` and of a
`propertyNames` failing on finitely many names (nested `not`s too), `oneOf` over many
disjoint branches / closed branches / branches naming only properties, the draft a schema
without `$schema` is read in, `$ref` targets under keys that are no keyword, and
`additionalProperties: {}` beside an `anyOf`.

For each: (a) on random schemas of the family, the rewritten schema accepts exactly the
instances the original accepts, judged by jsonschema in the original's dialect
(`dialect_of`), and the rule shows in `applied` in a good share of the examples, so no test
passes vacuously; (b) through llguidance, strictly compiled, token by token, the grammar
agrees with jsonschema on hand-picked instances (keys in schema order, as llguidance writes
them); (c) what the rewrite leaves alone stays as it was. No complement mark
(complement.NEGATES) is ever left in a rewritten schema.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matching import accepts

from kaname.errors import UnsupportedSchemaError
from kaname.grammar import GrammarCompiler, JsonSchema
from kaname.grammar.complement import NEGATES
from kaname.grammar.dialect import dialect_of
from kaname.grammar.rewrite import Rewritten, rewrite_schema

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"
ALL_TYPES = ["object", "null", "boolean", "array", "number", "string"]


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def validator(schema: Any, like: Any = None) -> Any:
    """jsonschema's validator for `schema` in the dialect of `like` (default: of `schema`)."""
    cls = dialect_of(schema if like is None else like)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def rewritten(schema: Any) -> Rewritten:
    """rewrite_schema, checking that no complement mark is left in what it returns."""
    out = rewrite_schema(schema)
    assert NEGATES not in json.dumps(out.schema), out.schema
    return out


def rules(out: Rewritten) -> list[str]:
    return [rule for rule, _ in out.applied]


# checked beside the instances of every example: one of each kind
PROBES: list[Any] = [None, True, 0, 2.5, "", "a", [], {}, {"a": 1}, {"b": "x"}]


def equivalent(schema: Any, instances: list[Any]) -> Rewritten:
    """The rewrite of `schema`, after checking it accepts exactly what `schema` accepts
    among `instances` and PROBES (both read in the original's dialect)."""
    out = rewritten(schema)
    before, after = validator(schema), validator(out.schema, like=schema)
    for x in [*instances, *PROBES]:
        assert after.is_valid(x) is before.is_valid(x), (schema, out.schema, x)
    return out


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def agrees(gemma, compiler, schema: Any, instances: list[Any]) -> None:
    """`schema` compiles strictly, and the grammar takes each instance exactly when
    jsonschema finds it valid (both verdicts among them)."""
    compiled = compiler.compile(JsonSchema(schema, strict=True))
    check = validator(schema)
    verdicts = set()
    for x in instances:
        ok = check.is_valid(x)
        verdicts.add(ok)
        assert accepts(gemma.tokenizer, compiled, x) is ok, (schema, x, ok)
    assert verdicts == {True, False}


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-1, 2),
                   st.sampled_from(["", "x", "ab", [], {}, [1]]))
NON_OBJECTS = st.one_of(st.none(), st.booleans(), st.integers(-1, 2),
                        st.sampled_from(["", "x", [], 2.5]))


def objects(keys: list[str], most: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), VALUES, max_size=most)


def instances(keys: list[str], most: int = 4, size: int = 10) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.one_of(objects(keys, most), objects(keys, most), NON_OBJECTS),
                    min_size=1, max_size=size)


PROPERTY = st.sampled_from([{}, True, False, {"type": "integer"}, {"type": "string"},
                            {"type": ["string", "null"]}])


# --- 1. minProperties beside optional properties ---------------------------------------------

MIN_PROPERTIES = st.fixed_dictionaries(
    {"properties": st.dictionaries(st.sampled_from("abcd"), PROPERTY, min_size=1, max_size=4),
     "minProperties": st.integers(1, 3),
     "additionalProperties": st.sampled_from([False, False, True, {"type": "integer"}])},
    optional={"type": st.just("object"),
              "required": st.lists(st.sampled_from("abce"), unique=True, max_size=2)})
NEAR_MIN_PROPERTIES = st.fixed_dictionaries({}, optional={
    "maxProperties": st.integers(1, 4), "patternProperties": st.just({"^e": {}})})


def test_min_properties_rewrite_is_exact():
    made: list[str] = []

    @examples(300)
    @given(MIN_PROPERTIES, st.one_of(st.just({}), st.just({}), NEAR_MIN_PROPERTIES),
           instances(list("abcde"), most=5))
    def check(schema, beside, xs):
        schema = {**schema, **beside}
        out = equivalent(schema, xs)
        found = [r for r in rules(out) if r.startswith("minProperties")]
        if beside:  # left alone beside maxProperties / patternProperties
            assert not found and out.schema["minProperties"] == schema["minProperties"]
        made.extend(found or ["-"])

    check()
    assert made.count("minProperties as anyOf") >= 0.2 * len(made), made.count("-")
    assert made.count("minProperties met by required") >= 0.05 * len(made)


MIN_CLOSED = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {}},
              "additionalProperties": False, "minProperties": 2}
MIN_OPEN = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                             "c": {}},
            "required": ["a"], "minProperties": 2}
MIN_MET = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
           "required": ["a", "x"], "minProperties": 2}


@pytest.mark.parametrize("schema, rule, values", [
    (MIN_CLOSED, "minProperties as anyOf",
     [{}, {"a": 1}, {"c": None}, {"a": 1, "b": "x"}, {"b": "x", "c": None},
      {"a": 1, "b": "x", "c": 2}, {"a": 1, "d": 2}, {"a": "x", "b": "y"}, 3]),
    (MIN_OPEN, "minProperties as anyOf",
     [{}, {"a": 1}, {"a": 1, "b": "x"}, {"a": 1, "c": 2}, {"a": 1, "d": 2},
      {"a": 1, "d": 2, "e": 3}, {"b": "x", "c": 1}, {"a": 1, "b": 2}]),
    (MIN_MET, "minProperties met by required",
     [{"a": 1, "x": 2}, {"a": 1}, {"a": 1, "b": "x", "x": 1}, {"x": 1}, {"a": "1", "x": 1}]),
], ids=["closed", "open-one-more", "met-by-required"])
def test_min_properties_compiles_and_agrees(gemma, compiler, schema, rule, values):
    out = equivalent(schema, values)
    assert rule in rules(out) and "minProperties" not in out.schema
    agrees(gemma, compiler, schema, values)


@pytest.mark.parametrize("schema", [
    {**MIN_OPEN, "maxProperties": 3},
    {**MIN_OPEN, "patternProperties": {"^e": {"type": "integer"}}},
    {**MIN_OPEN, "minProperties": 3},  # two more keys on an open object
], ids=["beside-maxProperties", "beside-patternProperties", "open-two-more"])
def test_min_properties_the_rewrite_leaves_alone(schema):
    out = rewritten(schema)
    assert out.schema["minProperties"] == schema["minProperties"]
    assert not [r for r in rules(out) if r.startswith("minProperties")]


@pytest.mark.parametrize("schema, instance", [
    ({"properties": {"a": {}}, "additionalProperties": False, "minProperties": 2}, "s"),
    ({"type": ["object", "string"], "properties": {"a": {}, "b": {}},
      "additionalProperties": False, "minProperties": 3}, "s"),
    ({"propertyNames": {"const": "a"}, "minProperties": 2}, True),  # closed by propertyNames
], ids=["untyped", "object-or-string", "closed-by-propertyNames"])
def test_min_properties_no_closed_object_can_meet_still_passes_non_objects(schema, instance):
    """A closed object with fewer optional properties than minProperties asks for: no object
    is valid, but the instances that are not objects still are (minProperties, properties
    and additionalProperties apply to objects only). Found by the random test above: the
    rewrite adds `anyOf: []` (no choice of keys), which rejects every instance."""
    equivalent(schema, [instance, {}, {"a": 1}])


# --- 2. unevaluatedProperties where what is evaluated is fixed --------------------------------

NAMED = st.dictionaries(st.sampled_from("abc"), PROPERTY, min_size=1, max_size=2)
EVALUATING = st.one_of(  # members that evaluate a fixed set of keys
    NAMED.map(lambda p: {"properties": p}),
    st.tuples(NAMED, PROPERTY).map(lambda t: {"properties": t[0],
                                              "additionalProperties": t[1]}),
    NAMED.map(lambda p: {"properties": p, "unevaluatedProperties": {"type": "integer"}}),
    NAMED.map(lambda p: {"allOf": [{"properties": p}]}),
    st.just({"required": ["a"]}),
)
BRANCHING = st.one_of(  # members that evaluate keys depending on the instance: left alone
    NAMED.map(lambda p: {"anyOf": [{"properties": p}, {"required": ["a"]}]}),
    NAMED.map(lambda p: {"oneOf": [{"properties": p}, {"required": ["b"]}]}),
    NAMED.map(lambda p: {"if": {"required": ["a"]}, "then": {"properties": p}}),
    st.just({"patternProperties": {"^c": {"type": "integer"}}}),
)
REWRITTEN_BENEATH = st.sampled_from([  # members other rewrites change first
    {"propertyNames": {"enum": ["a", "b"]}},
    {"not": {"type": ALL_TYPES, "properties": {"a": {"type": "string"}}}},
    {"enum": [{"a": 1}, {"b": "x"}, 1], "properties": {"a": {"type": "integer"}}},
    {"minProperties": 1, "properties": {"a": {}, "b": {}}, "additionalProperties": False},
])


def _unevaluated(members: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(
        lambda own, parts, base, by_ref, typed, rest: {
            "$defs": {"base": base}, **({"type": "object"} if typed else {}),
            **({"properties": own} if own else {}), **({"allOf": parts} if parts else {}),
            **({"$ref": "#/$defs/base"} if by_ref else {}), "unevaluatedProperties": rest},
        st.one_of(st.just({}), NAMED), st.lists(members, max_size=2), members, st.booleans(),
        st.booleans(), st.sampled_from([False, False, {"type": "integer"}, True]))


@pytest.mark.parametrize("members, rule_share", [
    (EVALUATING, 0.8),
    (st.one_of(EVALUATING, BRANCHING), 0.2),
    (st.one_of(EVALUATING, REWRITTEN_BENEATH), 0.2),
], ids=["evaluating", "with-branching", "with-members-rewritten-first"])
def test_unevaluated_properties_rewrite_is_exact(members, rule_share):
    made: list[str] = []

    @examples(120)
    @given(_unevaluated(members), instances(list("abcd")))
    def check(schema, xs):
        out = equivalent(schema, xs)
        found = [r for r in rules(out) if r.startswith("unevaluatedProperties")]
        made.extend(found or ["-"])
        if not found:
            assert "unevaluatedProperties" in out.schema

    check()
    share = (len(made) - made.count("-")) / len(made)
    assert share >= rule_share, made.count("-")
    assert made.count("unevaluatedProperties where every key is evaluated") >= 0.05 * len(made)
    assert made.count("unevaluatedProperties as additionalProperties") >= 0.05 * len(made)


UNEVALUATED_EVERY = {"type": "object", "properties": {"a": {"type": "integer"}},
                     "allOf": [{"properties": {"b": {"type": "string"}},
                                "additionalProperties": {"type": ["integer", "string"]}}],
                     "unevaluatedProperties": False}
UNEVALUATED_REF = {"$defs": {"base": {"properties": {"b": {"type": "string"}}}},
                   "type": "object", "properties": {"a": {"type": "integer"}},
                   "$ref": "#/$defs/base", "unevaluatedProperties": {"type": "boolean"}}


@pytest.mark.parametrize("schema, rule, values", [
    (UNEVALUATED_EVERY, "unevaluatedProperties where every key is evaluated",
     [{}, {"a": 1}, {"a": 1, "b": "x"}, {"a": "s"}, {"b": "x", "c": 1}, {"c": []},
      {"b": 1}]),
    (UNEVALUATED_REF, "unevaluatedProperties as additionalProperties",
     [{}, {"a": 1}, {"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": True}, {"a": 1, "c": 1},
      {"b": 1}, {"c": False}]),
], ids=["every-key-evaluated", "as-additionalProperties"])
def test_unevaluated_properties_compiles_and_agrees(gemma, compiler, schema, rule, values):
    out = equivalent(schema, values)
    assert rule in rules(out) and "unevaluatedProperties" not in out.schema
    agrees(gemma, compiler, schema, values)


@pytest.mark.parametrize("beside", [
    {"anyOf": [{"properties": {"b": {}}}, {"required": ["a"]}]},
    {"oneOf": [{"properties": {"b": {}}}, {"required": ["a"]}]},
    {"if": {"required": ["a"]}, "then": {"properties": {"b": {}}}},
    {"patternProperties": {"^b": {}}},
    {"allOf": [{"patternProperties": {"^b": {}}}]},
    {"$ref": "#/$defs/branching"},
], ids=["anyOf", "oneOf", "if", "patternProperties", "patterns-in-allOf", "anyOf-by-ref"])
def test_unevaluated_properties_the_rewrite_leaves_alone(beside):
    schema = {"$defs": {"branching": {"anyOf": [{"properties": {"b": {}}}, {}]}},
              "type": "object", "properties": {"a": {}}, **beside,
              "unevaluatedProperties": False}
    out = rewritten(schema)
    assert out.schema["unevaluatedProperties"] is False
    assert not [r for r in rules(out) if r.startswith("unevaluatedProperties")]


def test_unevaluated_properties_before_2019_is_no_keyword():
    schema = {"$schema": DRAFT7, "properties": {"a": {}}, "unevaluatedProperties": False}
    assert not [r for r in rules(rewritten(schema)) if r.startswith("unevaluated")]


@pytest.mark.parametrize("schema, instance", [
    # propertyNames -> properties + additionalProperties: false: the member now evaluates
    # "a" (every key), which it did not
    ({"allOf": [{"propertyNames": {"enum": ["a"]}}], "unevaluatedProperties": False},
     {"a": 1}),
    # the complement of the `not` names "a" in `properties`: a `not` evaluates nothing
    ({"allOf": [{"not": {"type": ALL_TYPES, "properties": {"a": {"type": "string"}}}}],
      "unevaluatedProperties": False}, {"a": 1}),
    # the enum absorbs the member's `properties`, which evaluated "a"
    ({"allOf": [{"enum": [{"a": 1}], "properties": {"a": {"type": "integer"}}}],
      "unevaluatedProperties": False}, {"a": 1}),
    # the oneOf's second branch gets the complement of the first, which names "b"
    ({"oneOf": [{"properties": {"b": False}}, {"required": ["b"]}],
      "unevaluatedProperties": False}, {"b": "x"}),
    # the else branch gets the complement of `if`, which names "a" (a failed `if`
    # evaluates nothing)
    ({"if": {"properties": {"a": {"type": "string"}}}, "else": {"required": ["a"]},
      "unevaluatedProperties": False}, {"a": 1}),
], ids=["propertyNames-member", "not-member", "enum-member", "oneOf", "if-else"])
def test_rewrites_keep_what_unevaluated_properties_reads(schema, instance):
    """unevaluatedProperties reads which keys the subschemas beside it evaluated. A rewrite
    made beneath it first (bottom up) may evaluate other keys than what it replaced: the
    complements of `not` / `oneOf` / `if` name keys in `properties`, the propertyNames
    rewrite closes the object with additionalProperties. Found by the random test above;
    where unevaluatedProperties is rewritten too (the first two), the strict grammar
    takes the instance (next test); elsewhere unevaluatedProperties stays refused."""
    equivalent(schema, [instance, {}, "s"])


@pytest.mark.parametrize("schema", [
    {"type": "object", "allOf": [{"propertyNames": {"enum": ["a"]}}],
     "unevaluatedProperties": False},
    {"type": "object", "$defs": {"n": {"propertyNames": {"enum": ["a", "b"]}}},
     "$ref": "#/$defs/n", "unevaluatedProperties": False},
    # (a language that is not empty: the `not` takes {"a": 1}, the outer properties evaluate a)
    {"allOf": [{"not": {"type": ALL_TYPES, "properties": {"a": {"type": "string"}}}}],
     "properties": {"a": {}}, "unevaluatedProperties": False},
], ids=["propertyNames-member", "propertyNames-by-ref", "not-member"])
def test_unevaluated_properties_beside_a_rewritten_member_through_llguidance(gemma, compiler,
                                                                           schema):
    """The same, end to end: the strict grammar must not take {"a": 1}, which no member
    evaluates (jsonschema rejects it)."""
    compiled = compiler.compile(JsonSchema(schema, strict=True))
    check = validator(schema)
    for x in [{}, {"a": 1}, {"a": "x"}, {"b": 1}]:
        assert accepts(gemma.tokenizer, compiled, x) is check.is_valid(x), (schema, x)


# --- 3. propertyNames through a $ref, and beside patternProperties ----------------------------

NAME_VALUES = st.lists(st.sampled_from(["a", "b", "xy", "ab", "x", "", 1, None]), min_size=1,
                       max_size=4)
PATTERNS = ["^x", "b|y", "^[ab]+$", ".*", "a$", "^$"]
NAME_KEYS = ["a", "b", "xy", "ab", "x", "", "q", "a\n", "by"]


@st.composite
def property_names_schemas(draw: Any) -> dict[str, Any]:
    values = draw(NAME_VALUES)
    names: dict[str, Any] = draw(st.sampled_from([{"enum": values}, {"const": values[0]}]))
    if draw(st.booleans()):
        names["maxLength"] = 1
    by_ref = draw(st.booleans())
    schema: dict[str, Any] = {"$defs": {"names": names}} if by_ref else {}
    if draw(st.booleans()):
        schema["type"] = "object"
    schema["propertyNames"] = {"$ref": "#/$defs/names"} if by_ref else names
    schema |= draw(st.fixed_dictionaries({}, optional={
        "properties": st.dictionaries(st.sampled_from(["a", "q", "xy", "by"]), PROPERTY,
                                      min_size=1, max_size=3),
        "patternProperties": st.dictionaries(st.sampled_from(PATTERNS), PROPERTY, min_size=1,
                                             max_size=2),
        "additionalProperties": PROPERTY}))
    return schema


def test_property_names_rewrite_is_exact():
    made: list[bool] = []
    beside_patterns: list[bool] = []

    @examples(250)
    @given(property_names_schemas(), instances(NAME_KEYS, most=3))
    def check(schema, xs):
        out = equivalent(schema, xs)
        done = "propertyNames as the keys allowed" in rules(out)
        made.append(done)
        if done and "patternProperties" in schema:
            beside_patterns.append(True)
            assert "patternProperties" not in out.schema

    check()
    assert sum(made) >= 0.8 * len(made), f"{sum(made)} of {len(made)}"
    assert len(beside_patterns) >= 0.2 * len(made)


NAMES_BY_REF = {"$defs": {"k": {"enum": ["a", "b", "xy"]}}, "type": "object",
                "propertyNames": {"$ref": "#/$defs/k"},
                "properties": {"a": {"type": "integer"}, "z": {}}}
NAMES_AND_PATTERNS = {"type": "object", "propertyNames": {"enum": ["a", "b", "xy"]},
                      "properties": {"a": {"type": "integer"}},
                      "patternProperties": {"^x": {"type": "string"}, "b|y": {"maxLength": 1}},
                      "additionalProperties": {"type": "boolean"}}


@pytest.mark.parametrize("schema, values", [
    (NAMES_BY_REF, [{}, {"a": 1}, {"a": "x"}, {"z": 1}, {"b": None}, {"xy": [1]},
                    {"a": 1, "b": 2}, {"q": 1}, {"a": 1, "b": 2, "xy": 3}]),
    (NAMES_AND_PATTERNS, [{}, {"a": 1}, {"a": True}, {"b": "x"}, {"b": "xx"}, {"b": True},
                          {"xy": "s"}, {"xy": "ss"}, {"xy": 1}, {"q": True},
                          {"a": 1, "b": "c"}, {"a": 1, "b": "c", "xy": "d"}]),
], ids=["names-by-ref", "names-beside-patterns"])
def test_property_names_compiles_and_agrees(gemma, compiler, schema, values):
    out = equivalent(schema, values)
    assert "propertyNames as the keys allowed" in rules(out)
    assert "propertyNames" not in out.schema and "patternProperties" not in out.schema
    agrees(gemma, compiler, schema, values)


@pytest.mark.parametrize("schema, values", [
    # "b" is not an allowed name, so its property becomes `false`, which a $ref reads
    ({"type": "object", "propertyNames": {"enum": ["a"]},
      "properties": {"a": {"$ref": "#/properties/b"}, "b": {"type": "integer"}}},
     [{"a": 1}, {"a": "x"}]),
    # the patternProperties a $ref points into are removed
    ({"type": "object", "propertyNames": {"enum": ["a", "xb"]},
      "patternProperties": {"^x": {"type": "string"}},
      "properties": {"a": {"$ref": "#/patternProperties/%5Ex"}}},
     [{"a": "s"}, {"a": 1}, {"xb": "s"}]),
], ids=["ref-to-a-refused-property", "ref-into-patternProperties"])
def test_property_names_keeps_what_references_point_to(schema, values):
    equivalent(schema, values)


# --- 4. the complement of a repeated character class ------------------------------------------

CLASS_ITEMS = ["a-z", "0-9", "A-F", "_", "\\-", "\\.", "é", " ", "\\d", "\\s", "\\w", "\\n",
               "b"]
ALPHABET = "az09_-.é \n\tA\u0663\u00a0"


@st.composite
def repeated_classes(draw: Any) -> str:
    items = draw(st.lists(st.sampled_from(CLASS_ITEMS), min_size=1, max_size=3, unique=True))
    body = "[" + "".join(items) + "]"
    group = draw(st.sampled_from(["{}", "({})", "(?:{})"]))
    # `*` and `+` mostly; bounded repetitions where string_sets reads them too
    times = draw(st.sampled_from(["*", "+", "*", "+", "{2}", "{0,1}", "{1,2}", "{2,}"]))
    if group != "{}" and draw(st.booleans()):
        return "^" + group.format(body + times) + "$"  # ^([C]+)$
    return "^" + group.format(body) + times + "$"


STRINGS = st.one_of(st.text(ALPHABET, max_size=4), st.text(ALPHABET, max_size=3).map(
    lambda s: s + "\n"))


def test_not_pattern_of_a_repeated_class_is_exact():
    made: list[bool] = []

    @examples(250)
    @given(repeated_classes(), st.booleans(), st.lists(st.one_of(STRINGS, STRINGS, NON_OBJECTS),
                                                      min_size=1, max_size=12))
    def check(pattern, typed, xs):
        schema = {"type": "string"} if typed else {}
        schema["not"] = {"pattern": pattern}
        out = equivalent(schema, xs)
        if pattern.endswith(("]*$", "]+$", ")*$", ")+$")):  # `^[C]*$`, `^([C])+$`
            made.append("not as its complement" in rules(out))

    check()
    # a range beside a shorthand (`[a-z\\d]`) is not read: about a third of these
    assert sum(made) >= 0.6 * len(made), f"{sum(made)} of {len(made)}"


@pytest.mark.parametrize("schema, values", [
    ({"type": "string", "not": {"pattern": "^[a-z]+$"}},
     ["", "a", "ab", "ab\n", "\n", "a\nb", "A", "ab1", "a\n\n"]),
    ({"not": {"pattern": "^[\\d_]*$"}},
     ["", "12", "12\n", "\n", "1a", "1\n2", "\u0661\u0662", "_\n\n", 1, None]),
    ({"not": {"pattern": "^(?:[\\w\\-])+$"}},
     ["", "a-b", "é", "a b", "ab\n", "\n", "a\nb", 3]),
    ({"anyOf": [{"type": "integer"}, {"not": {"pattern": ".*"}}]}, ["", "a", "\n", 1, None]),
], ids=["letters-plus", "digits-star", "word-plus", "dot-star"])
def test_not_pattern_compiles_and_agrees(gemma, compiler, schema, values):
    out = equivalent(schema, values)
    assert "not as its complement" in rules(out)
    agrees(gemma, compiler, schema, values)


def test_not_pattern_that_matches_every_string_admits_nothing():
    out = equivalent({"not": {"pattern": ".*"}}, ["", "a", "\n", 1, None, [], {}])
    assert "not as its complement" in rules(out)
    assert not any(validator(out.schema).is_valid(x) for x in ["", "a", 1, None, [], {}])


@pytest.mark.parametrize("pattern", ["^[a-z]+", "[a-z]+$", "^[a-z]+x$", "^[^a-z]*$",
                                     "^[a-z]*$|^x$", "^[[:alpha:]]*$",
                                     "^[a-z\\d]*$"])
def test_not_of_other_patterns_stays_refused(pattern):
    out = rewritten({"not": {"pattern": pattern}})
    assert "not" in out.schema and "/not" in out.refused


# --- 5. the complement of propertyNames failing on finitely many names ------------------------


def _negated(schema: Any, times: int) -> Any:
    for _ in range(times):
        schema = {"not": schema}
    return schema


@st.composite
def negated_names(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "ab"]), min_size=1, max_size=3,
                          unique=True))
    listed = {"enum": names} if len(names) > 1 or draw(st.booleans()) else {"const": names[0]}
    inner: dict[str, Any] = {"propertyNames": _negated(listed, draw(st.integers(1, 3)))}
    if draw(st.booleans()):
        inner["type"] = "object"
    if draw(st.booleans()):
        inner["properties"] = {"a": {"type": "integer"}}
    outer = _negated(inner, draw(st.integers(1, 3)))
    return {"type": "object", **outer} if draw(st.booleans()) else outer


def test_not_property_names_is_exact_and_leaves_no_marks():
    made: list[bool] = []

    @examples(200)
    @given(negated_names(), instances(["a", "b", "c", "ab", "d"], most=3))
    def check(schema, xs):
        out = equivalent(schema, xs)  # `rewritten` checks that no mark is left
        made.append("not" not in json.dumps(out.schema))

    check()
    assert sum(made) >= 0.3 * len(made), f"{sum(made)} of {len(made)}"


@pytest.mark.parametrize("schema, values", [
    ({"type": "object", "not": {"propertyNames": {"not": {"enum": ["a", "b"]}}}},
     [{}, {"a": 1}, {"b": 1}, {"c": 1}, {"a": 2, "c": 1}, {"c": 1, "d": 2}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "not": {"propertyNames": {"not": {"const": "a"}}}},
     [{}, {"a": 1}, {"a": "x"}, {"c": 1}, {"a": 2, "c": 1}]),
    ({"type": "object", "not": {"not": {"not": {"propertyNames": {"not": {"enum": ["a", "b"]}}}}}},
     [{}, {"a": 1}, {"b": 1}, {"c": 1}, {"a": 2, "c": 1}]),
    ({"not": {"not": {"type": "object", "not": {"propertyNames": {"not": {"enum": ["a"]}}}}}},
     [{}, {"a": 1}, {"b": 1}, {"a": 2, "c": 1}, 1, "a"]),
], ids=["some-key-of-two", "some-key-const", "three-nots", "two-nots-around"])
def test_not_property_names_compiles_and_agrees(gemma, compiler, schema, values):
    out = equivalent(schema, values)
    assert "not as its complement" in rules(out)
    assert "propertyNames" not in json.dumps(out.schema)
    agrees(gemma, compiler, schema, values)


def test_a_complement_of_a_complement_is_the_schema_itself():
    """`not` twice gives back what was negated (the mark), not a complement built twice,
    and the mark itself is gone."""
    pattern = {"pattern": "^[a-z]+$"}
    out = rewritten({"not": {"not": pattern}})
    assert out.schema == {"allOf": [pattern]}
    assert [r for r, _ in out.applied] == ["not as its complement"] * 2


# --- 6. oneOf: many disjoint branches, closed branches, branches naming only properties -------


def _tagged(n: int) -> dict[str, Any]:
    return {"type": "object", "oneOf": [
        {"properties": {"type": {"const": f"T{i}"}}, "required": ["type"]} for i in range(n)]}


def test_a_oneof_of_many_disjoint_branches_is_an_anyof(gemma, compiler):
    schema = _tagged(21)
    values = [{"type": "T0"}, {"type": "T20", "x": 1}, {"type": "T21"}, {"type": 0}, {},
              {"x": 1}, "T1"]
    out = equivalent(schema, values)
    assert rules(out) == ["oneOf as anyOf of exclusive branches"]
    assert out.schema["anyOf"] == schema["oneOf"]
    agrees(gemma, compiler, schema, values)
    equivalent(_tagged(64), [{"type": "T63"}, {"type": "T64"}, {}])
    assert rules(rewritten(_tagged(64))) == ["oneOf as anyOf of exclusive branches"]


def test_a_oneof_above_the_bounds_stays_refused(compiler):
    out = rewritten(_tagged(65))
    assert "above the bound of 64" in out.refused["/oneOf"] and "oneOf" in out.schema
    overlapping = {"oneOf": [{"type": "number", "minimum": i} for i in range(9)]}
    out = rewritten(overlapping)
    assert "above the bound of 8" in out.refused["/oneOf"] and not out.applied
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(overlapping, strict=True))
    assert e.value.pointer == "/oneOf"
    eight = {"oneOf": overlapping["oneOf"][:8]}
    assert rules(rewritten(eight)) == ["oneOf as anyOf of exclusive branches"]


PAGES = {"type": "object", "oneOf": [
    {"properties": {"pageID": {"type": "string"}, "optionID": {"type": "string"}},
     "additionalProperties": False, "required": ["pageID"]},
    {"properties": {"pageID": {"type": "string"}, "regex": {"type": "string"}},
     "additionalProperties": False, "required": ["pageID"]}]}
EVENTS = {"type": "object", "oneOf": [{"properties": {"events": {"type": "array"}}},
                                      {"properties": {"events": {"type": "string"}}}]}


@pytest.mark.parametrize("schema, values", [
    (PAGES, [{"pageID": "x"}, {"pageID": "x", "optionID": "o"}, {"pageID": "x", "regex": "r"},
             {"pageID": "x", "optionID": 1}, {"pageID": 1, "regex": "r"},
             {"pageID": "x", "other": 1}, {"optionID": "o"}, {}]),
    (EVENTS, [{}, {"events": []}, {"events": "e"}, {"events": 1}, {"events": [1], "x": 2},
              {"x": 2}]),
], ids=["closed-branches", "only-properties"])
def test_oneof_over_object_branches_compiles_and_agrees(gemma, compiler, schema, values):
    out = equivalent(schema, values)
    assert "oneOf as anyOf of exclusive branches" in rules(out)
    agrees(gemma, compiler, schema, values)


def test_two_branches_naming_only_properties_require_one_of_the_names():
    out = rewritten(EVENTS)
    assert {"required": ["events"]} in out.schema["allOf"]
    assert not validator(out.schema).is_valid({})
    assert not validator(EVENTS).is_valid({})


OBJECT_BRANCH = st.fixed_dictionaries(
    {"properties": st.dictionaries(st.sampled_from(["k", "a", "b"]), st.sampled_from(
        [{"type": "string"}, {"type": "number"}, {"type": "array"}, {}, {"const": "x"}]),
        max_size=3)},
    optional={"additionalProperties": st.just(False),
              "required": st.lists(st.sampled_from(["k", "a", "b"]), unique=True, min_size=1,
                                   max_size=2),
              "type": st.just("object")})


def test_oneof_over_object_branches_is_exact():
    made: list[bool] = []

    @examples(120)
    @given(st.lists(OBJECT_BRANCH, min_size=2, max_size=3), st.booleans(),
           instances(["k", "a", "b", "c"], most=3, size=14))
    def check(branches, typed, xs):
        schema = {"type": "object"} if typed else {}
        schema["oneOf"] = branches
        out = equivalent(schema, xs)
        made.append("oneOf as anyOf of exclusive branches" in rules(out))

    check()
    assert sum(made) >= 0.3 * len(made), f"{sum(made)} of {len(made)}"


# --- 7. the draft a schema without $schema is read in -----------------------------------------

DEPENDS = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
           "dependencies": {"a": ["b"]}}


@pytest.mark.parametrize("schema, cls", [
    (DEPENDS, jsonschema.Draft7Validator),
    ({"properties": {"x": {"dependencies": {"a": {"required": ["b"]}}}}},
     jsonschema.Draft7Validator),
    ({**DEPENDS, "$defs": {}}, jsonschema.Draft202012Validator),
    ({**DEPENDS, "properties": {"a": {"prefixItems": []}}}, jsonschema.Draft202012Validator),
    ({**DEPENDS, "properties": {"a": {"dependentRequired": {}}}},
     jsonschema.Draft202012Validator),
    ({**DEPENDS, "unevaluatedProperties": True}, jsonschema.Draft202012Validator),
    ({**DEPENDS, "$schema": DRAFT2020}, jsonschema.Draft202012Validator),
    ({**DEPENDS, "$schema": DRAFT4}, jsonschema.Draft4Validator),
    ({"$schema": DRAFT7, "$defs": {}, "prefixItems": []}, jsonschema.Draft7Validator),
    ({"properties": {"dependencies": {"type": "array"}}}, jsonschema.Draft202012Validator),
    ({"default": {"dependencies": {}}}, jsonschema.Draft202012Validator),
    ({}, jsonschema.Draft202012Validator),
    (True, jsonschema.Draft202012Validator),
], ids=["dependencies", "nested-dependencies", "with-$defs", "with-prefixItems",
        "with-dependentRequired", "with-unevaluatedProperties", "explicit-2020-12",
        "explicit-draft-4", "explicit-draft-7-wins", "a-property-named-dependencies",
        "dependencies-in-a-value", "empty", "true"])
def test_the_dialect_of_a_schema(schema, cls):
    assert dialect_of(schema) is cls


def test_dependencies_without_dollar_schema_are_enforced_as_draft_7(gemma, compiler):
    values = [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}]
    out = equivalent(DEPENDS, values)
    assert "dependencies as anyOf" in rules(out)
    agrees(gemma, compiler, DEPENDS, values)
    later = {**DEPENDS, "$defs": {}}  # 2020-12: `dependencies` is no keyword there
    assert validator(later).is_valid({"a": 1})
    assert "dependencies as anyOf" not in rules(rewritten(later))


# --- 8. $ref targets under keys that are no keyword -------------------------------------------

ONE_OF_NUMBERS = {"oneOf": [{"type": "number", "minimum": 0}, {"type": "number", "maximum": 5}]}


@pytest.mark.parametrize("schema, pointer, values", [
    ({"type": "object", "properties": {"p": {"$ref": "#/custom/x"}},
      "custom": {"x": ONE_OF_NUMBERS}}, "/custom/x/oneOf",
     [{}, {"p": -1}, {"p": 3}, {"p": 7}, {"p": "x"}, {"p": 0}, {"p": 5}]),
    ({"type": "object", "properties": {"p": {"$ref": "#/custom/x"}},
      "custom": {"x": {"$ref": "#/more/y"}}, "more": {"y": ONE_OF_NUMBERS}},
     "/more/y/oneOf", [{}, {"p": -1}, {"p": 3}, {"p": 7}, {"p": None}]),
    ({"type": "object", "properties": {"p": {"$ref": "#/paypal/defs/s"}},
      "paypal": {"defs": {"s": {"type": "string", "not": {"pattern": "^[a-z]*$"}}}}},
     "/paypal/defs/s/not", [{}, {"p": "ab"}, {"p": "aB"}, {"p": ""}, {"p": "1"}]),
], ids=["oneOf", "through-two-refs", "not"])
def test_ref_targets_under_other_keys_are_rewritten(gemma, compiler, schema, pointer, values):
    out = equivalent(schema, values)
    assert pointer in [p for _, p in out.applied]
    agrees(gemma, compiler, schema, values)


# --- 9. additionalProperties: {} beside an anyOf ----------------------------------------------

RECURSIVE_ANY_OF = {"definitions": {"n": {
    "type": "object", "additionalProperties": {},
    "anyOf": [{"properties": {"k": {"$ref": "#/definitions/n"}}, "required": ["k"]},
              {"properties": {"v": {"type": "integer"}}, "required": ["v"]}]}},
    "$ref": "#/definitions/n"}
PLAIN_ANY_OF = {"type": "object", "additionalProperties": True,
                "anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                          {"required": ["b"]}]}


@pytest.mark.parametrize("schema, pointer, values", [
    (RECURSIVE_ANY_OF, "/definitions/n/additionalProperties",
     [{}, {"v": 1}, {"k": {"v": 1}}, {"k": {"k": {"v": 2}}}, {"k": {}}, {"v": "x"},
      {"v": 1, "z": [1]}, 1]),
    (PLAIN_ANY_OF, "/additionalProperties",
     [{}, {"a": 1}, {"a": "x"}, {"b": 1}, {"b": 1, "a": "x"}, {"c": 1}, {"a": 1, "c": 2}]),
], ids=["recursive", "plain"])
def test_additional_properties_beside_anyof_is_dropped(gemma, compiler, schema, pointer,
                                                       values):
    out = equivalent(schema, values)
    assert ("additionalProperties: {} beside anyOf", pointer) in out.applied
    agrees(gemma, compiler, schema, values)


def test_an_unevaluated_properties_elsewhere_is_rewritten_first():
    """unevaluatedProperties is rewritten before anything else, on the schema as written;
    once none is left, additionalProperties: {} beside an anyOf may go."""
    schema = {**PLAIN_ANY_OF, "properties": {"x": {"unevaluatedProperties": False}}}
    out = equivalent(schema, [{}, {"a": 1}, {"a": 1, "c": "x"}, {"b": 1, "c": 2},
                              {"a": 1, "x": {}}, {"a": 1, "x": {"k": 1}}])
    assert rules(out)[:1] == ["unevaluatedProperties as additionalProperties"]
    assert "additionalProperties: {} beside anyOf" in rules(out)


@pytest.mark.parametrize("schema", [
    {**PLAIN_ANY_OF, "unevaluatedProperties": False},
    {**PLAIN_ANY_OF, "additionalProperties": {"type": "integer"}},
], ids=["beside-unevaluatedProperties", "a-real-schema"])
def test_additional_properties_beside_anyof_is_kept(schema):
    out = equivalent(schema, [{}, {"a": 1}, {"a": 1, "c": "x"}, {"b": 1, "c": 2}])
    assert "additionalProperties: {} beside anyOf" not in rules(out)
    assert out.schema["additionalProperties"] == schema["additionalProperties"]


def test_the_users_schema_is_untouched():
    schemas = [MIN_OPEN, UNEVALUATED_REF, NAMES_AND_PATTERNS, PAGES, RECURSIVE_ANY_OF,
               {"not": {"not": {"propertyNames": {"not": {"enum": ["a"]}}}}}]
    before = json.dumps(schemas)
    for schema in schemas:
        rewritten(schema)
    assert json.dumps(schemas) == before

