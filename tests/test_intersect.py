"""The proofs and constructions behind the oneOf rewrite: disjointness (grammar/disjoint.py),
intersections (grammar/intersect.py), patterns without some names (grammar/string_sets.py),
and the rewrites that use them (`oneOf`, properties out of the patternProperties they match,
a type implied by an anyOf: grammar/rewrite.py).

(a) On random schemas that reference a small map of definitions (recursive ones included),
each proof is checked against jsonschema in draft 2020-12 and draft 7: two schemas proven
disjoint share no instance, a kind proven vacuous is accepted whole, an instance is of a kind
proven admitted, and a built intersection accepts exactly what both schemas accept. (b)
`pattern_without` against Python's `re`, as jsonschema searches patterns. (c) The rewritten
schema is equivalent to the original under jsonschema. (d) Through llguidance, token by
token: a json-patch style oneOf and recursive definitions under patternProperties / anyOf.
Each property test also asserts that what it checks was built or proven in a good share of
its examples, so none passes vacuously.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matching import accepts
from test_complement import DISCRIMINATED, INSTANCES, OBJECTS, SCALARS, SCHEMAS, validator

from kaname.errors import ConstraintError
from kaname.grammar import GrammarCompiler, Guards, JsonSchema
from kaname.grammar.disjoint import (
    KINDS,
    admitted_kinds,
    disjoint,
    kinds_of,
    type_of_kinds,
    vacuous_kinds,
)
from kaname.grammar.intersect import Intersection
from kaname.grammar.rewrite import rewrite_schema
from kaname.grammar.string_sets import matches_everything, pattern_without, pattern_words

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DIALECTS = [(None, jsonschema.Draft202012Validator), (DRAFT7, jsonschema.Draft7Validator)]
DIALECT_IDS = ["2020-12", "draft7"]
TYPES = ["null", "boolean", "object", "array", "number", "string", "integer"]

# Definitions the random schemas reference: plain, discriminated, a union, recursive, a
# `$ref` beside a keyword (draft 7 reads the target alone, 2020-12 both: nothing), an alias.
DEFS: dict[str, Any] = {
    "str": {"type": "string", "maxLength": 1},
    "int": {"type": "integer", "minimum": 0},
    "tag": {"enum": ["x", "y", 1, True]},
    "cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "a": {"type": "integer"}},
            "required": ["kind"]},
    "dog": {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"],
            "additionalProperties": False},
    "pet": {"anyOf": [{"$ref": "#/definitions/cat"}, {"$ref": "#/definitions/dog"}]},
    "node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}}},
    "near": {"$ref": "#/definitions/str", "type": "integer"},
    "alias": {"$ref": "#/definitions/pet"},
}
REFS = [f"#/definitions/{k}" for k in DEFS]
NAMES = ["kind", "a", "b", "kids"]
TAGS = st.sampled_from(["cat", "dog", "x", "y", "a", 0, 1, 1.0, 2.5, True, False, None])
NUMBERS = st.one_of(st.integers(-2, 2), st.sampled_from([0.5, -1.5]))
PATTERNS = ["^a", "b", ".*", "^k", "^[ab]*$"]
# Checked in every example beside the random instances: the values the schemas discriminate
# by, and the JSON Schema equalities Python gets wrong (1 == True, 0 == False).
PROBES: list[Any] = [None, True, False, 0, 1, 1.0, 2.5, -1, "", "a", "x", "cat", [], [1], {},
                     {"kind": "cat"}, {"kind": "dog"}, {"kind": "cat", "a": 1},
                     {"kids": []}, {"kids": [{}]}, {"kids": [1]}]


def resolve(ref: str) -> Any:
    """The definition a `#/definitions/NAME` reference names (KeyError otherwise)."""
    if not isinstance(ref, str) or not ref.startswith("#/definitions/"):
        raise KeyError(ref)
    return DEFS[ref.removeprefix("#/definitions/")]


def wrapped(schema: Any, dialect: str | None) -> dict[str, Any]:
    """`schema` where its references resolve: under a root holding DEFS (as rewrite.py's
    `valid` wraps a subschema)."""
    root: dict[str, Any] = {"$schema": dialect} if dialect else {}
    return {**root, "definitions": DEFS, "allOf": [schema]}


def judge(schema: Any, dialect: str | None) -> Any:
    return validator(wrapped(schema, dialect))


def kind(x: Any) -> str:
    """The kind of an instance: its JSON type, with the integral numbers (1.0 too) apart."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, int):
        return "integer"
    if isinstance(x, float):
        return "integer" if x.is_integer() else "number"
    if isinstance(x, str):
        return "string"
    return "array" if isinstance(x, list) else "object"


