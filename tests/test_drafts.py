"""Verified drafts never change an answer.

Greedy: decoding with drafts (forced tokens and prompt n-grams, each checked by the model) gives
the very tokens of decoding one token per model call, on the random-logits and adversarial
runtimes over the schema sample, and on the scripted runtime that copies from its prompt.
Sampling: the same seed gives the same tokens, and independent seeds the same distribution.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import numpy as np
import pytest
from scipy.stats import chi2_contingency
from serverproc import ServerProcess

from kaname.decoding import SamplingParams, decode
from kaname.decoding.drafts import Draft, Drafter, KnownAnswer, PromptLookup
from kaname.grammar import Choice, GrammarCompiler, JsonSchema, Regex
from kaname.runtimes.scripted import ScriptedRuntime

PROMPT = "Extract: the bookstore ほしぞら書店 opened in 2011 in 横浜市中区, Yokohama."


def _pair(runtime, prompt, compiled, params, max_tokens=256):
    off = decode(runtime, prompt, compiled.new_matcher(), params, max_tokens=max_tokens,
                 drafting="off")
    drafted = decode(runtime, prompt, compiled.new_matcher(), params, max_tokens=max_tokens,
                     drafting="verify")
    return off, drafted


@pytest.mark.parametrize("runtime_name", ["random_runtime", "adversarial_runtime"])
def test_greedy_with_drafts_is_byte_identical(request, runtime_name, compiled_sample):
    runtime = request.getfixturevalue(runtime_name)
    compiled, _ = compiled_sample
    prompt = runtime.tokenize(PROMPT)
    proposed = accepted = 0
    for i, (row, c) in enumerate(compiled[:40]):
        runtime.seed = i
        off, drafted = _pair(runtime, prompt, c, SamplingParams())
        assert (drafted.tokens, drafted.finish_reason) == (off.tokens, off.finish_reason), \
            row["id"]
        assert drafted.usage.draft_accepted <= drafted.usage.draft_tokens
        assert drafted.usage.forced_tokens <= drafted.usage.draft_accepted
        proposed += drafted.usage.draft_tokens
        accepted += drafted.usage.draft_accepted
    # not vacuous: drafts were kept (forced stretches) and rejected (random logits seldom
    # copy the prompt): both sides of the check ran
    assert 100 < accepted < proposed, (accepted, proposed)


@pytest.mark.parametrize("runtime_name", ["random_runtime", "adversarial_runtime"])
def test_any_draft_source_leaves_the_answer(request, runtime_name, compiled_sample):
    """The answer itself as drafts is kept whole; another answer as drafts is rejected where it
    differs: either way the output is the model's (a `DraftSource` decides speed only)."""
    runtime = request.getfixturevalue(runtime_name)
    compiled, _ = compiled_sample
    prompt = runtime.tokenize(PROMPT)
    wrong_rejected = 0
    for i, (row, c) in enumerate(compiled[:20]):
        runtime.seed = i
        off = decode(runtime, prompt, c.new_matcher(), SamplingParams(), max_tokens=256,
                     drafting="off")
        known = decode(runtime, prompt, c.new_matcher(), SamplingParams(), max_tokens=256,
                       drafter=KnownAnswer(runtime.tokenizer, off.tokens))
        assert (known.tokens, known.finish_reason) == (off.tokens, off.finish_reason), row["id"]
        assert known.usage.draft_accepted == known.usage.draft_tokens, row["id"]
        assert known.usage.forced_tokens <= known.usage.draft_accepted, row["id"]
        # a call per draft: the known answer needs far fewer than one per token
        assert known.usage.draft_accepted >= len(off.tokens) // 2, row["id"]
        runtime.seed = i + 1
        other = decode(runtime, prompt, c.new_matcher(), SamplingParams(), max_tokens=256,
                       drafting="off")
        runtime.seed = i
        wrong = decode(runtime, prompt, c.new_matcher(), SamplingParams(), max_tokens=256,
                       drafter=KnownAnswer(runtime.tokenizer, other.tokens))
        assert (wrong.tokens, wrong.finish_reason) == (off.tokens, off.finish_reason), row["id"]
        wrong_rejected += wrong.usage.draft_tokens - wrong.usage.draft_accepted
    assert wrong_rejected > 0  # not vacuous: the wrong answer's drafts were turned down


