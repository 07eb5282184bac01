"""Greedy decoding asks for a few tokens' logits where the grammar allows only a few
(`ModelCall.only`), and the answer is the one full rows give.

The test runtimes answer such a row with -inf outside the ids asked for, so a loop that asked
too narrowly (a token the grammar allows left out) would pick otherwise: their greedy output
is compared with the same runtime answering every row in full. On the embedded model the
rows come from the final hidden state times the Q8_0 output layer's rows (output_layer.py),
and a whole row from ggml's own kernel on that hidden state (ggml_matvec.py), each computed
when it is read: checked against llama.cpp's own logits, near ties included, and greedy output
with them is byte-identical to output with full rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kaname.decoding import SamplingParams, decode

PROMPT = "Extract: the bookstore ほしぞら書店 opened in 2011 in 横浜市中区, Yokohama."


class _Rows:
    """A runtime seen through: counts the rows asked narrowly; `full` answers them in full."""

    def __init__(self, inner: Any, *, full: bool):
        self._inner, self._full = inner, full
        self.narrow = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def evaluate(self, tokens, logits_at, only=None):
        self.narrow += sum(ids is not None for ids in only or ())
        return self._inner.evaluate(tokens, logits_at, None if self._full else only)


@pytest.mark.parametrize("runtime_name", ["random_runtime", "adversarial_runtime"])
@pytest.mark.parametrize("drafting", ["verify", "off"])
def test_greedy_with_few_rows_is_greedy_with_full_rows(request, runtime_name, drafting,
                                                       compiled_sample):
    runtime = request.getfixturevalue(runtime_name)
    compiled, _ = compiled_sample
    prompt = runtime.tokenize(PROMPT)
    narrow = 0
    for i, (row, c) in enumerate(compiled[:30]):
        outputs = []
        for full in (False, True):
            runtime.seed = i
            seen = _Rows(runtime, full=full)
            g = decode(seen, prompt, c.new_matcher(), SamplingParams(), max_tokens=200,
                       drafting=drafting)
            outputs.append((g.tokens, g.finish_reason))
            narrow += seen.narrow if not full else 0
        assert outputs[0] == outputs[1], row["id"]
    assert narrow > 100  # not vacuous: JSON forces bytes at many positions


def test_sampling_asks_for_full_rows(random_runtime, compiled_sample):
    """A draw reads the whole (masked) distribution: no row is asked narrowly."""
    compiled, _ = compiled_sample
    seen = _Rows(random_runtime, full=False)
    decode(seen, random_runtime.tokenize(PROMPT), compiled[0][1].new_matcher(),
           SamplingParams(temperature=0.7, seed=1), max_tokens=100)
    assert seen.narrow == 0


def test_a_runtime_that_reads_no_only_is_asked_none(random_runtime, compiled_sample):
    """Where the runtime answers every row in full anyway (a batch's step), the loop does not
    work out the few ids (a mask per forced position) for nothing."""
    compiled, _ = compiled_sample
    for answers, asked in ((True, True), (False, False)):
        seen = _Rows(random_runtime, full=False)
        seen.answers_only = answers
        for _, c in compiled[:10]:
            decode(seen, random_runtime.tokenize(PROMPT), c.new_matcher(), SamplingParams(),
                   max_tokens=100)
        assert (seen.narrow > 0) == asked


# ---------------------------------------------------------------------------------------------
# The embedded model


@pytest.fixture(scope="module")
def llama_pair():
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    few = LlamaCppRuntime.default(n_ctx=2048)
    full = LlamaCppRuntime.default(n_ctx=2048, few_rows=False)
    assert few._layer is not None, "the embedded model's output layer is Q8_0: rows apply"
    assert full._layer is None
    return few, full


@pytest.mark.model
def test_rows_from_the_hidden_state_are_llamacpps_within_their_bound(llama_pair):
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    few, full = llama_pair
    assert isinstance(few, LlamaCppRuntime)
    prompt = few.tokenize("Invoice INV-2024-0457 was billed to Blue Harbor Cafe on")
    assert np.array_equal(few.start(prompt), full.start(prompt))
    rng = np.random.default_rng(0)
    before = few.few_rows
    for _ in range(12):
        k = int(rng.integers(1, few.exact_batch + 1))
        tokens = [int(t) for t in rng.integers(100, 50_000, k)]
        ref = full.evaluate(tokens, range(k))
        only = []
        for j in range(k):  # the top few (close calls) or random ids, or a full row
            pick = rng.integers(3)
            only.append(None if pick == 0 else np.sort(
                np.argsort(ref[j])[-8:] if pick == 1 else rng.choice(few.n_vocab, 8, False)
            ).astype(np.int64))
        got = few.evaluate(tokens, range(k), only)
        for j, ids in enumerate(only):
            if ids is None:
                assert np.array_equal(got[j], ref[j])
                continue
            assert ids[np.argmax(got[j][ids])] == ids[np.argmax(ref[j][ids])]
            assert np.allclose(got[j][ids], ref[j][ids], rtol=0, atol=1e-3)
    assert few.few_rows > before


@pytest.mark.model
def test_a_near_tie_gets_its_full_row(llama_pair, monkeypatch):
    """Where the bound cannot tell the argmax, that row is computed in full from the same
    hidden state: the rows are then exactly llama.cpp's."""
    from kaname.runtimes import output_layer

    few, full = llama_pair
    prompt = few.tokenize("The capital of France is")
    few.start(prompt)
    full.start(prompt)
    unsure = output_layer.Rows.decided
    monkeypatch.setattr(output_layer.Rows, "decided", lambda self: False)
    tokens = few.tokenizer.tokenize_str(" Paris, and the capital")[:4]
    only = [np.arange(100, 108, dtype=np.int64)] * len(tokens)
    got = few.evaluate(tokens, range(len(tokens)), only)
    ref = full.evaluate(tokens, range(len(tokens)))
    assert np.array_equal(got, ref)
    monkeypatch.setattr(output_layer.Rows, "decided", unsure)
    assert np.array_equal(few.evaluate([42], [0]), full.evaluate([42], [0]))  # cache intact


@pytest.mark.model
def test_a_layer_that_disagrees_is_not_used(monkeypatch):
    """A model whose logits are not the hidden state times the layer (a soft cap, a scale)
    is caught by the runtime's check when it loads, and gets full rows."""
    from kaname.runtimes import llamacpp, output_layer

    real = output_layer.output_layer

    def scaled(path):
        layer = real(path)
        rows = layer.rows
        layer.rows = lambda h, ids: output_layer.Rows(rows(h, ids).logits * 1.01,
                                                     rows(h, ids).error)
        return layer

    monkeypatch.setattr(llamacpp, "output_layer", scaled)
    assert llamacpp.LlamaCppRuntime.default(n_ctx=512)._layer is None


@pytest.mark.model
def test_a_row_is_computed_when_it_is_read_and_is_llamacpps_bit_for_bit(llama_pair):
    """A call of several tokens stops at the hidden state; a whole row is ggml's product
    when first read (a draft's rows past a rejected token never are), and the same bits as
    llama.cpp's row of one token a call."""
    few, full = llama_pair
    prompt = few.tokenize("Order 1182: two espresso cups, shipped to Nagoya on")
    few.start(prompt)
    full.start(prompt)
    products = []
    matvec = few._matvec
    few._matvec = lambda h: products.append(1) or matvec(h)
    try:
        tokens = few.tokenizer.tokenize_str(" 3 May, by sea freight")[:few.exact_batch]
        rows = few.evaluate(tokens, range(len(tokens)))
        assert not isinstance(rows, np.ndarray) and not products  # nothing computed yet
        one_by_one = [full.evaluate([t], [0])[0].copy() for t in tokens]
        assert np.array_equal(rows[2], one_by_one[2]) and len(products) == 1
        assert np.array_equal(rows[2], one_by_one[2]) and len(products) == 1  # kept
        assert np.array_equal(np.asarray(rows), np.stack(one_by_one))
        assert len(products) == len(tokens)
        with pytest.raises(IndexError):
            rows[len(tokens)]
    finally:
        few._matvec = matvec


@pytest.mark.model
def test_a_call_longer_than_n_batch_keeps_every_hidden_row(llama_pair):
    """A call of more tokens than `n_batch` is several `llama_decode`s: the rows of each are
    kept, in order."""
    from kaname.runtimes.llamacpp import LlamaCppRuntime

    _, full = llama_pair
    small = LlamaCppRuntime.default(n_ctx=512, n_batch=2)
    prompt = small.tokenize("Shipment 77 left Kobe on")
    small.start(prompt)
    full.start(prompt)
    tokens = small.tokenizer.tokenize_str(" 9 June with two crates")[:5]
    rows = small.evaluate(tokens, range(len(tokens)))
    one_by_one = np.stack([full.evaluate([t], [0])[0] for t in tokens])
    assert np.array_equal(np.asarray(rows), one_by_one)
    with pytest.raises(ValueError, match="only has 1 entries for 2 rows"):
        small.evaluate([5, 6], [0, 1], [None])


@pytest.mark.model
def test_without_ggmls_product_the_runtime_reads_llamacpps_rows(monkeypatch):
    """ggml's library not loadable, or a product that is not llama.cpp's to the bit: the
    runtime loads all the same and answers with llama.cpp's rows (no rows from the hidden
    state)."""
    from kaname.runtimes import ggml_matvec, llamacpp

    class Off(ggml_matvec.MatVec):
        def __call__(self, vector):
            return super().__call__(vector) * np.float32(1 + 2**-20)

    def missing(*args, **kwargs):
        raise OSError("libggml-cpu.so: cannot open shared object file")

    for replacement in (Off, missing):
        monkeypatch.setattr(llamacpp, "MatVec", replacement)
        rt = llamacpp.LlamaCppRuntime.default(n_ctx=512)
        assert rt._layer is None
        rows = rt.evaluate(rt.tokenize("Hello"), [0, 1], [np.arange(8), None])
        assert isinstance(rows, np.ndarray) and rows.shape == (2, rt.n_vocab)


@pytest.mark.model
def test_greedy_with_few_rows_is_byte_identical_on_the_embedded_model(llama_pair):
    from kaname.bench.common import CASES
    from kaname.bench.e2e import EXTRACTION
    from kaname.engine import Engine

    few, full = llama_pair
    engines = Engine(few), Engine(full)
    before = few.few_rows
    for case in (*CASES, *EXTRACTION):
        for drafting in ("verify", "off"):
            texts = [e.generate(case.prompt, e.compile(case.schema), max_tokens=64,
                                drafting=drafting).text for e in engines]
            assert texts[0] == texts[1], (case.name, drafting)
    assert few.few_rows > before


def test_a_file_that_is_not_a_q8_0_gguf_has_no_layer(tmp_path):
    from kaname.runtimes.output_layer import output_layer

    (tmp_path / "x.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 12)  # truncated
    (tmp_path / "y.bin").write_bytes(b"not a model")
    assert output_layer(tmp_path / "x.gguf") is None
    assert output_layer(tmp_path / "y.bin") is None
    assert output_layer(tmp_path / "missing.gguf") is None


def test_a_row_is_decided_only_when_its_best_is_apart_by_more_than_both_errors():
    from kaname.runtimes.output_layer import Rows

    rng = np.random.default_rng(3)
    for _ in range(500):
        k = int(rng.integers(1, 6))
        logits = rng.normal(size=k).round(2)
        error = rng.uniform(0, 0.05, size=k)
        best = int(np.argmax(logits))
        apart = all(logits[best] - error[best] > logits[j] + error[j]
                    for j in range(k) if j != best)
        assert Rows(logits, error).decided() == apart
        if apart:  # any true values within the errors keep the same argmax
            true = logits + rng.uniform(-1, 1, size=k) * error
            assert int(np.argmax(true)) == best


@pytest.mark.model
def test_a_batch_of_one_reads_rows_when_needed():
    """The batch of a one-sequence runtime (a server of --max-concurrency 1) stops at the final
    hidden state, as the runtime's `evaluate` does: its rows are computed when read, the same
    bits as llama.cpp's own (a batch built with few_rows=False). A batch of several sequences
    does not: the eval callback would slow its steps."""
    from kaname.runtimes.base import ModelCall
    from kaname.runtimes.llamacpp import LlamaCppRuntime, _RowsFromHidden

    lazy = LlamaCppRuntime.default().batched(1)
    full = LlamaCppRuntime.default(few_rows=False).batched(1)
    assert lazy.answers_only and not full.answers_only
    assert not LlamaCppRuntime.default(n_seq=2).batched(2).answers_only
    tok = lazy.tokenizer
    prompt = tok.tokenize_str("Invoice INV-2024-0457 was billed to Blue Harbor Cafe on")
    draft = tok.tokenize_str(" 15 March 2024")[: lazy.exact_batch]
    got = {}
    for name, b in (("lazy", lazy), ("full", full)):
        first = b.step([(0, ModelCall(prompt, [len(prompt) - 1], fresh=True))])[0]
        assert first is not None
        rows = b.step([(0, ModelCall(draft, range(len(draft))))])[0]
        assert rows is not None
        assert isinstance(rows, _RowsFromHidden) == (name == "lazy")
        got[name] = [np.asarray(first[0]).copy(), *(np.asarray(rows[k]).copy()
                                                    for k in range(len(draft)))]
    assert all(np.array_equal(a, b) for a, b in zip(got["lazy"], got["full"], strict=True))
