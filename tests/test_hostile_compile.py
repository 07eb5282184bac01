"""Constraints whose compile would cost the process its memory are refused fast, with a 400
naming the keyword, its pointer and the limit; an llguidance panic is never a client's text.

The compiles that once took the server past 16 GB run in a child process under an
address-space cap (capped.py): a regression fails the test, not the machine."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from capped import in_capped_child

from kaname.errors import GrammarTooComplexError
from kaname.grammar.compiler import GrammarCompiler, accepts
from kaname.grammar.constraints import JsonSchema
from kaname.grammar.costs import MAX_OPTIONAL_BESIDE_MIN_PROPERTIES, cost_error
from kaname.grammar.rewrite import MAX_FIRST_PRESENT


def names_schema(n: int, **more: Any) -> dict[str, Any]:
    """The issue's schema: any object with at least one key, its keys from an enum of n."""
    return {"type": "object", "propertyNames": {"enum": [f"name{i:05d}" for i in range(n)]},
            "minProperties": 1, **more}


@pytest.mark.parametrize("n", [MAX_FIRST_PRESENT + 1, 1_000, 20_000])
def test_a_property_names_enum_beside_min_properties_is_refused_fast(n):
    result = in_capped_child(f"""
        compiler = GrammarCompiler(tokenizer, cache_bytes=0)
        schema = {json.dumps(names_schema(n))}
        start = time.monotonic()
        try:
            compiler.compile(JsonSchema(schema, strict=True))
            out = {{"compiled": True}}
        except Exception as e:
            out = {{"error": type(e).__name__, "message": str(e), "keyword": e.keyword,
                   "pointer": e.pointer}}
        out["seconds"] = time.monotonic() - start
        print(json.dumps(out))
    """)
    assert result.get("error") == "GrammarTooComplexError", result
    assert (result["keyword"], result["pointer"]) == ("minProperties", "/minProperties")
    assert str(MAX_FIRST_PRESENT) in result["message"]
    assert "panic" not in result["message"] and "backtrace" not in result["message"]
    assert result["seconds"] < 5, result


def test_the_same_schema_lenient_compiles_and_reports_property_names():
    """Without strict, the rewrite that would cost too much is not made: the schema compiles
    as written, its propertyNames reported as not enforced (and post-checked)."""
    result = in_capped_child(f"""
        compiler = GrammarCompiler(tokenizer, cache_bytes=0)
        schema = {json.dumps(names_schema(20_000))}
        start = time.monotonic()
        c = compiler.compile(JsonSchema(schema, strict=False))
        print(json.dumps({{"seconds": time.monotonic() - start,
                          "not_enforced": [[n.keyword, n.pointer] for n in c.not_enforced],
                          "valid": [c.validate(t) for t in
                                    ('{{"name00007": 1}}', '{{"other": 1}}', '{{}}')]}}))
    """)
    assert ["propertyNames", "/propertyNames"] in result["not_enforced"], result
    assert result["valid"] == [True, False, False]
    assert result["seconds"] < 5, result


@pytest.mark.parametrize("k", [1, 33, 64, MAX_FIRST_PRESENT])
@pytest.mark.parametrize("shape", ["property_names", "closed", "open"])
def test_below_the_limit_at_least_one_key_is_enforced(gemma, k, shape):
    """Up to MAX_FIRST_PRESENT optional properties, minProperties is enforced and decodes:
    one key, two keys and all keys are taken, {} is not (llguidance's own construction, and
    `required: [p]` branches, stopped at the first token from ~36-44: max_items_in_row)."""
    names = [f"name{i:05d}" for i in range(k)]
    schema: dict[str, Any] = {
        "property_names": names_schema(k),
        "closed": {"type": "object", "additionalProperties": False, "minProperties": 1,
                   "properties": {n: {"type": "string"} for n in names}},
        "open": {"type": "object", "minProperties": 1,
                 "properties": {n: {"type": "string"} for n in names}},
    }[shape]
    c = GrammarCompiler(gemma.tokenizer, cache_bytes=0).compile(JsonSchema(schema, strict=True))
    assert c.not_enforced == ()
    texts = {f'{{"{names[-1]}": "a"}}': True, "{}": False, '{"other": "a"}': shape == "open",
             "{" + ", ".join(f'"{n}": "a"' for n in names) + "}": True}
    if k > 1:
        texts[f'{{"{names[0]}": "a", "{names[-1]}": "b"}}'] = True
    for text, ok in texts.items():
        assert accepts(c, gemma.tokenizer, text) == ok, (text[:80], c.validate(text))
        assert c.validate(text) == ok