def test_sampling_with_drafts_is_the_same_draw(random_runtime, compiled_sample):
    """At every position the picker runs on the same logits with the same generator, so a
    seed gives the same sample with drafts as without."""
    compiled, _ = compiled_sample
    prompt = random_runtime.tokenize(PROMPT)
    for i, (row, c) in enumerate(compiled[:20]):
        random_runtime.seed = 100 + i
        off, drafted = _pair(random_runtime, prompt, c, SamplingParams(temperature=0.8, seed=i))
        assert drafted.tokens == off.tokens, row["id"]


def test_sampled_distribution_is_unchanged(random_runtime):
    """Independent seeds: outputs with and without drafts come from one distribution
    (chi-square on a grammar of a few outputs sharing long forced stretches)."""
    compiler = GrammarCompiler(random_runtime.tokenizer)
    c = compiler.compile(Regex(r"(alpha beta|alpha gamma|delta) (one|two)"))
    prompt = random_runtime.tokenize("alpha beta gamma delta one two")
    counts: dict[str, Counter[str]] = {"off": Counter(), "verify": Counter()}
    for mode in counts:
        for seed in range(300):
            random_runtime.seed = seed + (0 if mode == "off" else 10_000)
            g = decode(random_runtime, prompt, c.new_matcher(),
                       SamplingParams(temperature=1.0, seed=seed), max_tokens=32,
                       drafting=mode)  # type: ignore[arg-type]
            counts[mode][g.text] += 1
    outputs = sorted(set(counts["off"]) | set(counts["verify"]))
    assert len(outputs) >= 3, counts
    table = np.array([[counts[m][o] for o in outputs] for m in ("off", "verify")])
    assert chi2_contingency(table).pvalue > 0.001, counts


def test_scripted_copy_from_the_prompt_is_drafted(gemma):
    """A model that copies from its prompt: prompt lookup proposes the copy, the model keeps
    it, and the output is the one decoding without drafts gives."""
    record = {"shop": "ほしぞら書店", "founded": 2011, "ward": "横浜市中区"}
    text = json.dumps(record, ensure_ascii=False)
    runtime = ScriptedRuntime(gemma.tokenizer, [text], eos_token_ids=gemma.eos_token_ids)
    schema = {"type": "object", "properties": {
        "shop": {"type": "string"}, "founded": {"type": "integer"},
        "ward": {"type": "string"}}, "required": ["shop", "founded", "ward"],
        "additionalProperties": False}
    c = GrammarCompiler(gemma.tokenizer).compile(JsonSchema(schema))
    prompt = gemma.tokenizer.tokenize_str(PROMPT)
    off, drafted = _pair(runtime, prompt, c, SamplingParams(), max_tokens=128)
    assert json.loads(drafted.text) == record
    assert drafted.tokens == off.tokens
    u = drafted.usage
    # a good part of the output came as drafts: forced ones, and copies from the prompt
    assert u.draft_accepted >= 0.4 * u.completion_tokens, u
    assert u.draft_accepted - u.forced_tokens >= 3, u


def test_prompt_lookup_proposes_what_followed():
    lookup = PromptLookup([5, 6, 7, 8, 9, 5, 6, 1])
    lookup.extend([5, 6])
    assert lookup.propose(8) == [1, 5, 6]  # what followed the latest earlier (5, 6)
    lookup.extend([7])
    assert lookup.propose(8) == [8, 9, 5, 6, 1, 5, 6, 7]  # the longest n-gram wins: (5, 6, 7)
    assert PromptLookup([1, 2, 3]).propose(4) == []  # nothing before the end repeats
    one = PromptLookup([4, 10, 11, 12, 13, 14])
    one.extend([4])  # a 1-gram match proposes a short draft
    assert one.propose(8) == [10, 11, 12]


def test_forced_drafts_are_the_tokenizers_own(gemma):
    """The grammar's forced bytes are drafted as the tokenizer writes them, and a draft never
    leaves the grammar."""
    tok = gemma.tokenizer
    c = GrammarCompiler(tok).compile(Choice(("technical support request",)))
    m = c.new_matcher()
    assert m.accept_tokens(tok.tokenize_str("t"))
    draft = Drafter(tok, []).propose(m, 16)
    assert draft.tokens and draft.forced == len(draft.tokens)
    assert draft.tokens == tok.tokenize_bytes(b"echnical support request")
    assert m.validate_tokens(draft.tokens) == len(draft.tokens)
    # forced bytes that text follows are drafted whole too, up to the limit
    c = GrammarCompiler(tok).compile(Regex(r"technical support [a-z]+"))
    m = c.new_matcher()
    assert m.accept_tokens(tok.tokenize_str("t"))
    assert Drafter(tok, []).propose(m, 16).tokens == tok.tokenize_bytes(b"echnical support ")
    assert Drafter(tok, []).propose(m, 1).tokens == tok.tokenize_bytes(b"echnical support ")[:1]


