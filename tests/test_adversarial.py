"""A model that prefers whitespace and `"` (the stray-quote failure mode) must still end, valid."""

from __future__ import annotations

import json

from kaname.decoding import SamplingParams, decode
from kaname.grammar import GrammarCompiler, Guards, JsonSchema

N_SCHEMAS = 60
MAX_TOKENS = 512


def test_adversarial_runs_end_valid(gemma, adversarial_runtime, compiled_sample):
    # Large schemas whose *required* skeleton alone exceeds max_tokens (dozens of required
    # keys) cannot end within it whatever the model does; they are left out.
    rows = [r for r, _ in compiled_sample[0] if len(json.dumps(r["schema"])) <= 4000]
    assert len(rows) >= N_SCHEMAS
    # Default guards plus the string cap, which is off by default: inside a `format: email`
    # string neither whitespace nor `"` is allowed, and a model that never writes `@` would
    # otherwise grow the local part until max_tokens.
    compiler = GrammarCompiler(gemma.tokenizer, guards=Guards(max_string_length=64))
    compiled = [(r, compiler.compile(JsonSchema(r["schema"]))) for r in rows]
    failures = []
    whitespace_tokens = 0
    for i, (row, c) in enumerate(compiled[:: max(1, len(compiled) // N_SCHEMAS)][:N_SCHEMAS]):
        adversarial_runtime.seed = i
        d = decode(adversarial_runtime, [2], c.new_matcher(), SamplingParams(),
                   max_tokens=MAX_TOKENS)
        whitespace_tokens += sum(1 for t in d.tokens
                                 if adversarial_runtime.tokenizer.decode_bytes([t]).strip()
                                 in (b"", b'"'))
        if d.finish_reason != "stop" or not c.validate(d.text):
            failures.append((row["id"], d.finish_reason, len(d.tokens), d.text[:200]))
    assert not failures, f"{len(failures)} runs did not end valid: {json.dumps(failures[:3])}"
    assert whitespace_tokens > N_SCHEMAS  # the runtime really pushed whitespace and quotes


def test_adversarial_without_guards_runs_away(gemma, adversarial_runtime):
    """The guard is what ends it: with unbounded whitespace the same model hits max_tokens."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    loose = GrammarCompiler(gemma.tokenizer, guards=Guards(separators=None, max_whitespace=None))
    guarded = GrammarCompiler(gemma.tokenizer)
    adversarial_runtime.seed = 0
    d = decode(adversarial_runtime, [2], loose.compile(JsonSchema(schema)).new_matcher(),
               SamplingParams(), max_tokens=MAX_TOKENS)
    assert d.finish_reason == "length"
    d = decode(adversarial_runtime, [2], guarded.compile(JsonSchema(schema)).new_matcher(),
               SamplingParams(), max_tokens=MAX_TOKENS)
    assert d.finish_reason == "stop"