def _leaf() -> st.SearchStrategy[Any]:
    def one(keyword: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return values.map(lambda v: {keyword: v})

    return st.one_of(
        st.sampled_from([True, False, {}]),
        st.sampled_from(REFS).map(lambda r: {"$ref": r}),
        one("type", st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1,
                                                      max_size=3, unique=True)),
        one("const", TAGS),
        one("enum", st.lists(TAGS, min_size=1, max_size=3)),
        *(one(k, st.integers(0, 2)) for k in ("minLength", "maxLength", "minItems", "maxItems",
                                             "minProperties", "maxProperties")),
        *(one(k, NUMBERS) for k in ("minimum", "maximum", "exclusiveMinimum",
                                    "exclusiveMaximum")),
        one("required", st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True)),
        one("pattern", st.sampled_from(["^a", "^[ab]*$"])),
        one("uniqueItems", st.booleans()),
    )


def _object(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(NAMES), inner, min_size=1, max_size=3),
        "patternProperties": st.dictionaries(st.sampled_from(PATTERNS), inner, min_size=1,
                                             max_size=2),
        "additionalProperties": st.booleans() | inner,
        "required": st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True),
    })


def _compound(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    parts = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        parts.map(lambda xs: {"anyOf": xs}),
        parts.map(lambda xs: {"allOf": xs}),
        _object(inner),
        _object(inner),
        inner.map(lambda x: {"type": "array", "items": x}),
        inner.map(lambda x: {"items": x}),
        st.tuples(inner, inner).map(  # two schemas' keywords side by side
            lambda t: {**t[0], **t[1]} if all(isinstance(x, dict) for x in t) else t[0]),
        st.tuples(st.sampled_from(REFS), inner).map(  # a $ref beside keywords
            lambda t: {"$ref": t[0], **t[1]} if isinstance(t[1], dict) else {"$ref": t[0]}),
    )


# Schemas over NAMES and DEFS: references, unions, objects, discriminators, nested values.
REFERRING = st.recursive(_leaf(), _compound, max_leaves=6)
VALUES = st.one_of(SCALARS, TAGS)
KEYED = st.recursive(VALUES, lambda c: st.lists(c, max_size=2) | st.dictionaries(
    st.sampled_from([*NAMES, "c", ""]), c, max_size=3), max_leaves=6)
ALL_INSTANCES = st.lists(st.one_of(KEYED, INSTANCES, OBJECTS), min_size=1, max_size=8)
ANY_SCHEMA = st.one_of(REFERRING, REFERRING, SCHEMAS, DISCRIMINATED)
SETTINGS = settings(max_examples=250, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def _share(hits: list[bool], least: float, what: str) -> None:
    assert hits and sum(hits) >= least * len(hits), f"{what}: {sum(hits)} of {len(hits)}"


# --- kinds -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), max_size=4),
       st.sets(st.sampled_from(sorted(KINDS))), st.lists(KEYED, max_size=6))
def test_kinds_of_a_type_are_what_jsonschema_accepts(type_value, kinds, instances):
    admitted = kinds_of(type_value)
    assert admitted is not None
    for dialect, _ in DIALECTS:
        check = judge({"type": type_value}, dialect)
        for x in [*PROBES, *instances]:
            assert check.is_valid(x) is (kind(x) in admitted), (type_value, x)
    names = type_of_kinds(kinds)
    if "number" in kinds and "integer" not in kinds:
        assert names is None
    else:
        assert names is not None and (kinds_of(names) or set()) == kinds, (kinds, names)
    assert kinds_of("float") is None and kinds_of(3) is None


# --- disjointness ---------------------------------------------------------------------------