def test_no_forced_draft_goes_on_with_a_word_the_model_began(gemma):
    """After the model's `t`, the forced `echnical` is not drafted (the model spells such a
    word its own way); where the forced bytes start a new word or are punctuation, they are."""
    tok = gemma.tokenizer
    c = GrammarCompiler(tok).compile(Choice(("technical support request", "billing")))
    m = c.new_matcher()
    started = tok.tokenize_str("t")
    assert m.accept_tokens(started)
    drafter = Drafter(tok, [])
    drafter.commit(started)
    assert drafter.propose(m, 16) == Draft([], 0)
    drafter = Drafter(tok, [], word_rests=True)  # the rule before
    drafter.commit(started)
    assert drafter.propose(m, 16).tokens == tok.tokenize_bytes(b"echnical support request")
    m = c.new_matcher()
    whole = tok.tokenize_str("technical")
    assert m.accept_tokens(whole)  # the word is done: ` support request` is drafted
    drafter = Drafter(tok, [])
    drafter.commit(whole)
    assert drafter.propose(m, 16).tokens == tok.tokenize_bytes(b" support request")
    c = GrammarCompiler(tok).compile(Regex(r"a\.[a-z]+"))
    m = c.new_matcher()
    assert m.accept_tokens(tok.tokenize_str("a"))  # a letter, then forced punctuation
    drafter = Drafter(tok, [])
    drafter.commit(tok.tokenize_str("a"))
    assert drafter.propose(m, 16).tokens == tok.tokenize_bytes(b".")


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--model", "random", "--format", "qwen3") as s:
        yield s


SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Yokohama", "Osaka"]}},
          "required": ["city"], "additionalProperties": False}


def _usage_of(api: str, body: dict) -> dict:
    return body["usage"]


@pytest.mark.parametrize("draft", [True, False])
def test_usage_reports_draft_counts_on_every_api(server, draft):
    """forced_tokens, draft_tokens and draft_accepted in every API's usage, streamed and not;
    `kaname.draft: false` decodes one token per call (no drafts)."""
    c = httpx.Client(base_url=server.url, timeout=120)
    opts = {"kaname": {"draft": draft}}
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA,
                                                   "strict": True}}
    chat = {"model": "random", "messages": [{"role": "user", "content": "City?"}],
            "response_format": fmt, "max_tokens": 64, "seed": 1, **opts}
    seen = []
    r = c.post("/v1/chat/completions", json=chat).json()
    seen.append(r["usage"])
    chunks = [json.loads(line[6:]) for line in c.post(
        "/v1/chat/completions", json={**chat, "stream": True,
                                      "stream_options": {"include_usage": True}}
    ).text.splitlines() if line.startswith("data: {")]
    seen.append(chunks[-1]["usage"])
    r = c.post("/v1/completions", json={"model": "random", "prompt": "City:", "max_tokens": 32,
                                        "response_format": fmt, **opts}).json()
    seen.append(r["usage"])
    r = c.post("/v1/responses", json={
        "model": "random", "input": "City?", "max_output_tokens": 64, **opts,
        "text": {"format": {"type": "json_schema", "name": "c", "schema": SCHEMA}}}).json()
    seen.append(r["usage"])
    r = c.post("/v1/messages", json={
        "model": "random", "max_tokens": 64, **opts,
        "messages": [{"role": "user", "content": "City?"}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}}).json()
    seen.append(r["usage"])
    for u in seen:
        assert {"forced_tokens", "draft_tokens", "draft_accepted"} <= set(u), u
        assert 0 <= u["forced_tokens"] <= u["draft_accepted"] <= u["draft_tokens"], u
    total = sum(u["draft_tokens"] for u in seen)
    # the schema forces most of its bytes: with drafts they are proposed, without none are
    assert (total > 0) if draft else (total == 0), seen


