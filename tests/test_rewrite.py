"""Schema rewrites (grammar/rewrite.py): keywords llguidance refuses, enforced exactly.

For each rewrite: (a) the schema was refused (UnsupportedSchemaError naming the keyword) and now
compiles strictly; (b) instances, serialised as json.dumps writes them, are accepted by the
matcher exactly when jsonschema finds them valid against the ORIGINAL schema (hypothesis
generates them); (c) seeded random-logits generation on the rewritten schema only ever stops
on output valid for the original schema. Formats jsonschema does not check are judged by the
independent checkers below (parsers written from the RFCs, not the patterns).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from typing import Any

import jsonschema
import pytest
import rfc3987
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matching import accepts

from kaname.decoding import SamplingParams, decode
from kaname.errors import UnsupportedSchemaError
from kaname.grammar import GrammarCompiler, Guards, JsonSchema
from kaname.grammar.lark import json_expr, start_rule
from kaname.grammar.rewrite import FORMAT_PATTERNS, Rewritten, format_pattern, rewrite_schema

EXAMPLES = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


# --- independent checkers for the formats jsonschema does not check -------------------------


def is_byte(s: str) -> bool:
    """RFC 4648 base64 with padding, by Python's own decoder."""
    if len(s) % 4:
        return False
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def is_json_pointer(s: str) -> bool:
    """RFC 6901: "" or "/"-separated tokens in which "~" is only "~0" or "~1"."""
    if s and not s.startswith("/"):
        return False
    i = 0
    while i < len(s):
        if s[i] == "~":
            if s[i + 1:i + 2] not in ("0", "1"):
                return False
            i += 2
        else:
            i += 1
    return True


def _digits(s: str) -> int:
    n = 0
    while n < len(s) and s[n] in "0123456789":
        n += 1
    return n


def is_relative_json_pointer(s: str, *, index_manipulation: bool) -> bool:
    """draft-handrews-relative-json-pointer-01, or with the index manipulation of
    draft-bhutton-relative-json-pointer-00 (draft 2020-12)."""
    n = _digits(s)
    if n == 0 or (n > 1 and s[0] == "0"):
        return False
    rest = s[n:]
    if rest == "#":
        return True
    if index_manipulation and rest[:1] in ("+", "-") and rest:
        m = _digits(rest[1:])
        if m == 0 or rest[1] == "0":
            return False
        rest = rest[1 + m:]
    return is_json_pointer(rest)