@pytest.mark.parametrize("dialect, cls", DIALECTS, ids=DIALECT_IDS)
def test_disjoint_schemas_share_no_instance_of_the_kinds_asked(dialect, cls):
    """disjoint(a, b, within=W, required=R): no instance of a kind in W (that has the keys R,
    where it is an object) is valid for both."""
    proven: list[bool] = []
    keyed: list[bool] = []

    @SETTINGS
    @given(ANY_SCHEMA, ANY_SCHEMA,
           st.just(KINDS) | st.sets(st.sampled_from(sorted(KINDS)), min_size=1),
           st.just(()) | st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
           ALL_INSTANCES)
    def check(a, b, within, required, instances):
        if not disjoint(a, b, resolve, cls, within=within, required=required):
            proven.append(False)
            return
        proven.append(True)
        # both may be objects, and objects are asked about: a key's values kept them apart
        keyed.append("object" in set(within) & admitted_kinds(a, resolve, cls)
                     & admitted_kinds(b, resolve, cls))
        va, vb = judge(a, dialect), judge(b, dialect)
        for x in [*PROBES, *instances]:
            if kind(x) not in within or (isinstance(x, dict) and not set(required) <= set(x)):
                continue
            assert not (va.is_valid(x) and vb.is_valid(x)), (a, b, within, required, x)

    check()
    _share(proven, 0.2, "proven disjoint")
    _share(keyed, 0.1, "proven apart among objects (by values or keys)")


def test_disjoint_reads_a_required_key_through_references_and_unions():
    """The shapes the oneOf rewrite meets: a discriminator behind a $ref, a union of them,
    a key one side forbids, the keys the schema around the oneOf requires."""
    cls = jsonschema.Draft202012Validator
    cat, dog = {"$ref": "#/definitions/cat"}, {"$ref": "#/definitions/dog"}
    assert disjoint(cat, dog, resolve, cls)
    assert not disjoint({"$ref": "#/definitions/pet"}, cat, resolve, cls)
    assert disjoint({"$ref": "#/definitions/alias"}, {"properties": {"kind": {"const": 1}},
                                                      "required": ["kind"]}, resolve, cls)
    closed = {"properties": {"kind": {}}, "additionalProperties": False}
    assert not disjoint(closed, {"properties": {"a": {}}}, resolve, cls)
    assert disjoint(closed, {"properties": {"a": {}}}, resolve, cls, within={"object"},
                    required=["a"])
    assert not disjoint(closed, {"properties": {"a": {}}}, resolve, cls, required=["a"])


# --- kinds accepted whole, kinds admitted ---------------------------------------------------


@pytest.mark.parametrize("dialect, cls", DIALECTS, ids=DIALECT_IDS)
def test_vacuous_and_admitted_kinds(dialect, cls):
    """Every instance of a kind in vacuous_kinds(s) is valid for s; every instance valid for
    s is of a kind in admitted_kinds(s)."""
    vacuous: list[bool] = []  # some kinds, not all
    admitted: list[bool] = []  # not all kinds

    @SETTINGS
    @given(ANY_SCHEMA, ALL_INSTANCES)
    def check(schema, instances):
        whole = vacuous_kinds(schema, resolve, cls)
        some = admitted_kinds(schema, resolve, cls)
        vacuous.append(bool(whole) and whole != KINDS)
        admitted.append(some != KINDS)
        assert whole <= KINDS and some <= KINDS
        v = judge(schema, dialect)
        for x in [*PROBES, *instances]:
            ok = v.is_valid(x)
            if kind(x) in whole:
                assert ok, ("vacuous", schema, whole, x)
            if ok:
                assert kind(x) in some, ("admitted", schema, some, x)

    check()
    _share(vacuous, 0.2, "vacuous kinds neither none nor all")
    _share(admitted, 0.3, "admitted kinds not all")


# --- intersections --------------------------------------------------------------------------


def _valid(dialect: str | None) -> Any:
    """(value, schema) -> whether jsonschema accepts it, None where it cannot tell: as
    rewrite.py's `_Context.valid`."""
    def valid(value: Any, schema: Any) -> bool | None:
        try:
            return bool(judge(schema, dialect).is_valid(value))
        except Exception:
            return None
    return valid


