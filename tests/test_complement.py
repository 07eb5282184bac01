"""The complement of a schema (grammar/complement.py) and the rewrites built on it (`not`,
`if`/`then`/`else`, `oneOf` in grammar/rewrite.py).

(a) On random schemas (hypothesis: types, enums, bounds, required, properties and every
combinator, nested) the complement, where one is built, accepts exactly the instances the
schema rejects, judged by jsonschema in draft 2020-12 and draft 7. (b) Through llguidance:
`{"not": S}` compiled by kaname accepts a JSON text token by token exactly when jsonschema
finds it invalid for S. (c) What is not built stays refused, naming keyword and pointer.
Random-logits generation over the rewritten keywords is in test_rewrite.py (GENERATED).
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
from kaname.grammar.complement import complement
from kaname.grammar.rewrite import rewrite_schema
from kaname.grammar.string_sets import strings_outside

DRAFT7 = "http://json-schema.org/draft-07/schema#"
TYPES = ["null", "boolean", "object", "array", "number", "string", "integer"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, -2.5]),
                    st.sampled_from(["", "a", "ab", "b", "é"]))
KEYS = ["a", "b", "c"]
NUMBERS = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5]))


def _leaf() -> st.SearchStrategy[Any]:
    def one(keyword: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return values.map(lambda v: {keyword: v})

    return st.one_of(
        st.sampled_from([True, False, {}]),
        one("type", st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1,
                                                      max_size=3, unique=True)),
        one("enum", st.lists(SCALARS, min_size=1, max_size=3)),
        one("const", SCALARS),
        *(one(k, st.integers(0, 3)) for k in ("minLength", "maxLength", "minItems", "maxItems",
                                             "minProperties", "maxProperties")),
        *(one(k, NUMBERS) for k in ("minimum", "maximum", "exclusiveMinimum",
                                    "exclusiveMaximum")),
        one("required", st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)),
    )


def _compound(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    parts = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        parts.map(lambda xs: {"allOf": xs}),
        parts.map(lambda xs: {"anyOf": xs}),
        parts.map(lambda xs: {"oneOf": xs}),
        inner.map(lambda x: {"not": x}),
        st.dictionaries(st.sampled_from(KEYS), inner, min_size=1, max_size=2).map(
            lambda p: {"properties": p}),
        st.tuples(inner, inner, inner).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
        st.tuples(inner, inner).map(  # two schemas' keywords side by side
            lambda t: {**t[0], **t[1]} if all(isinstance(x, dict) for x in t) else t[0]),
    )


SCHEMAS = st.recursive(_leaf(), _compound, max_leaves=6)
INSTANCES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.sampled_from(KEYS), c, max_size=3), max_leaves=5)
# one key at most: llguidance writes an object's keys in schema order, which a complement's
# branches may order differently (a documented narrowing, not what is tested here)
FLAT_INSTANCES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                           st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=1))
SETTINGS = settings(max_examples=400, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def validator(schema: Any) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _in_dialect(schema: Any, dialect: str | None) -> Any:
    return {"$schema": dialect, **schema} if dialect and isinstance(schema, dict) else schema


@pytest.mark.parametrize("dialect", [None, DRAFT7])
def test_the_complement_accepts_exactly_what_the_schema_rejects(dialect):
    built: list[bool] = []

    @SETTINGS
    @given(SCHEMAS, st.lists(INSTANCES, min_size=1, max_size=8))
    def check(schema, instances):
        schema = _in_dialect(schema, dialect)
        cls = jsonschema.validators.validator_for(schema,
                                                  default=jsonschema.Draft202012Validator)
        failing, why = complement(schema, cls, lambda ref: (_ for _ in ()).throw(KeyError(ref)))
        built.append(why is None)
        if why is not None:
            return
        original, negated = validator(schema), validator(_in_dialect(failing, dialect)
                                                          if isinstance(failing, dict)
                                                          else failing)
        for x in instances:
            assert negated.is_valid(x) is not original.is_valid(x), (schema, failing, x)

    check()
    assert sum(built) >= 0.6 * len(built), f"{sum(built)} of {len(built)} built"


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.sets(st.text(alphabet="abé\"\n", max_size=3), min_size=1, max_size=5),
       st.text(alphabet="abcé\"\n", max_size=4))
def test_strings_outside_a_set(words, s):
    import re

    pattern = re.compile("^" + strings_outside(words) + "$")
    assert (pattern.fullmatch(s) is not None) is (s not in words), (words, s)
    assert "[^" not in pattern.pattern  # no negated class (guards.py narrows those)


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def test_not_through_llguidance_is_exact(gemma, compiler):
    """`{"not": S}` compiled by kaname, judged token by token, against jsonschema on S."""
    compiled: list[bool] = []

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(SCHEMAS, st.lists(FLAT_INSTANCES, min_size=1, max_size=6))
    def check(schema, instances):
        try:
            c = compiler.compile(JsonSchema({"not": schema}))
        except UnsupportedSchemaError:
            compiled.append(False)
            return
        compiled.append(True)
        original = validator(schema)
        for x in instances:
            assert accepts(gemma.tokenizer, c, x) is not original.is_valid(x), (schema, x)

    check()
    assert sum(compiled) >= 0.5 * len(compiled), f"{sum(compiled)} of {len(compiled)}"


# --- the rewrites ---------------------------------------------------------------------------

NOT_IN_OBJECT = {"type": "object", "properties": {
    "name": {"type": "string", "not": {"enum": ["admin", "root"]}},
    "age": {"type": "integer", "not": {"minimum": 150}}},
    "required": ["name"], "not": {"required": ["age", "nick"]}}
IF_THEN_ELSE = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]},
                                                 "n": {"type": "integer"}},
                "required": ["kind"],
                "if": {"properties": {"kind": {"const": "a"}}},
                "then": {"required": ["n"]}, "else": {"properties": {"n": {"maximum": 0}}}}
ONE_OF_OVERLAPPING = {"oneOf": [{"type": "number", "minimum": 0}, {"type": "number",
                                                                   "maximum": 5}]}


@pytest.mark.parametrize("schema, rule", [
    (NOT_IN_OBJECT, "not as its complement"),
    (IF_THEN_ELSE, "if/then/else as anyOf"),
    (ONE_OF_OVERLAPPING, "oneOf as anyOf of exclusive branches"),
])
def test_rewritten_keywords_compile_and_are_exact(gemma, compiler, schema, rule):
    assert rule in [r for r, _ in rewrite_schema(schema).applied]
    c = compiler.compile(JsonSchema(schema))
    seen: set[bool] = set()

    @SETTINGS
    @given(st.one_of(
        st.integers(-3, 8),
        st.fixed_dictionaries({"name": st.sampled_from(["admin", "bob", "root", "r"])},
                              optional={"age": st.integers(140, 160)}),
        st.fixed_dictionaries({"kind": st.sampled_from(["a", "b"])},
                              optional={"n": st.integers(-2, 2)})))
    def check(value):
        if isinstance(value, dict):  # in schema order, as llguidance writes keys
            value = {k: value[k] for k in ("name", "age", "kind", "n") if k in value}
        valid = validator(schema).is_valid(value)
        assert accepts(gemma.tokenizer, c, value) is valid, value
        seen.add(valid)

    check()
    assert seen == {True, False}


def test_a_oneof_llguidance_proves_exclusive_is_left_alone():
    schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    assert rewrite_schema(schema).applied == []


@pytest.mark.parametrize("schema, pointer, why", [
    ({"properties": {"a": {"not": {"pattern": "^x"}}}}, "/properties/a/not", "'pattern'"),
    ({"not": {"type": "integer"}}, "/not", "type integer"),
    ({"not": {"items": {"type": "string"}}}, "/not", "'items'"),
    ({"not": {"additionalProperties": False}}, "/not", "additionalProperties"),
    ({"oneOf": [{"multipleOf": 2}, {"multipleOf": 3}]}, "/oneOf", "'multipleOf'"),
    ({"$defs": {"t": {"properties": {"c": {"$ref": "#/$defs/t"}}}},
      "not": {"$ref": "#/$defs/t"}}, "/not", "recursive $ref"),
])
def test_what_has_no_complement_stays_refused(compiler, schema, pointer, why):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert e.value.pointer == pointer, e.value
    assert why in str(e.value), e.value


def test_the_users_schema_is_untouched():
    before = json.dumps(NOT_IN_OBJECT)
    rewrite_schema(NOT_IN_OBJECT)
    assert json.dumps(NOT_IN_OBJECT) == before


# --- disjointness (the oneOf rewrite skips complements between disjoint branches) ----------

DISCRIMINATED = st.builds(
    lambda tag, req, closed: {"type": "object", "required": ["kind", *req],
                              "properties": {"kind": {"const": tag}, "a": {}, "b": {}},
                              **({"additionalProperties": False} if closed else {})},
    st.sampled_from(["x", "y", 1, 1.0, True]), st.lists(st.sampled_from(["a", "b"]),
                                                        unique=True), st.booleans())
OBJECTS = st.dictionaries(st.sampled_from(["kind", "a", "b", "c"]),
                          st.sampled_from(["x", "y", 1, True, None]), max_size=4)


def test_disjoint_schemas_share_no_instance():
    from kaname.grammar.disjoint import disjoint

    proven: list[bool] = []

    @SETTINGS
    @given(st.one_of(SCHEMAS, DISCRIMINATED), st.one_of(SCHEMAS, DISCRIMINATED),
           st.lists(st.one_of(INSTANCES, OBJECTS), min_size=1, max_size=10))
    def check(a, b, instances):
        if not disjoint(a, b, lambda ref: (_ for _ in ()).throw(KeyError(ref)),
                        jsonschema.Draft202012Validator):
            proven.append(False)
            return
        proven.append(True)
        va, vb = validator(a), validator(b)
        for x in instances:
            assert not (va.is_valid(x) and vb.is_valid(x)), (a, b, x)

    check()
    assert sum(proven) >= 0.1 * len(proven), f"{sum(proven)} of {len(proven)} proven"


def test_a_oneof_of_disjoint_branches_becomes_an_anyof_in_place(gemma, compiler):
    """A discriminated union llguidance does not prove exclusive (the tag is in a $ref):
    no complement is needed, the oneOf is an anyOf where it stood."""
    schema = {"$defs": {"cat": {"type": "object", "properties": {
                  "kind": {"const": "cat"}, "lives": {"type": "integer"}},
                  "required": ["kind"], "additionalProperties": False}},
              "type": "object",
              "oneOf": [{"$ref": "#/$defs/cat"},
                        {"properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
                         "required": ["kind", "good"], "additionalProperties": False}]}
    out = rewrite_schema(schema)
    assert [r for r, _ in out.applied] == ["oneOf as anyOf of exclusive branches"]
    assert out.schema["anyOf"] == schema["oneOf"] and "allOf" not in out.schema
    c = compiler.compile(JsonSchema(schema))
    for value, ok in [({"kind": "cat"}, True), ({"kind": "dog", "good": True}, True),
                      ({"kind": "cat", "good": True}, False), ({"kind": "bird"}, False)]:
        assert accepts(gemma.tokenizer, c, value) is ok, value


def test_a_finite_set_of_values_absorbs_what_stands_beside_it(gemma, compiler):
    """enum / const (also as an allOf member) beside keywords llguidance refuses: the values
    the whole schema accepts, as one enum (jsonschema decides which)."""
    values = [1, 2, 2.5, "ab", {"a": 1}, {"a": "x"}, [1, 1], [1, 2], None]
    schema = {"allOf": [{"enum": values}, {"not": {"type": "number", "multipleOf": 2}},
                        {"uniqueItems": True},
                        {"not": {"type": "object", "properties": {"a": {"type": "string"}}}}]}
    out = rewrite_schema(schema)
    assert out.schema == {"enum": [1, 2.5, "ab", {"a": 1}, [1, 2], None]}
    assert ("a finite set of values", "/") in out.applied
    c = compiler.compile(JsonSchema(schema))
    for value in [*values, "a", True, {"a": 2}]:
        assert accepts(gemma.tokenizer, c, value) is validator(schema).is_valid(value), value
    plain = {"type": "string", "enum": ["a", "b"]}  # nothing to absorb: left as it is
    assert rewrite_schema(plain).applied == []


def test_before_2019_a_ref_hides_its_siblings_from_the_disjointness_proof():
    """Draft 7: `{"$ref": S, "type": "integer"}` is S alone (jsonschema ignores the type), so
    it overlaps a string branch when S is a string: not disjoint there, disjoint from
    2019-09 on, where both keywords apply."""
    from kaname.grammar.disjoint import disjoint

    defs = {"s": {"type": "string", "maxLength": 3}}
    a, b = {"$ref": "#/definitions/s", "type": "integer"}, {"type": "string"}

    def resolve(ref: str) -> Any:
        return defs[ref.rsplit("/", 1)[1]]

    assert not disjoint(a, b, resolve, jsonschema.Draft7Validator)
    assert jsonschema.Draft7Validator({"definitions": defs, "allOf": [a, b]}).is_valid("ab")
    assert disjoint(a, b, resolve, jsonschema.Draft202012Validator)