def _ucs_or_private(cp: int) -> bool:
    ranges = [(0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF), (0xE000, 0xF8FF),
              (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]
    ranges += [(p << 16, (p << 16) + 0xFFFD) for p in range(1, 14)] + [(0xE1000, 0xEFFFD)]
    return any(lo <= cp <= hi for lo, hi in ranges)


def _literal(c: str) -> bool:
    cp = ord(c)
    return (cp == 0x21 or 0x23 <= cp <= 0x24 or cp == 0x26 or 0x28 <= cp <= 0x3B or cp == 0x3D
            or 0x3F <= cp <= 0x5B or cp == 0x5D or cp == 0x5F or 0x61 <= cp <= 0x7A
            or cp == 0x7E or _ucs_or_private(cp))


def _pct(s: str, i: int) -> bool:
    return s[i] == "%" and len(s) >= i + 3 and all(c in "0123456789abcdefABCDEF"
                                                   for c in s[i + 1:i + 3])


def _varname(name: str) -> bool:
    for part in name.split("."):
        if not part:
            return False
        i = 0
        while i < len(part):
            if part[i] == "%":
                if not _pct(part, i):
                    return False
                i += 3
            elif part[i].isascii() and (part[i].isalnum() or part[i] == "_"):
                i += 1
            else:
                return False
    return True


def _varspec(spec: str) -> bool:
    if spec.endswith("*"):
        return _varname(spec[:-1])
    if ":" in spec:
        name, length = spec.split(":", 1)
        return (_varname(name) and 1 <= len(length) <= 4 and _digits(length) == len(length)
                and length[0] != "0")
    return _varname(spec)


def is_uri_template(s: str) -> bool:
    """RFC 6570 section 2, by a scanner over its ABNF."""
    i = 0
    while i < len(s):
        if s[i] == "%":
            if not _pct(s, i):
                return False
            i += 3
        elif s[i] == "{":
            j = s.find("}", i)
            if j < 0:
                return False
            body = s[i + 1:j]
            if body[:1] and body[0] in "+#./;?&=,!@|":
                body = body[1:]
            if not all(_varspec(v) for v in body.split(",")):
                return False
            i = j + 1
        elif _literal(s[i]):
            i += 1
        else:
            return False
    return True


FORMAT_CHECKER = jsonschema.FormatChecker()
FORMAT_CHECKER.checks("byte")(is_byte)
FORMAT_CHECKER.checks("json-pointer")(is_json_pointer)
FORMAT_CHECKER.checks("uri-template")(is_uri_template)
# RFC 3986 / 3987 by the rfc3987 package's own regexes (its author's transcription of the
# RFCs, independent of kaname's), the checker jsonschema itself uses when it is installed
for _fmt, _rule in (("uri-reference", "URI_reference"), ("iri", "IRI"),
                    ("iri-reference", "IRI_reference")):
    FORMAT_CHECKER.checks(_fmt)(
        lambda s, rule=_rule: not isinstance(s, str) or rfc3987.match(s, rule=rule) is not None)


def validator(schema: Any) -> Any:
    """jsonschema for the original schema, with the checkers above for the formats it lacks."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    checker = copy.deepcopy(FORMAT_CHECKER)
    checker.checks("relative-json-pointer")(
        lambda s: not isinstance(s, str) or is_relative_json_pointer(
            s, index_manipulation=cls is jsonschema.Draft202012Validator))
    return cls(schema, format_checker=checker)


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiler(gemma):
    return GrammarCompiler(gemma.tokenizer)


def exact(gemma, compiled, schema: Any, value: Any, seen: set[bool] | None = None) -> None:
    """The matcher accepts `value` exactly when jsonschema finds it valid for `schema`
    (`seen` collects the verdicts, so a test can check that it met both)."""
    valid = validator(schema).is_valid(value)
    assert accepts(gemma.tokenizer, compiled, value) is valid, (value, valid)
    if seen is not None:
        seen.add(valid)


def was_refused(gemma, schema: Any, keyword: str | None) -> UnsupportedSchemaError:
    """Without rewrite.py the schema is refused, naming `keyword`."""
    import kaname.grammar.lark as lark

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lark, "rewrite_schema", lambda s: Rewritten(s))
        with pytest.raises(UnsupportedSchemaError) as e:
            GrammarCompiler(gemma.tokenizer).compile(JsonSchema(schema))
    assert e.value.keyword == keyword, e.value
    return e.value


def in_order(order: list[str], value: dict[str, Any]) -> dict[str, Any]:
    """`value` with its keys in schema order: llguidance writes properties in that order, and
    keys that are only `required` in the order listed (README: a documented narrowing)."""
    return {k: value[k] for k in order if k in value}


# --- 1. integers written as decimals -------------------------------------------------------

DECIMALS = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1.0,
                                            "maxLength": 2.0},
                 "minItems": 1.0, "maxItems": 2.0},
        "meta": {"type": "object", "properties": {"a": {"type": "integer"}},
                 "required": ["a"], "minProperties": 1.0, "maxProperties": 1.0},
    },
    "required": ["tags"],
}


def test_decimal_integers_compile_and_are_exact(gemma, compiler):
    assert "Expected positive integer" in str(was_refused(gemma, DECIMALS, None))
    c = compiler.compile(JsonSchema(DECIMALS))
    assert c.schema == DECIMALS and c.schema["properties"]["tags"]["maxItems"] == 2.0
    strings = st.text(alphabet="ab", max_size=3)
    tags = st.lists(strings, max_size=3)

    seen: set[bool] = set()
    @EXAMPLES
    @given(tags, st.booleans())
    def check(value, with_meta):
        instance = {"tags": value, **({"meta": {"a": 1}} if with_meta else {})}
        exact(gemma, c, DECIMALS, instance, seen)

    check()
    assert seen == {True, False}


# --- 2. formats as patterns ----------------------------------------------------------------

# Characters for strings: any, but a raw U+007F, which llguidance refuses in every JSON string
# ({"type": "string"} too; json.dumps does not escape it), so it would test nothing here.
CHARS = st.characters(codec="utf-8", exclude_characters="\x7f")
TRICKY = "/~01#+-={}%,:*.\"\\ 'é_aZ"


def _reference_token() -> st.SearchStrategy[str]:
    return st.lists(st.one_of(CHARS.filter(lambda c: c not in "/~"),
                              st.sampled_from(["~0", "~1"])), max_size=4).map("".join)


JSON_POINTERS = st.lists(_reference_token(), max_size=3).map(
    lambda ts: "".join("/" + t for t in ts))
_NON_NEGATIVE = st.integers(0, 10**6).map(str)
_HEXDIG = st.sampled_from("0123456789abcdefABCDEF")
_PCT = st.tuples(_HEXDIG, _HEXDIG).map(lambda t: "%" + "".join(t))
_VARNAME = st.lists(st.lists(st.one_of(st.sampled_from("azAZ09_"), _PCT), min_size=1,
                             max_size=3).map("".join), min_size=1, max_size=2).map(".".join)
_VARSPEC = st.tuples(_VARNAME, st.one_of(st.just(""), st.just("*"),
                                         st.integers(1, 9999).map(lambda n: f":{n}"))
                     ).map("".join)
_EXPRESSION = st.tuples(st.sampled_from(["", *"+#./;?&=,!@|"]),
                        st.lists(_VARSPEC, min_size=1, max_size=3).map(",".join)
                        ).map(lambda t: "{" + "".join(t) + "}")
_INDEX = st.tuples(st.sampled_from("+-"), st.integers(1, 99).map(str)).map("".join)
# valid instances of each format, built from its RFC's grammar (not from the pattern)
VALID = {
    "byte": st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode()),
    "json-pointer": JSON_POINTERS,
    "relative-json-pointer": st.tuples(
        _NON_NEGATIVE, st.one_of(st.just("#"), JSON_POINTERS)).map("".join),
    "relative-json-pointer-2020": st.tuples(_NON_NEGATIVE, st.one_of(
        st.just("#"), JSON_POINTERS, st.tuples(_INDEX, JSON_POINTERS).map("".join))
    ).map("".join),
    "uri-template": st.lists(st.one_of(CHARS.filter(_literal), _PCT, _EXPRESSION),
                             max_size=5).map("".join),
}
# RFC 3986 parts (section 3), put together as URIs and relative references
_URI_CHAR = st.one_of(st.sampled_from("azAZ09-._~!$&'()*+,;=:@"), _PCT)
_SEGMENT = st.lists(_URI_CHAR, max_size=3).map("".join)
_HOST = st.one_of(st.sampled_from(["example.com", "127.0.0.1", "[::1]", "[2001:db8::7]",
                                   "[v7.x:y]", "", "h%41"]), _SEGMENT.filter(
    lambda s: ":" not in s and "@" not in s))
_URI_TAIL = st.tuples(st.lists(_SEGMENT, max_size=3).map(lambda s: "".join("/" + x for x in s)),
                      st.one_of(st.just(""), _SEGMENT.map(lambda q: "?" + q + "/?")),
                      st.one_of(st.just(""), _SEGMENT.map(lambda f: "#" + f))).map("".join)
_URI = st.tuples(st.sampled_from(["http", "a+b.c-d", "urn"]), st.one_of(
    st.just(":"), _HOST.map(lambda h: "://" + h), _HOST.map(lambda h: "://u:p@" + h + ":80")),
    _URI_TAIL).map("".join)
VALID["uri-reference"] = st.one_of(_URI, _URI_TAIL, _HOST.map(lambda h: "//" + h))
VALID["iri"] = st.tuples(_URI, st.sampled_from(["", "é", "\u4e2d", "%C3%A9"])).map(
    lambda t: t[0] + ("/" + t[1] if t[1] else ""))
VALID["iri-reference"] = st.one_of(VALID["iri"], VALID["uri-reference"])


def near(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Valid values with one tricky character inserted or one character dropped."""
    def edit(t: tuple[str, int, str, bool]) -> str:
        s, i, c, drop = t
        i = i % (len(s) + 1)
        return s[:i] + s[i + 1:] if drop else s[:i] + c + s[i:]
    return st.tuples(valid, st.integers(0, 30), st.sampled_from(TRICKY), st.booleans()).map(edit)


@pytest.mark.parametrize("fmt, dialect", [
    ("byte", None), ("json-pointer", None), ("uri-template", None),
    ("relative-json-pointer", None), ("uri-reference", None), ("iri", None),
    ("iri-reference", None),
    ("relative-json-pointer", "http://json-schema.org/draft-07/schema#"),
])
def test_formats_are_exact_patterns(gemma, compiler, fmt, dialect):
    schema: dict[str, Any] = {"type": "string", "format": fmt}
    if dialect:
        schema["$schema"] = dialect
    assert was_refused(gemma, schema, "format").pointer == "/format"
    c = compiler.compile(JsonSchema(schema))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    pattern = format_pattern(fmt, cls)
    assert pattern is not None and pattern.startswith("^") and pattern.endswith("$")
    assert "no_quote_or_backslash_escapes" not in c.caps  # no negated class: no narrowing

    valid = VALID[fmt + ("-2020" if fmt == "relative-json-pointer" and not dialect else "")]

    seen: set[bool] = set()
    @EXAMPLES
    @given(st.one_of(valid, near(valid), st.text(alphabet=TRICKY, max_size=8)))
    def check(value):
        exact(gemma, c, schema, value, seen)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize("value, ok", [
    ("", True), ("QUJD", True), ("QUI=", True), ("QQ==", True), ("QR==", True),
    ("QQ=", False), ("Q===", False), ("QUJDRA", False), ("QU=D", False), ("QUJD\n", False),
])
def test_byte_examples(gemma, compiler, value, ok):
    c = compiler.compile(JsonSchema({"type": "string", "format": "byte"}))
    assert is_byte(value) is ok
    assert accepts(gemma.tokenizer, c, value) is ok


@pytest.mark.parametrize("value, ok", [
    ("", True), ("/a/b", True), ("/", True), ("//", True), ("/a~0b~1c", True), ("/é\"\\", True),
    ("a", False), ("/~", False), ("/~2", False), ("#/a", False),
])
def test_json_pointer_examples(gemma, compiler, value, ok):
    c = compiler.compile(JsonSchema({"type": "string", "format": "json-pointer"}))
    assert is_json_pointer(value) is ok
    assert accepts(gemma.tokenizer, c, value) is ok


@pytest.mark.parametrize("value, ok", [
    ("http://x/{id}", True), ("{+path}/here", True), ("{var:30}", True), ("{list*}", True),
    ("{x,y.z,%41}", True), ("/{?q,lang}", True), ("", True), ("caf\u00e9", True),
    ("{}", False), ("{x", False), ("x}", False), ("{x:0}", False), ("{x:10000}", False),
    ("{.x.}", False), ("a b", False), ("%4", False), ("{x**}", False),
])
def test_uri_template_examples(gemma, compiler, value, ok):
    c = compiler.compile(JsonSchema({"type": "string", "format": "uri-template"}))
    assert is_uri_template(value) is ok
    assert accepts(gemma.tokenizer, c, value) is ok


def test_formats_the_post_check_does_not_check_are_in_the_caps(compiler):
    """jsonschema has no checker for `byte` (nor, without optional packages, the others): its
    post-check passes any string there, so the pattern is narrower than the post-check and
    the caps say where."""
    schema = {"type": "object", "properties": {
        "blob": {"type": "string", "format": "byte"},
        "when": {"type": "string", "format": "date"},  # llguidance's own: not rewritten
        "raw": {"type": "string", "format": "binary"}}}  # dropped: asserts nothing
    c = compiler.compile(JsonSchema(schema))
    assert c.caps["formats_as_patterns"] == {"at": ["/properties/blob/format"]}
    assert c.validate(json.dumps({"blob": "not base64!"}))  # the post-check's view


def test_format_next_to_a_pattern_needs_both(gemma, compiler):
    schema = {"type": "string", "format": "byte", "pattern": "^QU"}
    c = compiler.compile(JsonSchema(schema))
    for value in ("QUJD", "QUI=", "QQ==", "QUJ", "QU"):
        exact(gemma, c, schema, value)
    assert accepts(gemma.tokenizer, c, "QUJD") and not accepts(gemma.tokenizer, c, "QQ==")


def test_formats_that_assert_nothing_are_dropped(gemma, compiler):
    schema = {"type": "object", "properties": {"f": {"type": "string", "format": "binary"},
                                               "p": {"type": "string", "format": "password"}}}
    was_refused(gemma, schema, "format")
    c = compiler.compile(JsonSchema(schema))
    assert accepts(gemma.tokenizer, c, {"f": "\x00any text", "p": "hunter2"})


def test_formats_without_an_exact_pattern_stay_refused(gemma, compiler):
    for fmt in ("idn-hostname", "idn-email", "regex", "URI", "semver"):
        with pytest.raises(UnsupportedSchemaError) as e:
            compiler.compile(JsonSchema({"type": "string", "format": fmt}))
        assert (e.value.keyword, e.value.pointer) == ("format", "/format")


def test_patterns_are_the_module_table():
    """Every format pattern is anchored and compiles under Python's regex engine too (what
    hypothesis generates from), and the table has no negated classes."""
    import re

    for fmt, pattern in FORMAT_PATTERNS.items():
        re.compile(pattern)
        assert pattern.startswith("^") and pattern.endswith("$") and "[^" not in pattern, fmt


# --- 3. dependencies as anyOf --------------------------------------------------------------

VALUES = st.one_of(st.integers(0, 9), st.sampled_from(["x", "yy"]))


def objects(keys: list[str]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={k: VALUES for k in keys}).map(
        lambda d: in_order(keys, d))


DEPENDENT_REQUIRED = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {}, "c": {}, "d": {"type": "string"}},
    "dependentRequired": {"a": ["b", "c"], "c": ["d"], "d": []},
}
DEPENDENT_SCHEMAS = {
    "type": "object",
    "properties": {"a": {}, "b": {"type": "integer"}, "c": {}},
    "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}, "required": ["b"]},
                         "c": False, "b": True},
}
DRAFT7_DEPENDENCIES = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"a": {}, "b": {"type": "integer"}, "c": {}},
    "additionalProperties": False,
    "dependencies": {"a": ["b"], "b": {"properties": {"b": {"maximum": 4}}}},
}
UNTYPED_DEPENDENCIES = {"dependentRequired": {"a": ["b"]}}  # non-objects pass
DEPENDENCIES_AND_PATTERNS = {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
    "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False,
    "required": ["b"], "dependentRequired": {"a": ["b"], "x1": ["a"], "b": ["b"]},
    "anyOf": [{"required": ["a"]}, {"required": ["x1"]},
              {"properties": {"b": {"type": "string"}}}]}