def _mergeable(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def closed(s: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in s.items() if k != "patternProperties"}

    return st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"anyOf": xs}),
        _object(inner).map(closed),
        _object(inner).map(closed),
        inner.map(lambda x: {"type": "array", "items": x}),
        st.tuples(inner, inner).map(
            lambda t: {**t[0], **t[1]} if all(isinstance(x, dict) for x in t) else t[0]))


# Schemas Intersection.of reads: references, unions, finite sets, types, bounds, objects,
# items (patternProperties and allOf, which it leaves alone, are rarer here).
MERGEABLE = st.recursive(_leaf(), _mergeable, max_leaves=6)
# The same, with finite sets of 0 / 1 / false / true (which Python calls equal) more often.
BOOLEAN_OR_BIT = st.sampled_from([0, 1, True, False])
WITH_BITS = st.recursive(st.one_of(
    BOOLEAN_OR_BIT.map(lambda v: {"const": v}),
    st.lists(BOOLEAN_OR_BIT | st.just("x"), min_size=1, max_size=2).map(lambda v: {"enum": v}),
    _leaf()), _mergeable, max_leaves=4)


_SUBSCHEMA = frozenset({"items", "additionalProperties", "not"})
_SUBSCHEMAS = frozenset({"anyOf", "allOf", "oneOf"})
_NAMED = frozenset({"properties", "patternProperties"})


def _swapped(x: Any) -> Any:
    """`x` with true / false and 1 / 0 exchanged: equal in Python, not in JSON Schema."""
    if isinstance(x, bool):
        return int(x)
    if type(x) is int and x in (0, 1):
        return bool(x)
    if isinstance(x, list):
        return [_swapped(v) for v in x]
    return {k: _swapped(v) for k, v in x.items()} if isinstance(x, dict) else x


