"""Runaway guards narrow the schema only, and say where they did."""

from __future__ import annotations

import json

import jsonschema
import pytest
from matching import accepts

from kaname.decoding import SamplingParams, decode
from kaname.formats import (
    FORMATS,
    TurnRequest,
    build_grammar,
    get_format,
    parse,
    render_assistant,
    tools_from_openai,
)
from kaname.grammar import GrammarCompiler, Guards, JsonSchema, Lark
from kaname.grammar.guards import apply_guards
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.synthetic import synthetic_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "qty": {"type": "integer"},
        "price": {"type": "number", "minimum": 0},
        "big": {"type": "integer", "minimum": 10**20},
        "step": {"type": "number", "multipleOf": 0.5, "maximum": 10},
        "name": {"type": "string"},
        "code": {"type": "string", "maxLength": 3},
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
    assert props["list"]["maxItems"] == 12 and props["short"]["maxItems"] == 2
    # untyped values (no additionalProperties, arrays without items) are bounded too, and the
    # caps name those places rather than kaname's own any-value definition
    untyped = ["/additionalProperties", "/properties/list/items", "/properties/short/items"]
    assert g.applied["untyped_values"]["at"] == untyped
    assert g.applied["max_array_items"]["at"] == ["/properties/list", *untyped]
    assert "/properties/qty" in g.applied["max_integer_digits"]["at"]
    assert set(untyped) <= set(g.applied["max_integer_digits"]["at"])
    assert g.applied["max_string_length"]["at"] == ["/properties/name", *untyped]
    assert SCHEMA["properties"]["qty"] == {"type": "integer"}  # the caller's dict is untouched


def test_guards_leave_not_if_and_one_of_whole():
    """Narrowing under `not` would widen, and under `if` / `oneOf` too; rewrite.py then says
    these with allOf, where llguidance cannot intersect the recursive any-value, so a schema
    that has them keeps its untyped values unbounded (the typed caps still apply)."""
    schema = {**SCHEMA, "properties": {
        **SCHEMA["properties"], "neg": {"not": {"type": "integer"}},
        "any": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "cond": {"if": {"type": "integer"}, "then": {"maximum": 3}}}}
    g = apply_guards(schema, Guards())
    props = g.schema["properties"]
    for name in ("neg", "any", "cond"):
        assert props[name] == schema["properties"][name], name
    assert "untyped_values" not in g.applied
    assert props["qty"]["maximum"] == 10**15 - 1


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
        accepted = m.accept_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()
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
    assert (m.accept_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()) is ok


@pytest.mark.parametrize("pattern, value", [("^[^\\\\]*$", "a\\b"), ('^[^"]*$', 'a"b'),
                                            ("^[A-Za-z0-9_][^<>*#.%&:\\\\+?/]*$", "a\\b")])
def test_negated_pattern_classes_exclude_escaped_characters(gemma, pattern, value):
    """llguidance 1.9.1 alone accepts these (a negated class matches the JSON escape); the
    random-logits property test found it on a JSONSchemaBench schema."""
    c = GrammarCompiler(gemma.tokenizer).compile(JsonSchema({"type": "string",
                                                             "pattern": pattern}))
    m = c.new_matcher()
    text = json.dumps(value)
    assert not (m.accept_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting())
    assert c.validate(text) is False
    assert c.caps["no_quote_or_backslash_escapes"]["at"] == ["/pattern"]
    m = c.new_matcher()
    assert m.accept_tokens(gemma.tokenizer.tokenize_str('"ab"')) and m.is_accepting()


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
        assert (m.accept_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()) \
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
        return m.accept_tokens(gemma.tokenizer.tokenize_str(text)) and m.is_accepting()

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


# a query tree, as pydantic writes a recursive model: nothing bounds how deep it nests
TREE = {"$defs": {"Node": {"type": "object", "properties": {
    "op": {"enum": ["and", "or", "leaf"]},
    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
    "required": ["op"], "additionalProperties": False}}, "$ref": "#/$defs/Node"}
# mutual recursion through an optional branch: A holds an optional B, B a list of A
MUTUAL = {"$defs": {
    "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}},
          "additionalProperties": False},
    "B": {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/A"}}},
          "additionalProperties": False}}, "$ref": "#/$defs/A"}