# A schema dependency is an intersection of object schemas. With number caps on, the guards
# make untyped values the recursive guards.ANY_VALUE, and llguidance 1.9.1 cannot intersect
# that with itself ({"allOf": [ANY, ANY]}: "Schema intersection stack level exceeded"), so
# these two compile only without the caps (with them the original error stays, as for any
# allOf of such objects).
NO_NUMBER_CAPS = Guards(max_integer_digits=None, max_fraction_digits=None)


@pytest.mark.parametrize("schema, keyword, guards", [
    (DEPENDENT_REQUIRED, "dependentRequired", Guards()),
    (DEPENDENT_SCHEMAS, "dependentSchemas", NO_NUMBER_CAPS),
    (DRAFT7_DEPENDENCIES, "dependencies", NO_NUMBER_CAPS),
    (UNTYPED_DEPENDENCIES, "dependentRequired", Guards()),
    (DEPENDENCIES_AND_PATTERNS, "dependentRequired", Guards()),
])
def test_dependencies_compile_and_are_exact(gemma, schema, keyword, guards):
    was_refused(gemma, schema, keyword)
    c = GrammarCompiler(gemma.tokenizer, guards=guards).compile(JsonSchema(schema))

    seen: set[bool] = set()
    @EXAMPLES
    @given(st.one_of(objects([*schema.get("properties", {"a": {}, "b": {}}), "x1"]),
                     VALUES, st.lists(VALUES, max_size=2)))
    def check(value):
        exact(gemma, c, schema, value, seen)

    check()
    assert seen == {True, False}


