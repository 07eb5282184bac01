"""Continuous batching (server/scheduler.py): many generations advanced one model step at a
time, each with its own grammar, sampler, drafts and budget.

The judge is the runtime alone: the same requests give the same tokens, finish reasons and
usage batched (sequences joining and leaving the batch at every step) as one at a time, on
the random, adversarial and scripted runtimes and, for a sequence alone in its step, on the
embedded model. Then what a scheduler must survive: cancels, a failing sequence, a failing
model step, shutdown, and prompts longer than a step's prefill chunk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaname.decoding import Generation, SamplingParams
from kaname.engine import Engine
from kaname.runtimes.base import BatchRuntime, ModelCall
from kaname.runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime
from kaname.runtimes.scripted import ScriptedRuntime
from kaname.runtimes.synthetic import synthetic_tokenizer
from kaname.server.scheduler import Cancelled, Scheduler

SPECIALS = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")
RECORD = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "year": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
          "required": ["name", "year"], "additionalProperties": False}
CONSTRAINTS: list[Any] = [None, RECORD,
                          {"type": "regex", "regex": "[a-z]{3,9}( [0-9]+)?"},
                          {"type": "choice", "choice": ["yes", "no", "maybe later"]}]


def _runtime(kind: str) -> Any:
    tok, eos = synthetic_tokenizer(SPECIALS)
    if kind == "random":
        return RandomLogitsRuntime(tok, seed=7, eos_token_ids=eos)
    if kind == "adversarial":
        return AdversarialRuntime(tok, seed=7, eos_token_ids=eos)
    turns = ['{"name": "Tokyo", "year": 2011}', "maybe later", "abc 42"]
    return ScriptedRuntime(tok, turns, eos_token_ids=eos, assistant_prefix="<|im_start|>")


def _prompt(i: int) -> list[int]:
    # the scripted runtime's turn is the number of assistant prefixes in the prompt
    tok, _ = synthetic_tokenizer(SPECIALS)
    return tok.tokenize_str("<|im_start|>" * (i % 3) + f"request {i}")


request = st.fixed_dictionaries({
    "constraint": st.sampled_from(range(len(CONSTRAINTS))),
    "temperature": st.sampled_from([0.0, 0.7, 1.0]),
    "top_p": st.sampled_from([1.0, 0.9]),
    "seed": st.integers(0, 2**16),
    "max_tokens": st.integers(1, 48),
    "drafting": st.sampled_from(["verify", "off", "force"]),
    "stop": st.sampled_from([(), ("1",), ("a", "\"}")]),
})


def _kwargs(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "constraint"}


SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed")


def _steps_kw(kw: dict[str, Any]) -> dict[str, Any]:
    """`Engine.generate`'s keywords as `Engine.steps` takes them (sampling in one value)."""
    return {**{k: v for k, v in kw.items() if k not in SAMPLING},
            "sampling": SamplingParams(**{k: v for k, v in kw.items() if k in SAMPLING})}


def _same(a: Generation, b: Generation) -> None:
    assert (b.tokens, b.text, b.finish_reason, b.usage, b.valid) == \
        (a.tokens, a.text, a.finish_reason, a.usage, a.valid)


@pytest.mark.parametrize("kind", ["random", "adversarial", "scripted"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request, min_size=1, max_size=7), size=st.integers(1, 4),
       workers=st.sampled_from([1, 3]))
def test_batched_outputs_equal_outputs_alone(kind: str, requests: list[dict[str, Any]],
                                             size: int, workers: int) -> None:
    """Batches of 1-4, the loops on one thread or three between steps."""
    runtime = _runtime(kind)
    engine = Engine(runtime)
    compiled = [engine.compile(c) for c in CONSTRAINTS]
    alone = [engine.generate(_prompt(i), compiled[r["constraint"]], **_kwargs(r))
             for i, r in enumerate(requests)]
    batch = runtime.batched(size)
    scheduler = Scheduler(batch, workers=workers)
    try:
        futures = [scheduler.submit(
            lambda rollback, i=i, r=r: engine.steps(_prompt(i), compiled[r["constraint"]],
                                                    batch, rollback, **_steps_kw(_kwargs(r))),
            _prompt(i)) for i, r in enumerate(requests)]
        batched = [f.result(timeout=60) for f in futures]
    finally:
        scheduler.close()
    for a, b in zip(alone, batched, strict=True):
        _same(a, b)
    assert scheduler.max_running == min(size, len(requests))