def test_the_cost_check_counts_optional_properties_of_closed_objects():
    k = MAX_OPTIONAL_BESIDE_MIN_PROPERTIES
    props = {f"p{i}": {"type": "string"} for i in range(k + 5)}
    closed = {"type": "object", "properties": props, "additionalProperties": False}
    assert cost_error({**closed, "minProperties": 1, "required": list(props)[:5]}) is None
    assert cost_error(closed) is None  # no minProperties: linear
    assert cost_error({**closed, "minProperties": 1, "additionalProperties": True}) is None
    error = cost_error({"$defs": {"d": {**closed, "minProperties": 1}}})
    assert isinstance(error, GrammarTooComplexError)
    assert error.pointer == "/$defs/d/minProperties"
    assert f"the limit is {k} here, {MAX_FIRST_PRESENT} beside" in error.message


def test_past_what_the_rewrite_takes_the_schema_is_refused(gemma):
    compiler = GrammarCompiler(gemma.tokenizer, cache_bytes=0)
    props = {f"p{i}": {"type": "integer"} for i in range(MAX_FIRST_PRESENT + 1)}
    for extra in ({}, {"maxProperties": 3}):
        with pytest.raises(GrammarTooComplexError) as e:
            compiler.compile(JsonSchema({"type": "object", "additionalProperties": False,
                                         "minProperties": 1, "properties": props, **extra}))
        assert (e.value.keyword, e.value.pointer) == ("minProperties", "/minProperties")
    many = {f"p{i}": {"type": "integer"} for i in range(MAX_OPTIONAL_BESIDE_MIN_PROPERTIES + 1)}
    with pytest.raises(GrammarTooComplexError):  # beside maxProperties, no rewrite: 32
        compiler.compile(JsonSchema({"type": "object", "additionalProperties": False,
                                     "minProperties": 1, "maxProperties": 3,
                                     "properties": many}))


def test_an_llguidance_panic_is_a_400_naming_the_limit(gemma, monkeypatch):
    """Past the cost check (disabled here), llguidance's symbol table overflows and it
    panics: the error names the limit and carries neither the panic nor its backtrace."""
    import kaname.grammar.lark as lark

    monkeypatch.setattr(lark, "cost_error", lambda *a, **k: None)
    compiler = GrammarCompiler(gemma.tokenizer, cache_bytes=0)
    schema = {"type": "object", "additionalProperties": False, "minProperties": 1,
              "properties": {f"name{i:05d}": {"type": "string"} for i in range(170)}}
    with pytest.raises(GrammarTooComplexError) as e:
        compiler.compile(JsonSchema(schema, strict=True))
    assert "65,535" in e.value.message
    assert "panic" not in e.value.message and "backtrace" not in e.value.message


def test_limit_error_never_quotes_a_panic():
    from kaname.grammar.compiler import limit_error

    e = limit_error("panic: index out of bounds: the len is 3 but the index is 7\n"
                    "<backtrace>\n   0: <unknown>\n   1: <unknown>")
    assert e is not None and "index out of bounds" not in e.message
    assert "<unknown>" not in e.message


def test_the_server_answers_the_schema_with_a_400_and_keeps_serving():
    from fastapi.testclient import TestClient

    from kaname.cli import _runtime_for_format
    from kaname.server import ServerConfig, build_app

    app = build_app(ServerConfig(model="random", format="hermes"), _runtime_for_format)
    body = {"model": "random", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "keys", "strict": True, "schema": names_schema(20_000)}}}
    with TestClient(app, raise_server_exceptions=False) as client:
        start = time.monotonic()
        r = client.post("/v1/chat/completions", json=body)
        assert time.monotonic() - start < 10
        assert r.status_code == 400, r.text[:300]
        err = r.json()["error"]
        assert err["code"] == "grammar_too_complex", err
        assert err["param"].endswith("/minProperties"), err
        assert client.get("/health").status_code == 200


# ---- a long forced run: computed once, in the budget's child --------------------------------