def twin(schema: Any) -> Any:
    """The same schema with each const / enum value swapped (`_swapped`)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "const" or (k == "enum" and isinstance(v, list)):
            out[k] = _swapped(v)
        elif k in _SUBSCHEMA:
            out[k] = twin(v)
        elif k in _SUBSCHEMAS and isinstance(v, list):
            out[k] = [twin(x) for x in v]
        elif k in _NAMED and isinstance(v, dict):
            out[k] = {n: twin(x) for n, x in v.items()}
        else:
            out[k] = v
    return out


PAIRS = st.tuples(st.one_of(MERGEABLE, MERGEABLE, SCHEMAS),
                  st.one_of(MERGEABLE, MERGEABLE, SCHEMAS))
TWINS = WITH_BITS.map(lambda a: (a, twin(a)))  # the same schema, or one Python calls equal


def _exact_intersections(pairs: st.SearchStrategy[Any], dialect: str | None,
                         cls: type[Any], examples: int, least: float) -> None:
    built: list[bool] = []

    @settings(SETTINGS, max_examples=examples)
    @given(pairs, ALL_INSTANCES)
    def check(pair, instances):
        a, b = pair
        meet = Intersection(resolve, cls, _valid(dialect)).of(a, b)
        built.append(meet is not None)
        if meet is None:
            return
        if "allOf" not in json.dumps([a, b]):
            assert "allOf" not in json.dumps(meet), (a, b, meet)
        va, vb, vm = judge(a, dialect), judge(b, dialect), judge(meet, dialect)
        for x in [*PROBES, *instances]:
            assert vm.is_valid(x) is (va.is_valid(x) and vb.is_valid(x)), (a, b, meet, x)

    check()
    _share(built, least, "built")


@pytest.mark.parametrize("dialect, cls", DIALECTS, ids=DIALECT_IDS)
def test_an_intersection_accepts_exactly_what_both_accept(dialect, cls):
    _exact_intersections(PAIRS, dialect, cls, 250, 0.5)


def test_an_intersection_tells_true_from_one():
    """Schemas Python calls equal (`{"const": 0} == {"const": False}`) that JSON Schema does
    not: their intersection is not either of them."""
    _exact_intersections(TWINS, None, jsonschema.Draft202012Validator, 100, 0.5)


def test_an_intersection_through_references_unions_and_objects():
    """Examples of each step: a $ref is its target, an anyOf keeps the branches not disjoint
    from the other side, properties meet additionalProperties, bounds tighten."""
    of = Intersection(resolve, jsonschema.Draft202012Validator, _valid(None)).of
    assert of({"$ref": "#/definitions/pet"}, {"properties": {"kind": {"const": "dog"}}}) == \
        {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"],
         "additionalProperties": False}
    assert of({"type": "integer", "minimum": 0}, {"type": ["string", "number"],
                                                 "minimum": 2}) == \
        {"type": "integer", "minimum": 2}
    assert of({"properties": {"a": {"type": "string"}}, "additionalProperties": False},
              {"properties": {"b": {}}}) == \
        {"properties": {"a": {"type": "string"}, "b": False}, "additionalProperties": False}
    assert of({"enum": ["x", 1, 2]}, {"$ref": "#/definitions/tag"}) == {"enum": ["x", 1]}
    assert of({"patternProperties": {"^a": {}}}, {"type": "object"}) is None
    assert of({"$ref": "#/definitions/near"}, {"type": "integer"}) is None  # 2020-12: both


# --- patterns without some names ------------------------------------------------------------

EVERYTHING = [".*", "", "^", "^[a-z]*", "a*", "(?:)", "x?", "^(?:ab)*", "\\A", "b|"]
REPEATED = ["^[a-c_]*$", "^([a-c])+$", "^(?:[\\.\\-a])*$", "^[_a-]+$", "^[-.a]*$", "^[.-a]*$",
            "^[\\\\a]*$", "^(?:[a\\]])+$", "^[a-a]*$", "^[b]+$", "^[ab]*$", "^[a-c-]*$",
            "^[\\^a]*$", "^[a-c]{1,2}$", "^([ab])$", "^[_a]{0,3}$"]  # the last: a few words
# Shorthands in a class: read as Python's `re` reads them, or not at all (None); exact where read.
SHORTHANDS = ["^[\\w]*$", "^[\\d]+$", "^[\\s_]*$", "^[\\W]+$", "^[a\\d]*$", "^[\\w-]*$",
              "^[-\\w]*$", "^([\\D])+$"]
UNREAD = ["^a.*$", "^[^a]*$", "^[a-z]{2}$", "^[[:alpha:]]*$", "a$", "\\ba", "^[c-a]*$",
          "(?=a)", "^[a-c]?$", "^[a-c]*\\Z", "^(?:[a-c]*x)$", "^[a-c]*x$", "^[\\x61]*$"]
ALPHABET = "abcd_.-\\]^\n 1é"


NAME_SETS = st.sets(st.text(alphabet="abc_.-1 ", max_size=3), max_size=4) \
    | st.sets(st.text(alphabet="ab", max_size=2), max_size=5)  # covering small classes
STRINGS = st.lists(st.text(alphabet=ALPHABET, max_size=4).filter(lambda s: not s.endswith("\n")),
                   min_size=1, max_size=10)


def _without_names(pattern: str, names: set[str], strings: list[str]) -> None:
    """re.fullmatch(result, s) iff re.search(P, s) and s is no name (s without a trailing
    newline, before which Python's `$` also matches)."""
    result = pattern_without(pattern, names)
    if pattern in SHORTHANDS and result is None:
        return
    words = pattern_words(pattern, 64)
    if result is None and words is not None and words <= names:
        return  # a few words, all of them names: nothing is left to match (not rewritten)
    assert result is not None, pattern
    assert "[^" not in result  # positive ranges only (guards.py narrows negated classes)
    compiled = re.compile(result)
    for s in [*strings, *names, ""]:
        expected = re.search(pattern, s) is not None and s not in names
        assert (compiled.fullmatch(s) is not None) is expected, (pattern, names, s, result)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(EVERYTHING + REPEATED), NAME_SETS, STRINGS)
def test_a_pattern_without_names_matches_the_rest(pattern, names, strings):
    _without_names(pattern, names, strings)


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(SHORTHANDS), NAME_SETS, STRINGS)
def test_a_class_with_shorthands_without_names(pattern, names, strings):
    _without_names(pattern, names, strings)