def _tree(depth: int) -> dict:
    return {"op": "leaf"} if depth == 0 else {"op": "and", "children": [_tree(depth - 1),
                                                                        {"op": "leaf"}]}


def _mutual(depth: int) -> dict:
    return {} if depth == 0 else {"b": {"a": [_mutual(depth - 1)]}}


def _accepts(gemma, compiled, value) -> bool:
    m = compiled.new_matcher()
    return m.accept_tokens(gemma.tokenizer.tokenize_str(json.dumps(value))) and m.is_accepting()


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize(("schema", "instance", "ref_at"), [
    (TREE, _tree, ["/$defs/Node/properties/children/items/$ref"]),
    (MUTUAL, _mutual, ["/$defs/A/properties/b/$ref", "/$defs/B/properties/a/items/$ref"]),
])
def test_recursive_refs_are_followed_at_most_max_depth_times(gemma, depth, schema, instance,
                                                             ref_at):
    """Up to the cap every nesting the schema allows is accepted, one more is not; what is
    accepted is valid for the schema as given, and the cap says where it cut."""
    compiled = GrammarCompiler(gemma.tokenizer, guards=Guards(max_depth=depth)).compile(
        JsonSchema(schema, strict=True))
    assert compiled.caps["max_depth"] == {"value": depth, "at": ref_at}
    validator = jsonschema.Draft202012Validator(schema)
    for d in range(depth + 3):
        value = instance(d)
        assert validator.is_valid(value)
        # one recursive reference is followed per level (MUTUAL's level is two of them)
        hops = d if schema is TREE else 2 * d
        assert _accepts(gemma, compiled, value) is (hops <= depth), (d, value)
    # without the cap, the schema is compiled as it is (no copies, nothing reported)
    plain = GrammarCompiler(gemma.tokenizer).compile(JsonSchema(schema, strict=True))
    assert "max_depth" not in plain.caps and _accepts(gemma, plain, instance(depth + 2))


def test_recursion_where_cutting_would_widen_is_left_alone():
    """Under `not` (or `oneOf`, `if`) a `false` branch would let more through: not unrolled."""
    schema = {"$defs": {"N": {"type": "object", "properties": {
        "n": {"oneOf": [{"$ref": "#/$defs/N"}, {"type": "integer"}]}}}}, "$ref": "#/$defs/N"}
    guarded = apply_guards(schema, Guards(max_depth=2))
    assert "max_depth" not in guarded.applied
    assert set(guarded.schema["$defs"]) == {"N"}  # no copies; untyped parts aside