class CountingMatcher:
    """llguidance's matcher, counting its forced-bytes computations."""

    def __init__(self, inner: Any):
        self.inner, self.computed = inner, 0

    def compute_ff_bytes(self) -> Any:
        self.computed += 1
        return self.inner.compute_ff_bytes()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_long_forced_run_is_computed_in_the_child_and_kept(gemma):
    """llguidance computes forced bytes holding the GIL (0.55 s for a 1 MB literal: /health
    stalled 0.64-0.95 s per request, scripts/bench_loop_stall.py). The first run comes from
    the budget's child, and what is left of it after tokens that spell its start is kept: a
    request computes none, and what it is given is what llguidance says."""
    from kaname.grammar.constraints import Choice
    from kaname.grammar.matcher import Matcher

    literal = "ab" * 20_000 + "c"
    compiled = GrammarCompiler(gemma.tokenizer, cache_bytes=0).compile(Choice([literal]))
    assert compiled.first_forced == literal.encode()
    fresh = compiled.new_matcher()
    counting = CountingMatcher(fresh.llg)
    m = Matcher(counting, compiled.first_mask, compiled.spellings,  # type: ignore[arg-type]
                forced=compiled.first_forced)
    truth = compiled.new_matcher()
    tokens = gemma.tokenizer.tokenize_str(literal)
    for i in range(0, 40, 4):
        assert m.forced_bytes() == bytes(truth.llg.compute_ff_bytes()) == literal.encode()[
            len(gemma.tokenizer.decode_bytes(tokens[:i])):]
        assert m.accept_tokens(tokens[i:i + 4]) and truth.accept_tokens(tokens[i:i + 4])
    assert counting.computed == 0
    m.rollback(4)  # a rollback forgets the run: llguidance is asked again
    assert m.forced_bytes() == literal.encode()[len(gemma.tokenizer.decode_bytes(tokens[:36])):]
    assert counting.computed == 1


def test_a_draft_of_a_long_run_tokenizes_only_what_it_can_reach(gemma):
    from kaname.decoding.drafts import Drafter
    from kaname.grammar.constraints import Choice

    literal = "ab" * 20_000 + "c"
    compiled = GrammarCompiler(gemma.tokenizer, cache_bytes=0).compile(Choice([literal]))
    drafter = Drafter(gemma.tokenizer, [])
    draft = drafter.propose(compiled.new_matcher(), 8)
    assert 0 < len(draft.tokens) <= 8
    spelled = gemma.tokenizer.decode_bytes(draft.tokens)
    assert literal.encode().startswith(spelled)


def test_property_names_beside_a_ref_follow_the_dialect(gemma):
    """In drafts 4-7 a `$ref` hides its siblings: the enum beside it is not the names."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "definitions": {"n": {"type": "string", "maxLength": 3}},
              "properties": {"a": {}, "b": {}},
              "propertyNames": {"$ref": "#/definitions/n", "enum": ["a"]}}
    c = GrammarCompiler(gemma.tokenizer, cache_bytes=0).compile(
        JsonSchema(schema, strict=True))
    for text, ok in (('{"b": 1}', True), ('{"a": 1}', True), ('{"long": 1}', False)):
        assert c.validate(text) == ok, text
        assert accepts(c, gemma.tokenizer, text) == ok, text


def test_the_post_check_reads_no_nan():
    from kaname.grammar.postcheck import exact_validator, is_valid, json_object_valid

    v = exact_validator({"type": "number", "maximum": 2, "multipleOf": 0.5})
    assert [is_valid(v, t) for t in ("NaN", "Infinity", "-Infinity", "1.5")] == [
        False, False, False, True]
    assert json_object_valid('{"a": NaN}') is False


def test_lenient_leaves_a_costly_min_properties_out_and_says_so(gemma):
    """strict=false: enforce what can be, report the rest. Beside maxProperties (no rewrite),
    minProperties over 33 optional properties is left out of the grammar, named in
    not_enforced, and the post-check still holds the answer to it."""
    props = {f"p{i}": {"type": "integer"} for i in range(MAX_OPTIONAL_BESIDE_MIN_PROPERTIES + 1)}
    schema = {"type": "object", "additionalProperties": False, "minProperties": 1,
              "maxProperties": 3, "properties": props}
    compiler = GrammarCompiler(gemma.tokenizer, cache_bytes=0)
    c = compiler.compile(JsonSchema(schema, strict=False))
    assert [(n.keyword, n.pointer) for n in c.not_enforced] == [
        ("minProperties", "/minProperties")]
    assert accepts(c, gemma.tokenizer, "{}") and c.validate("{}") is False
    assert accepts(c, gemma.tokenizer, '{"p3": 1}') and c.validate('{"p3": 1}') is True
    with pytest.raises(GrammarTooComplexError):
        compiler.compile(JsonSchema(schema, strict=True))