def test_strings_outside_a_set_over_a_small_alphabet():
    """Where the words continue a word with every letter of the alphabet, nothing but those
    continuations leaves the set there (not the empty rest)."""
    from kaname.grammar.string_sets import strings_outside

    for words, alphabet, inside in [(["", "b"], [(98, 98)], ["", "b"]),
                                    (["a", "aa", "ab"], [(97, 98)], ["a", "aa", "ab"])]:
        pattern = re.compile("^" + strings_outside(words, alphabet) + "$")
        for s in inside:
            assert pattern.fullmatch(s) is None, (words, s, pattern.pattern)
        for s in ["bb", "aaa", "ba"] if alphabet == [(97, 98)] else ["bb", "bbb"]:
            assert pattern.fullmatch(s) is not None, (words, s, pattern.pattern)


@pytest.mark.parametrize("pattern", UNREAD)
def test_patterns_pattern_without_cannot_read_give_none(pattern):
    assert pattern_without(pattern, ["a"]) is None


# Patterns that match the empty string and look at nothing after it, but whose empty match
# does not stand in every string: an atomic group or possessive quantifier (Python 3.11)
# keeps what it took, and a backreference or conditional then depends on it.
BACKTRACKING = ["^(a*+)\\1", "^(a)?+(?(1)b)", "^(?>(a*))\\1"]


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(EVERYTHING + BACKTRACKING + REPEATED + UNREAD),
       st.lists(st.text(alphabet="ab", max_size=3), min_size=1, max_size=6))
def test_a_pattern_said_to_match_everything_is_found_in_every_string(pattern, strings):
    if not matches_everything(pattern):
        return
    for s in ["", "a", *strings]:
        assert re.search(pattern, s) is not None, (pattern, s)


# --- the rewrites, judged by jsonschema -----------------------------------------------------

ONE_OF = st.builds(
    lambda branches, around: {**around, "oneOf": branches},
    st.lists(st.one_of(REFERRING, DISCRIMINATED, SCHEMAS), min_size=2, max_size=3),
    st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["object", ["object", "string"], "string"]),
        "required": st.lists(st.sampled_from(["kind", "a"]), min_size=1, max_size=2,
                             unique=True)}))
NAMED_AND_PATTERNED = st.builds(
    lambda props, patterns, more: {"type": "object", "properties": props,
                                   "patternProperties": patterns, **more},
    st.dictionaries(st.sampled_from(NAMES), st.one_of(
        st.sampled_from(REFS).map(lambda r: {"$ref": r}), MERGEABLE), min_size=1, max_size=3),
    # not "": jsonschema's additionalProperties joins the patterns with "|" and reads an empty
    # result as no pattern, so {"": S} never exempts a key from additionalProperties there
    st.dictionaries(st.sampled_from([".*", "^[a-k]*$", "^([ab])+$", "a*", "^[b]+$"]), st.one_of(
        st.sampled_from(REFS).map(lambda r: {"$ref": r}), MERGEABLE), min_size=1, max_size=2),
    st.fixed_dictionaries({}, optional={"additionalProperties": st.booleans()}))
TYPED_ANY_OF = st.builds(
    lambda t, branches: {"type": t, "anyOf": branches},
    st.sampled_from(["object", ["object", "array"], "string"]),
    st.lists(st.one_of(st.sampled_from(REFS).map(lambda r: {"$ref": r}), REFERRING),
             min_size=1, max_size=3))
RULES = {"oneOf as anyOf of exclusive branches", "properties out of the patternProperties "
         "they match", "type implied by anyOf"}


@pytest.mark.parametrize("dialect, cls", DIALECTS, ids=DIALECT_IDS)
def test_the_rewrites_keep_the_instances_valid(dialect, cls):
    """rewrite_schema's output, with the root's definitions, accepts what the original does."""
    applied: list[bool] = []
    seen: set[str] = set()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.one_of(ONE_OF, NAMED_AND_PATTERNED, TYPED_ANY_OF), ALL_INSTANCES)
    def check(schema, instances):
        root = {**({"$schema": dialect} if dialect else {}), "definitions": DEFS, **schema}
        out = rewrite_schema(root)
        rules = {r for r, _ in out.applied} & RULES
        applied.append(bool(rules))
        seen.update(rules)
        if not rules:
            return
        before, after = validator(root), validator(out.schema)
        for x in [*PROBES, *instances]:
            assert after.is_valid(x) is before.is_valid(x), (root, out.schema, x)

    check()
    _share(applied, 0.3, "rewritten")
    assert seen == RULES, seen