def test_dependencies_a_dialect_does_not_define_stay_refused(compiler):
    """A schema that names draft 2020-12 has no `dependencies` (jsonschema ignores it
    there): it is not guessed at."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "dependencies": {"a": ["b"]}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("dependencies", "/dependencies")


def test_a_schema_without_dollar_schema_using_dependencies_is_read_as_draft_7(gemma, compiler):
    """No `$schema`, `dependencies` and none of 2019-09's keywords: the author wrote draft 7,
    so the schema is enforced and post-checked as draft 7 (dialect.py); one 2019-09 keyword
    beside it keeps the default, 2020-12, where `dependencies` stays refused."""
    from kaname.grammar.dialect import dialect_of

    schema = {"type": "object", "properties": {"a": {}, "b": {}},
              "dependencies": {"a": ["b"]}}
    assert dialect_of(schema) is jsonschema.Draft7Validator
    c = compiler.compile(JsonSchema(schema))
    for value, ok in [({"a": 1, "b": 2}, True), ({"b": 2}, True), ({"a": 1}, False)]:
        assert accepts(gemma.tokenizer, c, value) is ok, value
        assert c.validate(json.dumps(value)) is ok, value
    newer = {**schema, "$defs": {}}
    assert dialect_of(newer) is jsonschema.Draft202012Validator
    with pytest.raises(UnsupportedSchemaError):
        compiler.compile(JsonSchema(newer))


@pytest.mark.parametrize("schema, pointer", [
    ({"type": "object", "patternProperties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
     "/patternProperties"),
    ({"type": "object", "patternProperties": {"^z$": {}}, "properties": {"x": {
        "type": "object", "patternProperties": {"^x": {"type": "string"}, "y": {}}}}},
     "/properties/x/patternProperties"),
])
def test_overlapping_pattern_properties_are_refused_naming_keyword_and_pointer(compiler, schema,
                                                                             pointer):
    """llguidance's error about the schema as a whole ("patternProperty regexes /^x/ and /y/
    are not disjoint") names the keyword and the subschema holding the regexes."""
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("patternProperties", pointer)
    assert "not disjoint" in str(e.value)