@pytest.mark.model
@pytest.mark.parametrize("n_seq", [1, 2])  # plain weights, and a batch's repacked ones
@pytest.mark.parametrize("long", [False, True])  # the draft crosses the 256th KV cell
def test_llamacpp_checks_drafts_with_the_numerics_of_one_token_a_call(n_seq: int, long: bool):
    """Calls of up to `exact_batch` tokens, rolled back or not, give every row bit for bit as
    one token a call does: what greedy identity on the real model rests on."""
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    rt = LlamaCppRuntime.default(n_seq=n_seq)
    assert rt.repack == (n_seq > 1)
    prompt = rt.tokenize("Invoice INV-2024-0457 was billed to Blue Harbor Cafe on")
    if long:
        prompt = (prompt * 30)[:240]
    tokens = rt.tokenizer.tokenize_str(
        " 2024-03-15, for 3 kg of espresso beans and 2 milk frothers, due within 30 days.")
    rt.start(prompt)
    one = [rt.evaluate([t], [0])[0].copy() for t in tokens]
    rt.start(prompt)
    assert rt.exact_batch >= 2
    rows = []
    steps = []
    while len(rows) < len(tokens):
        step = rt.exact_batch  # within the first exact_cells cells; one token a call past them
        if len(prompt) + len(rows) + step > rt.exact_cells:
            step = 1
        steps.append(step)
        rt.evaluate(list(range(5, 5 + step)), range(step))  # a draft the model turned down
        rt.rollback(step)
        chunk = tokens[len(rows):len(rows) + step]
        rows += list(rt.evaluate(chunk, range(len(chunk))))
    assert all(np.array_equal(a, b) for a, b in zip(one, rows, strict=True))
    assert (steps[-1] == 1) == long  # past the 256th cell, one token a call


@pytest.mark.model
def test_greedy_with_drafts_is_byte_identical_past_256_tokens_of_context():
    """The invoice case writes ~200 tokens after a ~100-token prompt: past the 256th KV cell a
    call of several tokens computes attention otherwise, and a draft checked in one changed
    the answer (`Descaling kit at 12.00 EUR"` for `... EUR each"`)."""
    from kaname.bench.common import CASES
    from kaname.engine import Engine

    engine = Engine.default()
    case = next(c for c in CASES if c.name == "invoice")
    c = engine.compile(case.schema)
    off = engine.generate(case.prompt, c, max_tokens=256, drafting="off")
    drafted = engine.generate(case.prompt, c, max_tokens=256)
    assert off.usage.prompt_tokens + off.usage.completion_tokens > 280
    assert drafted.text == off.text
    assert drafted.usage.draft_accepted > 0


@pytest.mark.model
def test_greedy_with_drafts_is_byte_identical_on_the_embedded_model():
    from kaname.bench.common import EXTRACTION
    from kaname.engine import Engine

    engine = Engine.default()
    for case in EXTRACTION:
        c = engine.compile(case.schema)
        off = engine.generate(case.prompt, c, max_tokens=80, drafting="off")
        drafted = engine.generate(case.prompt, c, max_tokens=80)
        assert drafted.text == off.text, case.name
        assert drafted.usage.draft_accepted > 0, case.name


def _on_batch(batch, slot: int, steps):
    """Make a generation's calls on one slot of a batch, alone in each step (as the server's
    scheduler does for a lone request)."""
    call = next(steps)
    while True:
        rows = None
        while rows is None:  # a long prompt is prefilled over several steps
            rows = batch.step([(slot, call)])[0]
        try:
            call = steps.send(rows)
        except StopIteration as done:
            return done.value


@pytest.mark.model
def test_a_batch_checks_drafts_one_token_a_call_past_256_cells():
    """The server's batch (repacked weights, several sequences) keeps the 256-cell rule too: a
    lone sequence's drafts past its 256th KV cell are checked one token a call, so greedy output
    with drafts is the output without, through the batch as through the runtime."""
    from kaname.bench.common import CASES
    from kaname.engine import Engine
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    engine = Engine(LlamaCppRuntime.default(n_seq=2))
    batch = engine.runtime.batched(2)
    case = next(c for c in CASES if c.name == "invoice")
    c = engine.compile(case.schema)
    out = {}
    for slot, drafting in ((0, "off"), (1, "verify")):
        steps = engine.steps(case.prompt, c, batch, lambda n, s=slot: batch.rollback(s, n),
                             max_tokens=256, drafting=drafting)
        out[drafting] = _on_batch(batch, slot, steps)
    off, drafted = out["off"], out["verify"]
    assert off.usage.prompt_tokens + off.usage.completion_tokens > 280
    assert drafted.usage.draft_accepted > 0
    assert drafted.text == off.text