def test_a_full_batch_carries_every_sequence_in_each_step() -> None:
    """Eight requests on a batch of four: four run from the first step on, and a step
    carries four until fewer than four are left."""
    runtime = _runtime("random")
    engine = Engine(runtime)
    batch = runtime.batched(4)
    sizes: list[int] = []
    scheduler = Scheduler(batch, on_step=sizes.append)
    futures = [scheduler.submit(
        lambda rollback, i=i: engine.steps(_prompt(i), None, batch, rollback, max_tokens=30,
                                           sampling=SamplingParams(temperature=1.0, seed=i),
                                           drafting="off"),
        _prompt(i)) for i in range(8)]
    results = [f.result(timeout=60) for f in futures]
    scheduler.close()
    tokens = sum(r.usage.completion_tokens for r in results)
    # one call a token (drafting off), and the prompt's: every call made in some step
    assert tokens <= sum(sizes) <= tokens + len(results)
    # a freed slot is taken before the next step: four a step until none waits, then fewer
    assert sizes[0] == 4 and sizes == sorted(sizes, reverse=True)


# ---- what a scheduler survives ----------------------------------------------------------------

def _steps(engine: Engine, batch: BatchRuntime, i: int, **kw: Any) -> Any:
    def make(rollback: Any) -> Any:
        args: dict[str, Any] = {"max_tokens": 40, "temperature": 1.0, "seed": i, **kw}
        return engine.steps(_prompt(i), None, batch, rollback, **_steps_kw(args))
    return make


def test_a_cancelled_sequence_frees_its_slot_and_the_others_go_on() -> None:
    runtime = _runtime("random")
    engine = Engine(runtime)
    alone = engine.generate(_prompt(1), None, max_tokens=40, temperature=1.0, seed=1)
    batch = runtime.batched(2)
    scheduler = Scheduler(batch)
    stop = threading.Event()
    long = scheduler.submit(_steps(engine, batch, 0, max_tokens=100_000), _prompt(0),
                            stopped=stop.is_set)
    other = scheduler.submit(_steps(engine, batch, 1), _prompt(1))
    _same(alone, other.result(timeout=30))
    stop.set()
    with pytest.raises(Cancelled):
        long.result(timeout=30)
    # both slots are free again: two more run at once
    again = [scheduler.submit(_steps(engine, batch, i), _prompt(i)) for i in (1, 1)]
    for f in again:
        _same(alone, f.result(timeout=30))
    scheduler.close()


def test_a_sequence_whose_callback_fails_ends_alone() -> None:
    runtime = _runtime("random")
    engine = Engine(runtime)
    alone = engine.generate(_prompt(2), None, max_tokens=40, temperature=1.0, seed=2)
    batch = runtime.batched(2)
    scheduler = Scheduler(batch)

    def boom(ids: list[int]) -> None:
        raise RuntimeError("client went away")

    failing = scheduler.submit(_steps(engine, batch, 1, on_tokens=boom), _prompt(1))
    fine = scheduler.submit(_steps(engine, batch, 2), _prompt(2))
    with pytest.raises(RuntimeError, match="client went away"):
        failing.result(timeout=30)
    _same(alone, fine.result(timeout=30))
    scheduler.close()