def test_too_many_dependencies_stay_refused_with_pointer_and_reason(compiler):
    keys = [f"k{i}" for i in range(7)]  # 2**7 = 128 combinations, above the bound of 64
    schema = {"type": "object", "properties": {"inner": {
        "type": "object", "properties": {k: {} for k in keys},
        "dependentRequired": {k: [keys[(i + 1) % 7]] for i, k in enumerate(keys)}}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert e.value.keyword == "dependentRequired"
    assert e.value.pointer == "/properties/inner/dependentRequired"
    assert "not rewritten: 128 combinations" in str(e.value)


# --- 4. uniqueItems over a finite domain ---------------------------------------------------

UNIQUE_ENUM = {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True}
UNIQUE_BOUNDED = {"type": ["array", "null"], "items": {"type": "integer", "enum": [1, 2, 3, 4]},
                  "uniqueItems": True, "minItems": 1, "maxItems": 2}
UNIQUE_BOOLEANS = {"type": "object", "properties": {
    "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}}}
UNIQUE_MIXED = {"type": "array", "items": {"enum": [1, True, "1", None, 7], "maximum": 5},
                "uniqueItems": True, "maxItems": 3}  # true, 1 and "1" are three values


@pytest.mark.parametrize("schema", [UNIQUE_ENUM, UNIQUE_BOUNDED, UNIQUE_BOOLEANS, UNIQUE_MIXED])
def test_unique_items_over_finite_domains(gemma, compiler, schema):
    was_refused(gemma, schema, "uniqueItems")
    c = compiler.compile(JsonSchema(schema))
    items = st.lists(st.sampled_from(["x", "y", "z", "w", 1, 2, 3, 5, 7, True, False, "1", None]),
                     max_size=4)
    values = items if "properties" not in schema else st.builds(lambda v: {"flags": v}, items)

    seen: set[bool] = set()
    @EXAMPLES
    @given(st.one_of(values, st.none(), st.just("x")))
    def check(value):
        exact(gemma, c, schema, value, seen)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize("schema, why", [
    ({"type": "array", "items": {"enum": list("abcdef")}, "uniqueItems": True},
     "more than 256 duplicate-free arrays of 6 values"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
     "not a finite set of values"),
])
def test_unique_items_beyond_the_bound_stay_refused(compiler, schema, why):
    wrapped = {"type": "object", "properties": {"tags": schema}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(wrapped))
    assert (e.value.keyword, e.value.pointer) == ("uniqueItems", "/properties/tags/uniqueItems")
    assert why in str(e.value)


def test_no_op_keywords_are_dropped(gemma, compiler):
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "string"}, "uniqueItems": False},
        "b": {"type": "array", "items": {"type": "string"}, "maxItems": 1, "uniqueItems": True},
        "c": {"type": "array", "items": {"type": "integer"}, "minContains": 2},
    }}
    was_refused(gemma, schema, "uniqueItems")
    c = compiler.compile(JsonSchema(schema))
    for value in ({"a": ["s", "s"], "b": ["s"], "c": [1]}, {"b": ["s", "t"]}, {"b": []}):
        exact(gemma, c, schema, value)