def test_untyped_values_nest_at_most_max_depth(gemma):
    """json_object content and other untyped values: arrays / objects at most max_depth deep
    below the untyped value (the recursive any-value becomes a chain)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    compiled = GrammarCompiler(gemma.tokenizer, guards=Guards(max_depth=3)).compile(
        JsonSchema(schema))
    assert compiled.caps["untyped_values"]["at"] == ["/additionalProperties"]

    def nested(d: int) -> list | int:
        return 1 if d == 0 else [nested(d - 1)]

    for d in range(6):
        # the extra key's value is the untyped one; its arrays nest d deep
        assert _accepts(gemma, compiled, {"a": 1, "x": nested(d)}) is (d <= 3), d
    assert _accepts(gemma, compiled, {"a": 1, "x": {"y": {"z": {"w": []}}}})
    assert not _accepts(gemma, compiled, {"a": 1, "x": {"y": {"z": {"w": [1]}}}})


def test_a_recursive_tool_schema_ends_within_budget_with_the_depth_cap():
    """The query tree as a tool's arguments, in every format, on the random model: without a
    cap some runs nest until max_tokens; with max_depth (and max_array_items, for breadth)
    every run ends, and every call is valid for the schema as given."""
    params = {"type": "object", "properties": {"where": {"$ref": "#/$defs/Node"}},
              "required": ["where"], "additionalProperties": False, "$defs": TREE["$defs"]}
    tools = tools_from_openai([{"type": "function", "function": {
        "name": "query", "strict": True, "parameters": params}}])
    validator = jsonschema.Draft202012Validator(params)

    def depth(node: dict) -> int:
        return 1 + max((depth(c) for c in node.get("children", [])), default=0)

    # harmony's preamble is free text, which no JSON guard bounds: left out
    names = [n for n, f in sorted(FORMATS.items())
             if f.tool_calls is not None and not f.tool_calls.preamble_begin]
    cut = {}
    for guards in (Guards(), Guards(max_depth=3, max_array_items=3)):
        cut[guards.max_depth] = 0
        for name in names:
            fmt = get_format(name)
            tok, eos = synthetic_tokenizer(fmt.special_tokens)
            compiler = GrammarCompiler(tok, guards=guards)
            req = TurnRequest(tools=tools, tool_choice="query", opening="")
            compiled = compiler.compile(Lark(build_grammar(fmt, req, tok, compiler=compiler,
                                                           guards=guards)))
            runtime = RandomLogitsRuntime(tok, eos_token_ids=eos)
            for seed in range(15):
                runtime.seed = seed
                d = decode(runtime, [0], compiled.new_matcher(),
                           SamplingParams(temperature=1.0, seed=seed), max_tokens=300)
                if d.finish_reason != "stop":
                    cut[guards.max_depth] += 1
                    continue
                (call,) = parse(fmt, d.text, tools=tools).tool_calls
                args = json.loads(call.arguments)
                assert validator.is_valid(args), (name, args)
                if guards.max_depth is not None:
                    assert depth(args["where"]) <= 1 + guards.max_depth, (name, args)
    assert cut[None] > 0 and cut[3] == 0, cut


# Recursive tool parameters, each with `deepest(h)`: the deepest arguments that follow h
# recursive references (the level past the cap can still close with an empty list), so that
# under a cap of h, `deepest(h)` is taken and bounds every run's nesting, `deepest(h + 1)` not.
def _tree_deepest(h: int) -> dict:
    return {"op": "and", "children": [] if h == 0 else [_tree_deepest(h - 1)]}


def _mutual_a(h: int) -> dict:
    return {} if h == 0 else {"b": _mutual_b(h - 1)}


def _mutual_b(h: int) -> dict:
    return {"a": [] if h == 0 else [_mutual_a(h - 1)]}


def _chain(h: int) -> dict:
    return {"v": 1} if h == 0 else {"v": 1, "next": _chain(h - 1)}


RECURSIVE_PARAMS: dict[str, tuple[dict, object]] = {
    "tree": ({"type": "object", "properties": {"where": {"$ref": "#/$defs/Node"}},
              "required": ["where"], "additionalProperties": False, "$defs": TREE["$defs"]},
             lambda h: {"where": _tree_deepest(h)}),
    # the parameters are the reference: `$ref` at the root, beside the definitions
    "mutual": ({"$defs": MUTUAL["$defs"], "$ref": "#/$defs/A"}, _mutual_a),
    # draft 7, whose definitions llguidance resolves as `definitions` only
    "chain_draft7": ({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {
        "L": {"type": "object", "properties": {"v": {"type": "integer", "maximum": 9},
                                               "next": {"$ref": "#/definitions/L"}},
              "required": ["v"], "additionalProperties": False}},
        "type": "object", "properties": {"head": {"$ref": "#/definitions/L"}},
        "required": ["head"], "additionalProperties": False}, lambda h: {"head": _chain(h)}),
}
# one format per way of writing arguments: JSON around name and arguments (two spellings of
# the arguments key), JSON after the name, one key at a time
LAYOUTS = ("qwen3", "llama31", "mistral", "glm45")


def _layouts(params: dict) -> list[str]:
    """The formats of LAYOUTS that take `params`: per-key arguments refuse a `$ref` at the
    top of the parameters (tool_checks.py)."""
    return [n for n in LAYOUTS
            if "$ref" not in params or get_format(n).tool_calls.layout != "per_key"]


def _nesting(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_nesting, value), default=0)
    return 0


def _turn_matcher(name: str, params: dict, guards: Guards):
    """(format, request, tokenizer, eos ids, compiled turn grammar) of a turn that must call
    the one tool `query`, whose parameters are `params`."""
    fmt = get_format(name)
    tools = tools_from_openai([{"type": "function", "function": {
        "name": "query", "strict": True, "parameters": params}}])
    req = TurnRequest(tools=tools, tool_choice="query")
    tok, eos = synthetic_tokenizer(fmt.special_tokens)
    compiler = GrammarCompiler(tok, guards=guards)
    compiled = compiler.compile(Lark(build_grammar(fmt, req, tok, compiler=compiler,
                                                   guards=guards)))
    return fmt, req, tok, eos, compiled


def _turn_accepts(name: str, params: dict, guards: Guards, args: dict) -> bool:
    """Whether the turn grammar takes a call of `query` with `args`, as the format writes it."""
    fmt, req, tok, _, compiled = _turn_matcher(name, params, guards)
    text = render_assistant(fmt, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "query", "arguments": json.dumps(args)}}]}, "")
    opening = req.opening_in(fmt)
    rest = text[len(opening):] if text.startswith(opening) else text
    m = compiled.new_matcher()
    return m.accept_tokens(tok.tokenize_str(rest, parse_special=True)) and m.is_accepting()


@pytest.mark.parametrize("schema", sorted(RECURSIVE_PARAMS))
def test_a_tools_arguments_take_the_depths_its_bare_schema_takes(schema):
    """The depth cap reaches a tool's parameters in every way a turn writes arguments, as it
    reaches `JsonSchema(params)`: up to the cap both take every nesting, one more neither.
    (The JSON layout once moved the parameters' definitions under properties/arguments, out
    of the cap's sight: the turn took any depth where the bare schema refused.)"""
    params, deepest = RECURSIVE_PARAMS[schema]
    validator = jsonschema.Draft202012Validator(params)
    for cap in (1, 2):
        guards = Guards(max_depth=cap)
        tok, _ = synthetic_tokenizer(())
        bare = GrammarCompiler(tok, guards=guards).compile(JsonSchema(params, strict=True))
        assert bare.caps["max_depth"]["value"] == cap
        for h in range(cap + 3):
            args = deepest(h)
            assert validator.is_valid(args), args
            want = h <= cap
            assert accepts(tok, bare, args) is want, (cap, args)
            for name in _layouts(params):
                assert _turn_accepts(name, params, guards, args) is want, (name, cap, args)


@pytest.mark.parametrize("schema", sorted(RECURSIVE_PARAMS))
def test_random_arguments_never_nest_past_the_cap(schema):
    """On the random model, under max_depth (and max_array_items, for breadth), no run of the
    bare schema or of a turn calling the tool nests deeper than the cap allows, and every
    run's arguments are valid for the schema as given."""
    params, deepest = RECURSIVE_PARAMS[schema]
    validator = jsonschema.Draft202012Validator(params)
    cap = 2
    guards = Guards(max_depth=cap, max_array_items=2)
    most = _nesting(deepest(cap))
    tok, eos = synthetic_tokenizer(())
    bare = GrammarCompiler(tok, guards=guards).compile(JsonSchema(params, strict=True))
    targets = [("bare", tok, eos, bare)] + [
        (name, *_turn_matcher(name, params, guards)[2:]) for name in _layouts(params)]
    for name, tok, eos, compiled in targets:
        runtime = RandomLogitsRuntime(tok, eos_token_ids=eos)
        for seed in range(8):
            runtime.seed = seed
            d = decode(runtime, [0], compiled.new_matcher(),
                       SamplingParams(temperature=1.0, seed=seed), max_tokens=300)
            assert d.finish_reason == "stop", (name, seed, d.text)
            if name == "bare":
                args = json.loads(d.text)
            else:
                (call,) = parse(get_format(name), d.text, tools=tools_from_openai([{
                    "type": "function", "function": {"name": "query", "strict": True,
                                                     "parameters": params}}])).tool_calls
                args = json.loads(call.arguments)
            assert validator.is_valid(args), (name, args)
            assert _nesting(args) <= most, (name, seed, args)