# --- through llguidance ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def _agrees(gemma, compiled, schema, instances) -> None:
    check = validator(schema)
    verdicts = set()
    for x in instances:
        ok = check.is_valid(x)
        verdicts.add(ok)
        assert accepts(gemma.tokenizer, compiled, x) is ok, x
    assert verdicts == {True, False}


JSON_PATCH = {"oneOf": [
    {"properties": {"op": {"enum": ["add", "replace", "test"]}, "path": {"type": "string"},
                    "value": {}},
     "required": ["op", "path", "value"], "additionalProperties": False},
    {"properties": {"op": {"enum": ["remove"]}, "path": {"type": "string"}},
     "required": ["op", "path"], "additionalProperties": False},
    {"properties": {"op": {"enum": ["move", "copy"]}, "from": {"type": "string"},
                    "path": {"type": "string"}},
     "required": ["op", "from", "path"], "additionalProperties": False},
]}


def test_a_json_patch_oneof_compiles_strictly_and_is_exact(gemma, compiler):
    """Three object branches without `type`: every branch accepts every non-object, so the
    oneOf rejects them all; among objects the `op` enums keep the branches apart."""
    out = rewrite_schema(JSON_PATCH)
    assert ("oneOf as anyOf of exclusive branches", "/oneOf") in out.applied
    c = compiler.compile(JsonSchema(JSON_PATCH, strict=True))
    _agrees(gemma, c, JSON_PATCH, [  # keys in schema order, as llguidance writes them
        {"op": "add", "path": "/a", "value": 1}, {"op": "test", "path": "", "value": [None]},
        {"op": "remove", "path": "/a"}, {"op": "move", "from": "/b", "path": "/a"},
        {"op": "copy", "from": "", "path": "/a"},
        {"op": "add", "path": "/a"}, {"op": "remove", "path": "/a", "value": 1},
        {"op": "move", "path": "/a"}, {"op": "patch", "path": "/a"}, {"op": "remove"},
        {"path": "/a"}, {}, "add", 1, 2.5, None, True, [], [{"op": "remove", "path": "/a"}]])
    items = {"type": "array", "items": JSON_PATCH}
    c = compiler.compile(JsonSchema(items, strict=True))
    _agrees(gemma, c, items, [[], [{"op": "remove", "path": "/a"}], ["x"], [1],
                              [{"op": "remove", "path": "/a"}, {"op": "add", "path": "/b"}]])