# --- 5. contains over bounded arrays -------------------------------------------------------

CONTAINS = {"type": "array", "items": {"type": "integer"}, "maxItems": 4,
            "contains": {"minimum": 5}}
MIN_CONTAINS = {"type": "array", "items": {"type": "integer"}, "maxItems": 4,
                "contains": {"minimum": 5}, "minContains": 2, "maxContains": 4}
CONTAINS_UNTYPED = {"maxItems": 3, "contains": {"const": 7}}
CONTAINS_DRAFT7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
                   "items": {"type": "integer", "maximum": 7}, "maxItems": 3,
                   "contains": {"enum": [5, 6]}}
CONTAINS_2019 = {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "array",
                 "items": {"type": "integer"}, "maxItems": 4, "contains": {"minimum": 5},
                 "minContains": 2}


@pytest.mark.parametrize("schema", [CONTAINS, MIN_CONTAINS, CONTAINS_UNTYPED, CONTAINS_DRAFT7,
                                    CONTAINS_2019])
def test_contains_on_bounded_arrays(gemma, compiler, schema):
    was_refused(gemma, schema, "contains")
    c = compiler.compile(JsonSchema(schema))

    seen: set[bool] = set()
    @EXAMPLES
    @given(st.one_of(st.lists(st.integers(0, 9), max_size=5), st.just("x"), st.none()))
    def check(value):
        exact(gemma, c, schema, value, seen)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize("schema, why", [
    ({"type": "array", "contains": {"const": 1}}, "contains on arrays without maxItems"),
    ({"type": "array", "maxItems": 3, "contains": {"const": 1}, "maxContains": 1},
     "maxContains below maxItems"),
    ({"type": "array", "maxItems": 9, "minContains": 4, "contains": {"const": 1}},
     "126 position sets"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "maxItems": 3,
      "items": [{"type": "string"}], "contains": {"const": 5}}, "contains next to tuple items"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "maxItems": 3,
      "minContains": 2, "contains": {"const": 5}}, "minContains is not a keyword"),
])
def test_contains_that_stays_refused(compiler, schema, why):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("contains", "/contains")
    assert f"not rewritten: {why}" in str(e.value)


# --- 7. propertyNames ------------------------------------------------------------------------

NAMES_ENUM = {"type": "object", "properties": {"a": {"type": "integer"}, "zz": {}},
              "additionalProperties": {"type": "string"},
              "propertyNames": {"enum": ["a", "b", "zz"], "maxLength": 1}}
NAMES_PATTERN = {"type": "object", "properties": {"a": {"type": "integer"}, "B": {}},
                 "required": ["a"], "propertyNames": {"pattern": "^[a-z]+$"}}
NAMES_LENGTH = {"properties": {"a": {"type": "integer"}, "yyy": {"type": "string"}},
                "propertyNames": {"type": "string", "maxLength": 2}}  # non-objects pass
NAMES_NONE = {"type": "object", "propertyNames": False}


