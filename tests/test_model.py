"""End to end on the embedded Gemma 3 270M (llama.cpp, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaname import Engine, Guards
from kaname.errors import ModelError
from kaname.runtimes.llamacpp import _MARKER, LlamaCppRuntime, default_vocab, kv_bytes_per_token
from kaname.runtimes.models import default_model_path

pytestmark = pytest.mark.model

INVOICE = json.loads((Path(__file__).parent / "invoice.schema.json").read_text())
INVOICE_PROMPT = ("Invoice INV-2024-001 dated 2024-03-15 for Acme Corp, 12 Main St, Springfield: "
                  "3 widgets at $4.50 each and 1 gadget at $19.99. Total $33.49.\n"
                  "The invoice as JSON: ")
COMPANY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "founded_year": {"type": "integer"},
                   "location": {"type": "string"}, "employees": {"type": "integer"}},
    "required": ["name", "founded_year", "location", "employees"],
    "additionalProperties": False,
}
SEED_PROMPT = "ほしぞら書店株式会社は2011年5月に横浜市中区で設立された。従業員は約120名。\nJSON: "


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.default()


def test_seed_example(engine):
    r = engine.generate(SEED_PROMPT, {"type": "json_schema",
                                      "json_schema": {"name": "company", "schema": COMPANY}})
    assert r.finish_reason == "stop" and r.valid is True
    assert r.usage.forced_tokens > 0
    assert r.parsed["founded_year"] == 2011 and r.parsed["employees"] == 120
    # a response_format without `strict` is lenient, as OpenAI's: enforced where it can be,
    # and this schema has nothing that cannot be
    assert r.enforced.strict is False and r.enforced.not_enforced == []


def test_invoice_runaway_is_bounded(engine):
    """Temperature 0.7 on an invoice schema: unguarded, numbers grow `1000…`, strings copy the
    prompt and the item list never closes until max_tokens. With the guards every run ends."""
    guards = Guards(max_string_length=100, max_array_items=8)
    rf = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": INVOICE}}
    for seed in range(5):
        # bounded is not short: 8 items of strings up to 100 characters took up to 632 tokens
        # (seed 1 on plain weights); unguarded, a run reaches any max_tokens
        r = engine.generate(INVOICE_PROMPT, rf, temperature=0.7, seed=seed, max_tokens=1200,
                            guards=guards)
        assert r.finish_reason == "stop", (seed, r.text[-200:])
        assert r.valid is True, (seed, r.text)
        assert {"max_integer_digits", "max_fraction_digits", "max_string_length",
                "max_array_items", "separators"} <= set(r.enforced.caps)


def test_length_is_never_valid(engine):
    r = engine.generate(INVOICE_PROMPT, {"type": "json_schema",
                                         "json_schema": {"name": "i", "schema": INVOICE}},
                        max_tokens=10)
    assert r.finish_reason == "length" and r.valid is False and r.parsed is None


def test_pydantic_response_format(engine):
    import pydantic

    class Company(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        name: str
        founded_year: int

    r = engine.generate(SEED_PROMPT, Company, max_tokens=80)
    assert r.valid and isinstance(r.parsed, Company)


def test_kv_prefix_reuse_gives_the_same_logits():
    path = default_model_path()
    reused, fresh = LlamaCppRuntime(path), LlamaCppRuntime(path)
    tok = reused.tokenize
    a, b = tok("The capital of France is"), tok("The capital of Japan is")
    reused.start(a)
    got = reused.start(b).copy()  # shares the prefix "The capital of" with a
    want = fresh.start(b).copy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_context_size_zero_is_the_trained_context():
    """n_ctx=0 reads the GGUF's trained context (32,768; the cap needs ~1.2 GB available, half
    of it for an 18 KiB-a-token cache), and n_ctx reports what llama.cpp made."""
    runtime = LlamaCppRuntime(default_model_path(), n_ctx=0)
    assert kv_bytes_per_token(runtime._v.model) == 18 * 1 * (256 + 256) * 2
    assert runtime.n_ctx == 32768
    prompt = runtime.tokenize("word " * 4200)  # past the old fixed 4,096
    assert len(prompt) > 4096
    assert runtime.start(prompt).shape == (runtime.n_vocab,)


def test_context_size_is_what_was_asked():
    runtime = LlamaCppRuntime(default_model_path(), n_ctx=1024)
    assert runtime.n_ctx == 1024
    with pytest.raises(ModelError, match="context of 1024 tokens"):
        runtime.start(runtime.tokenize("word " * 1100))


def _numbers_outside_strings(text: str) -> list[str]:
    """The JSON number literals of a (possibly cut-off) JSON text."""
    numbers, i, in_string = [], 0, False
    while i < len(text):
        ch = text[i]
        if in_string:
            i += 2 if ch == "\\" else 1
            in_string = ch != '"' if ch != "\\" else True
            continue
        if ch == '"':
            in_string = True
        elif ch == "-" or ch.isdigit():
            j = i + 1
            while j < len(text) and (text[j].isdigit() or text[j] in ".eE+-"):
                j += 1
            numbers.append(text[i:j])
            i = j
            continue
        i += 1
    return numbers


def test_untyped_extra_keys_keep_the_digit_cap(engine):
    """instructor's default schema has no additionalProperties false. Greedy Gemma adds a
    "price" key and, unguarded, writes a 144-digit integer under it (measured before untyped
    values were bounded); the cap of 15 digits must hold there too."""
    schema = {"properties": {"name": {"title": "Name", "type": "string"},
                             "quantity": {"title": "Quantity", "type": "integer"}},
              "required": ["name", "quantity"], "title": "Item", "type": "object"}
    rf = {"type": "json_schema", "json_schema": {"name": "Item", "schema": schema}}
    for prompt in ("Order: 3 gold bars, price 1000000000000000000000 yen each.\nJSON: ",
                   "Stock: 5 apples at a price of 100000000000000000000 each.\nJSON: "):
        r = engine.generate(prompt, rf, max_tokens=120)
        numbers = _numbers_outside_strings(r.text)
        assert numbers, r.text  # the model did write numbers
        for n in numbers:
            digits = n.lstrip("-").split(".")[0].split("e")[0].split("E")[0]
            assert len(digits) <= 15, (n, r.text[:200])
        assert r.enforced.caps["untyped_values"]["at"] == ["/additionalProperties"]


FRAGMENTS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<unused7>", "<not a marker>", "<b>",
             "user\n", "model\n", " hello", "\n", "\n\n", "a", "  ", "日本語", "<", ">", "x>"]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=60), piece=st.integers(1, 40),
       add_bos=st.booleans())
def test_a_long_text_tokenized_in_pieces_is_tokenized_as_a_whole(parts, piece, add_bos):
    """Cut before control tokens (so that llama.cpp's special-token split stays linear in a
    long conversation), the text gets the ids one llama_tokenize call gives."""
    v = default_vocab()
    text = "".join(parts)
    v._PIECE = piece  # (an instance attribute: cut often)
    try:
        assert v.tokenize(text, add_bos=add_bos) == v._tokenize(text, add_bos)
        starts = [m.start() for m in _MARKER.finditer(text) if m.group() in v.markers]
        assert bool(v._cuts(text)) == (len(text) > piece and any(s >= piece for s in starts))
    finally:
        del v._PIECE