NODE = {"type": "object", "properties": {
    "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}
NODE_REF = {"$ref": "#/definitions/node"}
NODES = [{}, {"kids": []}, {"kids": [{}, {"kids": [{}]}]}, {"kids": [1]}, {"kids": {}}, 1,
         True, {"kids": [], "z": 1}]


def _named_and_patterned(name: str, value: Any, pattern: str, pattern_value: Any,
                         **more: Any) -> dict[str, Any]:
    return {"definitions": {"node": NODE, "true": {"const": True}}, "type": "object",
            "properties": {name: value}, "patternProperties": {pattern: pattern_value}, **more}


@pytest.mark.parametrize("schema", [
    _named_and_patterned("a", NODE_REF, ".*", NODE_REF),
    # Once not exact (the grammar accepted what jsonschema rejects), one cause each:
    # strings_outside let "" through where the words continue "" with every letter of the
    # class (key ""); Intersection.of called {"const": 1} and {"const": true} the same
    # schema (Python's 1 == True; value true).
    _named_and_patterned("b", NODE_REF, "^[b]+$", NODE_REF, additionalProperties=False),
    _named_and_patterned("a", {"const": 1}, ".*", {"$ref": "#/definitions/true"}),
], ids=["everything", "one-letter-class", "one-is-not-true"])
def test_a_recursive_property_out_of_the_pattern_it_matches(gemma, compiler, schema):
    """properties: {N: S}, patternProperties: {P: T} with P matching N and a $ref in S or T:
    N gets S and T's intersection, P loses N; compiled, judged as jsonschema judges."""
    out = rewrite_schema(schema)
    assert ("properties out of the patternProperties they match", "/patternProperties") \
        in out.applied
    assert all(p not in out.schema["patternProperties"] for p in schema["patternProperties"])
    c = compiler.compile(JsonSchema(schema, strict=True))
    [name] = schema["properties"]
    instances: list[Any] = [{}, "x", [], *({k: n} for k in ["a", "b", "c", "", "ab", "kids"]
                                          for n in NODES)]
    instances += [{name: n, "c": m} for n in NODES[:4] for m in NODES[:4]]
    _agrees(gemma, c, schema, instances)


def test_under_the_guards_a_differing_pattern_schema_is_refused_not_misread(compiler):
    """A limitation, stated: with the default guards both sides get `additionalProperties:
    {$ref: kaname_any}`, which intersect.py cannot meet with the recursive node within its
    depth, so the property is left to llguidance, which refuses the intersection. Without
    guards the rewrite is made and the schema compiles."""
    schema = _named_and_patterned("a", NODE_REF, "^[a-c]*$",
                                  {"type": "object", "required": ["kids"]},
                                  additionalProperties=False)
    assert ("properties out of the patternProperties they match", "/patternProperties") \
        in rewrite_schema(schema).applied
    with pytest.raises(ConstraintError):
        compiler.compile(JsonSchema(schema, strict=True))
    compiler.compile(JsonSchema(schema, strict=True),
                     guards=Guards(max_integer_digits=None, max_fraction_digits=None))


def test_a_pattern_whose_empty_match_is_undone_is_not_rewritten(gemma, compiler):
    """An atomic quantifier and a backreference undo `^(a*+)\\1`'s empty match in "a": once
    read as matching every key (the grammar then accepted {"a": {}}), now not rewritten, and
    what compiles agrees with jsonschema."""
    schema = _named_and_patterned("b", NODE_REF, "^(a*+)\\1", NODE_REF,
                                  additionalProperties=False)
    assert not matches_everything("^(a*+)\\1")
    assert rewrite_schema(schema).applied == []
    try:
        c = compiler.compile(JsonSchema(schema, strict=True))
    except ConstraintError:
        return  # llguidance refuses the regex: a refusal, not a misread
    _agrees(gemma, c, schema, [{"a": {}}, {"b": {}}, {"": {}}, {"b": {"kids": []}}])


def test_a_type_implied_by_a_recursive_anyof_is_dropped(gemma, compiler):
    schema = {"definitions": {"node": NODE}, "type": "object", "anyOf": [NODE_REF]}
    out = rewrite_schema(schema)
    assert ("type implied by anyOf", "/type") in out.applied
    assert "type" not in out.schema
    c = compiler.compile(JsonSchema(schema, strict=True))
    _agrees(gemma, c, schema, [*NODES, "x", [], None, {"kids": [{"kids": "no"}]}])


REPEATED_FORMS = ["^[ab]*$", "^[ab]+$", "^[ab]{2}$", "^([ab]){1,3}$", "^(?:[ab]{2,})$",
                  "^([\\d]{2})$", "^[a\n]+$", "^[\\s.]*$", "^[b-d_]{0,2}$"]


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(REPEATED_FORMS),
       st.lists(st.text(alphabet="ab1 \n.x", max_size=5), min_size=1, max_size=12))
def test_the_complement_of_a_repeated_class(pattern, strings):
    """pattern_complement(P) matches a string exactly when a search for P (Python's re, as
    jsonschema reads it: `$` also before a final newline) fails in it."""
    from kaname.grammar.string_sets import pattern_complement

    failing = pattern_complement(pattern)
    if failing is None:
        assert pattern == "^[a\n]+$" or "\n" in pattern  # C{m,n} with a newline in C only
        return
    assert "[^" not in failing
    for x in strings:
        assert (re.fullmatch(failing, x) is not None) is (re.search(pattern, x) is None), \
            (pattern, x)