@pytest.mark.parametrize("schema", [NAMES_ENUM, NAMES_PATTERN, NAMES_LENGTH, NAMES_NONE])
def test_property_names_are_the_keys_allowed(gemma, compiler, schema):
    was_refused(gemma, schema, "propertyNames")
    c = compiler.compile(JsonSchema(schema))
    keys = [*schema.get("properties", {}), "b", "B", "yyy", "x1"]

    seen: set[bool] = set()
    @EXAMPLES
    @given(st.one_of(objects(keys), VALUES))
    def check(value):
        exact(gemma, c, schema, value, seen)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize("names, why", [
    ({"pattern": "^a", "maxLength": 3}, "only enum / const, or a pattern or length bounds"),
    ({"format": "email"}, "only enum / const, or a pattern or length bounds"),
])
def test_property_names_that_stay_refused(compiler, names, why):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema({"type": "object", "propertyNames": names}))
    assert (e.value.keyword, e.value.pointer) == ("propertyNames", "/propertyNames")
    assert f"not rewritten: {why}" in str(e.value)
    beside = {"type": "object", "additionalProperties": {"type": "integer"},
              "propertyNames": {"pattern": "^a"}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(beside))
    assert "a pattern beside an additionalProperties schema" in str(e.value)


# --- the user's schema, lenient compiles, the chat path --------------------------------------

ALL = [(DECIMALS, Guards()), ({"type": "string", "format": "byte"}, Guards()),
       (DEPENDENT_REQUIRED, Guards()), (DEPENDENT_SCHEMAS, NO_NUMBER_CAPS),
       (DRAFT7_DEPENDENCIES, NO_NUMBER_CAPS), (DEPENDENCIES_AND_PATTERNS, Guards()),
       (UNIQUE_ENUM, Guards()), (UNIQUE_BOUNDED, Guards()), (CONTAINS, Guards()),
       (MIN_CONTAINS, Guards()), (CONTAINS_DRAFT7, Guards()), (CONTAINS_2019, Guards())]


def test_the_users_schema_is_untouched(gemma):
    for schema, guards in ALL:
        before = copy.deepcopy(schema)
        r = rewrite_schema(schema)
        assert r.changed and schema == before
        c = GrammarCompiler(gemma.tokenizer, guards=guards).compile(JsonSchema(schema))
        assert schema == before and c.schema == before  # the post-check's schema


def test_lenient_compiles_enforce_the_rewritten_and_report_the_rest(gemma, compiler):
    schema = {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "dependentRequired": {"a": ["b"]}}
    c = compiler.compile(JsonSchema(schema, strict=False))
    assert [(n.keyword, n.pointer) for n in c.not_enforced] == [
        ("uniqueItems", "/properties/tags/uniqueItems")]
    assert accepts(gemma.tokenizer, c, {"a": 1, "b": 2}) and accepts(gemma.tokenizer, c, {})
    assert not accepts(gemma.tokenizer, c, {"a": 1})  # enforced, not only post-checked
    assert accepts(gemma.tokenizer, c, {"tags": ["s", "s"]}) and not c.validate(
        json.dumps({"tags": ["s", "s"]}))