class _Failing:
    """A batch whose steps fail while `fail` is set (a model error)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.fail = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, calls: Sequence[tuple[int, ModelCall]]) -> list[Any]:
        if self.fail:
            raise RuntimeError("llama_decode failed")
        result: list[Any] = self.inner.step(calls)
        return result


def test_a_failing_model_step_fails_its_sequences_and_the_scheduler_serves_on() -> None:
    runtime = _runtime("random")
    engine = Engine(runtime)
    batch = _Failing(runtime.batched(2))
    scheduler = Scheduler(batch)
    f = scheduler.submit(_steps(engine, batch, 3), _prompt(3))
    with pytest.raises(RuntimeError, match="llama_decode failed"):
        f.result(timeout=30)
    batch.fail = False
    alone = engine.generate(_prompt(3), None, max_tokens=40, temperature=1.0, seed=3)
    _same(alone, scheduler.submit(_steps(engine, batch, 3), _prompt(3)).result(timeout=30))
    scheduler.close()


def test_closing_ends_what_waits_and_what_runs_with_cancelled() -> None:
    runtime = _runtime("random")
    engine = Engine(runtime)
    batch = runtime.batched(1)
    scheduler = Scheduler(batch)
    running = scheduler.submit(_steps(engine, batch, 0, max_tokens=1_000_000,
                                      on_tokens=lambda ids: time.sleep(0.001)), _prompt(0))
    waiting = scheduler.submit(_steps(engine, batch, 1), _prompt(1))
    time.sleep(0.2)
    scheduler.close()
    scheduler.join(10)
    for f in (running, waiting):
        with pytest.raises(Cancelled):
            f.result(timeout=10)
    with pytest.raises(Cancelled):
        scheduler.submit(_steps(engine, batch, 2), _prompt(2)).result(timeout=10)


def test_an_error_before_the_first_call_is_the_requests_own() -> None:
    runtime = _runtime("random")
    engine = Engine(runtime)
    batch = runtime.batched(2)
    scheduler = Scheduler(batch)
    bad = scheduler.submit(lambda rollback: engine.steps(_prompt(0), None, batch, rollback,
                                                         max_tokens=0), _prompt(0))
    with pytest.raises(ValueError, match="max_tokens"):
        bad.result(timeout=10)
    scheduler.close()


# ---- the embedded model -----------------------------------------------------------------------

PROMPTS = ["<start_of_turn>user\nExtract the record: Hoshizora Books was founded in 2011 in "
           "Yokohama.<end_of_turn>\n<start_of_turn>model\n",
           "<start_of_turn>user\nExtract the record: Blue Fern Cafe opened in 1998 in Osaka, "
           "with 12 staff.<end_of_turn>\n<start_of_turn>model\n"]
SHOP = {"type": "object", "properties": {"name": {"type": "string"}, "year": {"type": "integer"},
                                         "city": {"type": "string"}},
        "required": ["name", "year", "city"], "additionalProperties": False}


@pytest.fixture(scope="module")
def gemma_batch() -> tuple[Engine, Any]:
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    runtime = LlamaCppRuntime.default(n_ctx=1024, n_seq=4)
    engine = Engine(runtime)
    batch = runtime.batched(4)
    batch.prefill_chunk = 8  # so that every prompt here is taken in several steps
    return engine, batch


def _gemma_steps(engine: Engine, batch: Any, prompt: str, **kw: Any) -> Any:
    def make(rollback: Any) -> Any:
        return engine.steps(prompt, SHOP, batch, rollback, max_tokens=40, **_steps_kw(kw))
    return make


def test_on_the_embedded_model_a_sequence_alone_gets_its_answer_alone(gemma_batch) -> None:
    """Greedy, with drafts: the prompt in chunks of 8 tokens a step and the sequence alone in
    its steps give the very tokens `Engine.generate` gives (the same logits, bit for bit)."""
    engine, batch = gemma_batch
    scheduler = Scheduler(batch)
    try:
        for prompt in PROMPTS:
            alone = engine.generate(prompt, SHOP, max_tokens=40)
            tokens = engine.runtime.tokenize(prompt)
            got = scheduler.submit(_gemma_steps(engine, batch, prompt), tokens).result(300)
            _same(alone, got)
            assert got.valid
    finally:
        scheduler.close()
    assert scheduler.steps_run > len(engine.runtime.tokenize(PROMPTS[0])) // 8


def test_on_the_embedded_model_sequences_batched_stay_valid_and_reuse_prefixes(
        gemma_batch) -> None:
    """Four at once (a prefix one holds serves the others): every answer that ends is valid,
    one cut short says so; a second round of the same prompts finds them cached."""
    engine, batch = gemma_batch
    sizes: list[int] = []
    scheduler = Scheduler(batch, on_step=sizes.append)
    try:
        for _ in range(2):
            futures = [scheduler.submit(
                _gemma_steps(engine, batch, PROMPTS[i % 2], temperature=0.8, seed=i),
                engine.runtime.tokenize(PROMPTS[i % 2])) for i in range(4)]
            results = [f.result(timeout=300) for f in futures]
            for r in results:
                assert (r.finish_reason, r.valid) in (("stop", True), ("length", False)), r.text
            assert any(r.finish_reason == "stop" for r in results), [r.text for r in results]
        tokens = engine.runtime.tokenize(PROMPTS[0])
        assert max(batch.reuse(s, tokens) for s in range(4)) == len(tokens) - 1
    finally:
        scheduler.close()
    assert max(sizes) == 4


def test_llama_rows_for_several_sequences_come_in_the_order_asked(gemma_batch) -> None:
    engine, batch = gemma_batch
    runtime = engine.runtime
    prompt = runtime.tokenize(PROMPTS[0])
    alone = runtime.start(prompt).copy()
    batch.release(0)
    batch.release(1)
    got: dict[int, Any] = {}
    for _ in range(len(prompt)):  # chunked prefill: each sent again until its prompt is in
        pending = [s for s in (0, 1) if s not in got]
        if not pending:
            break
        rows = batch.step([(s, ModelCall(prompt, [0], fresh=True)) for s in pending])
        got.update((s, r) for s, r in zip(pending, rows, strict=True) if r is not None)
    assert set(got) == {0, 1}
    for s in (0, 1):  # each prompt's last token alone in its call: the logits of `start`
        np.testing.assert_array_equal(got[s][0], alone)
    token = int(np.argmax(alone))
    two = batch.step([(0, ModelCall([token, 17, 18], [2, 0]))])[0]
    assert two is not None and np.asarray(two).shape == (2, runtime.n_vocab)
    batch.rollback(0, 3)
    again = batch.step([(0, ModelCall([token], [0]))])[0]
    assert again is not None
    np.testing.assert_array_equal(again[0], two[1])


def test_drafts_share_a_steps_rows_and_never_change_an_answer() -> None:
    """A step is kept to `step_rows` logits rows where drafts would add more: four sequences
    of forced JSON on a budget of 6 carry at most 6 rows a step, alone one drafts freely,
    and the answers are those of decoding alone (drafts are verified)."""
    runtime = _runtime("random")
    engine = Engine(runtime)
    compiled = engine.compile(RECORD)
    batch = _Counting(runtime.batched(4))
    scheduler = Scheduler(batch, step_rows=6)
    kw: dict[str, Any] = {"max_tokens": 48, "temperature": 1.0}
    try:
        alone = [engine.generate(_prompt(i), compiled, seed=i, **kw) for i in range(4)]
        futures = [scheduler.submit(
            lambda rollback, i=i: engine.steps(_prompt(i), compiled, batch, rollback,
                                               draft_room=scheduler.draft_room,
                                               **_steps_kw({"seed": i, **kw})),
            _prompt(i)) for i in range(4)]
        for a, f in zip(alone, futures, strict=True):
            b = f.result(timeout=60)  # the same answer, drafted otherwise
            assert (b.tokens, b.finish_reason, b.valid) == (a.tokens, a.finish_reason, a.valid)
        assert max(batch.rows) <= 6 and max(batch.drafts) > 0  # drafted, within the budget
        assert sum(a.usage.draft_tokens for a in alone) > 0
    finally:
        scheduler.close()


class _Counting(_Failing):
    """A batch that records the logits rows of each step."""

    def __init__(self, inner: Any):
        super().__init__(inner)
        self.fail = False
        self.rows: list[int] = []
        self.drafts: list[int] = []  # rows beyond one a sequence: drafts

    def step(self, calls: Sequence[tuple[int, ModelCall]]) -> list[Any]:
        self.rows.append(sum(len(c.logits_at) for _, c in calls))
        self.drafts.append(self.rows[-1] - len(calls))
        return super().step(calls)


class _Capped(_Failing):
    """A batch with a bounded cache: a released slot keeps `keep` tokens until forgotten."""

    def __init__(self, inner: Any, capacity: int, keep: int):
        super().__init__(inner)
        self.fail = False
        self.capacity = capacity
        self.keep = keep
        self.kept: dict[int, int] = {}
        self.forgotten: list[int] = []

    def release(self, slot: int) -> None:
        self.inner.release(slot)
        self.kept[slot] = self.keep

    def held(self, slot: int) -> int:
        return self.kept.get(slot, 0)

    def forget(self, slot: int) -> None:
        self.kept.pop(slot, None)
        self.forgotten.append(slot)


def test_sequences_are_admitted_while_their_prompts_and_budgets_fit_the_cache() -> None:
    """A cache of 110 tokens and requests of ~50 (prompt and max_tokens): two run at once on
    a batch of four; what free slots keep for reuse is dropped where a new one needs the room;
    the answers are those of decoding alone."""
    runtime = _runtime("random")
    engine = Engine(runtime)
    batch = _Capped(runtime.batched(4), capacity=110, keep=30)
    scheduler = Scheduler(batch)
    kw: dict[str, Any] = {"max_tokens": 45, "temperature": 1.0, "drafting": "off"}
    try:
        alone = [engine.generate(_prompt(i), None, seed=i, **kw) for i in range(5)]
        need = max(len(_prompt(i)) for i in range(5)) + 45
        assert 2 * need <= 110 < 3 * need
        futures = [scheduler.submit(
            lambda rollback, i=i: engine.steps(_prompt(i), None, batch, rollback,
                                               **_steps_kw({"seed": i, **kw})),
            _prompt(i), budget=45) for i in range(5)]
        for a, f in zip(alone, futures, strict=True):
            _same(a, f.result(timeout=60))
    finally:
        scheduler.close()
    assert scheduler.max_running == 2
    assert batch.forgotten  # two running and a kept slot's 30 tokens do not fit beside


@pytest.fixture(scope="module")
def gemma_small_pool() -> tuple[Engine, Any]:
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    runtime = LlamaCppRuntime.default(n_ctx=256, n_seq=4)  # one 256-cell pool for four
    return Engine(runtime), runtime.batched(4)


def test_on_the_embedded_model_a_small_pool_serves_four_without_running_out(
        gemma_small_pool) -> None:
    """Four requests of ~80 tokens on a 256-cell pool: at most three at once, every one ends
    (no `llama_decode` without a free cell), twice over (the second round reuses or drops
    what the first kept)."""
    engine, batch = gemma_small_pool
    assert batch.capacity == 256
    scheduler = Scheduler(batch)
    try:
        for _ in range(2):
            futures = [scheduler.submit(
                _gemma_steps(engine, batch, PROMPTS[i % 2], temperature=0.8, seed=i),
                engine.runtime.tokenize(PROMPTS[i % 2]), budget=40) for i in range(4)]
            for f in futures:
                r = f.result(timeout=300)
                assert (r.finish_reason, r.valid) in (("stop", True), ("length", False))
    finally:
        scheduler.close()
    assert scheduler.max_running == 3