def test_the_error_names_what_still_blocks(compiler):
    """Rewritten keywords are not named; what stays refused is, with why it was not
    rewritten."""
    schema = {"type": "object", "properties": {"a": {"not": {"pattern": "^a"}}},
              "dependentRequired": {"a": ["b"]}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("not", "/properties/a/not")
    schema = {"type": "object", "properties": {
        "few": {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
        "many": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("uniqueItems", "/properties/many/uniqueItems")
    assert "'/properties/many/uniqueItems'" in str(e.value)
    assert "not rewritten: uniqueItems over items that are not a finite set" in str(e.value)


def test_a_rewrite_llguidance_cannot_build_is_not_made(gemma, compiler):
    """Here the dependency's schema meets the object's own recursive additionalProperties in an
    intersection, past llguidance's intersection depth: strictly the original error stays, and
    leniently (the chat path too) the schema compiles as before, the keyword reported."""
    t = {"$ref": "#/$defs/t"}
    schema = {"$defs": {"t": {"anyOf": [{"type": "null"},
                                        {"type": "object", "additionalProperties": t}]}},
              "type": "object", "additionalProperties": t,
              "dependentSchemas": {"a": {"additionalProperties": t}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile(JsonSchema(schema))
    assert (e.value.keyword, e.value.pointer) == ("dependentSchemas", "/dependentSchemas")
    c = compiler.compile(JsonSchema(schema, strict=False))
    assert [(n.keyword, n.pointer) for n in c.not_enforced] == [
        ("dependentSchemas", "/dependentSchemas")]
    assert json_expr(schema, Guards(), strict=False) in c.grammar


def test_every_json_expr_is_rewritten(gemma):
    """Tool schemas in chat grammars go through json_expr, not the compiler: they get the same
    rewrites (a tool the compiler accepts must not fail in the chat grammar)."""
    import llguidance as llg

    for schema, guards in ALL:
        lark = start_rule(json_expr(schema, guards))
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(
            llg.LLMatcher.grammar_from_lark(lark), gemma.tokenizer)
        assert not is_error, (schema, messages[:1])


# --- (c) random logits on the rewritten schemas ----------------------------------------------

GENERATED = [
    (DECIMALS, Guards()), (DEPENDENT_REQUIRED, Guards()), (DEPENDENT_SCHEMAS, NO_NUMBER_CAPS),
    (DRAFT7_DEPENDENCIES, NO_NUMBER_CAPS), (UNIQUE_ENUM, Guards()), (UNIQUE_BOUNDED, Guards()),
    (UNIQUE_BOOLEANS, Guards()), (CONTAINS, Guards()), (MIN_CONTAINS, Guards()),
    (CONTAINS_DRAFT7, Guards()), (CONTAINS_2019, Guards()), (DEPENDENCIES_AND_PATTERNS, Guards()),
    (UNIQUE_MIXED, Guards()), (NAMES_ENUM, Guards()), (NAMES_PATTERN, Guards()),
    (NAMES_LENGTH, Guards(max_string_length=8)),
    ({"type": "object", "properties": {"blob": {"type": "string", "format": "byte"},
                                       "ptr": {"type": "string", "format": "json-pointer"},
                                       "tpl": {"type": "string", "format": "uri-template"}},
      "required": ["blob", "ptr", "tpl"]}, Guards(max_string_length=12)),
    # not / if / oneOf through the complement (complement.py)
    ({"type": "object", "properties": {
        "role": {"type": "string", "maxLength": 6, "not": {"enum": ["admin", "root", ""]}},
        "n": {"type": "integer", "not": {"maximum": 2}}},
      "required": ["role", "n"], "additionalProperties": False}, Guards()),
    ({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
      "required": ["kind"], "additionalProperties": False,
      "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["n"]},
      "else": {"properties": {"n": {"maximum": 0}}}}, Guards()),
    ({"type": "array", "maxItems": 3, "items": {"oneOf": [
        {"type": "number", "minimum": 0}, {"type": "number", "maximum": 5},
        {"type": "string", "maxLength": 3}]}}, Guards()),
    # the kinds and keys of oneOf branches (disjoint.py), finite oneOfs, patterns and names
    ({"type": "array", "maxItems": 3, "items": {"oneOf": [  # json-patch: objects only
        {"properties": {"op": {"enum": ["add"]}, "v": {"type": "integer"}},
         "required": ["op", "v"], "additionalProperties": False},
        {"properties": {"op": {"enum": ["remove"]}}, "required": ["op"],
         "additionalProperties": False}]}}, Guards()),
    ({"type": "object", "maxProperties": 2, "oneOf": [  # closed branches sharing a key
        {"properties": {"p": {"type": "boolean"}, "o": {"type": "boolean"}},
         "required": ["p"], "additionalProperties": False},
        {"properties": {"p": {"type": "boolean"}, "r": {"type": "null"}},
         "required": ["p"], "additionalProperties": False}]}, Guards()),
    ({"oneOf": [{"enum": [[1], [1, 2], "x"]}, {"enum": [[1], "y"]}]}, Guards()),
    ({"type": "object", "properties": {"tag": {"type": "string", "maxLength": 4,
                                               "not": {"pattern": "^[a-z]{1,2}$"}}},
      "required": ["tag"], "additionalProperties": False}, Guards()),
    ({"type": "object", "minProperties": 1,  # minProperties as anyOf
      "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}},
      "additionalProperties": False}, Guards()),
    ({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
      "$defs": {"base": {"properties": {"a": {"type": "boolean"}}}},
      "allOf": [{"$ref": "#/$defs/base"}], "properties": {"b": {"type": "null"}},
      "unevaluatedProperties": False}, Guards()),
    ({"definitions": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/definitions/node"}}},
        "additionalProperties": False}},
      "type": "object", "properties": {"a": {"$ref": "#/definitions/node"}},
      "patternProperties": {"^[ab]$": {"$ref": "#/definitions/node"}},
      "additionalProperties": False}, Guards(max_depth=2)),
    ({"type": "object", "definitions": {"names": {"enum": ["a", "b"]}},
      "propertyNames": {"$ref": "#/definitions/names"},
      "patternProperties": {".*": {"type": "boolean"}}}, Guards()),
]


def test_random_logits_outputs_validate_against_the_original(gemma, random_runtime):
    outcomes: dict[str, int] = {}
    invalid = []
    for i, (schema, guards) in enumerate(GENERATED):
        c = GrammarCompiler(gemma.tokenizer, guards=guards).compile(JsonSchema(schema))
        check = validator(schema)
        for seed in range(5):
            random_runtime.seed = 7000 + 10 * i + seed
            # odd seeds sample (the lazy rejection path), even ones are greedy
            params = SamplingParams(temperature=0.5, seed=seed) if seed % 2 else SamplingParams()
            d = decode(random_runtime, [2], c.new_matcher(), params, max_tokens=128)
            outcomes[d.finish_reason] = outcomes.get(d.finish_reason, 0) + 1
            if d.finish_reason == "stop" and not (check.is_valid(json.loads(d.text))
                                                  and c.validate(d.text)):
                invalid.append((i, seed, d.text))
    assert not invalid, invalid
    assert outcomes.get("stop", 0) >= 0.8 * sum(outcomes.values()), outcomes
