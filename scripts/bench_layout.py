"""JSON layout guard, side by side: the fixed `json.dumps` layout (the default) against the
opt-in natural one-line layout (`separators=(",", ":")`, `separator_space=1`: at most one
space after each separator). Per layout, over the same schemas of the test sample on the Gemma
vocabulary: the share of tokens the grammar forces (the model is not asked for them), with a
random-logits model, and how many runs of the adversarial model (prefers whitespace and `"`)
end valid within 512 tokens, on two seed sets.

    .venv/bin/python scripts/bench_layout.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import compile_sample, load_schema_sample

from kaname.decoding import SamplingParams, decode
from kaname.grammar import GrammarCompiler, Guards, JsonSchema
from kaname.runtimes.llamacpp import default_vocab
from kaname.runtimes.random_logits import AdversarialRuntime, RandomLogitsRuntime

N = 60
LAYOUTS = {"fixed `, ` `: ` (default)": Guards(max_string_length=64),
           "`,` `:` + at most 1 space": Guards(separators=(",", ":"), separator_space=1,
                                              max_string_length=64)}


def main() -> None:
    vocab = default_vocab()
    tok = vocab.tokenizer
    name, rows = load_schema_sample()
    compiled, _ = compile_sample(tok, rows)
    rows = [r for r, _ in compiled if len(json.dumps(r["schema"])) <= 4000]
    rows = rows[:: max(1, len(rows) // N)][:N]
    rnd = RandomLogitsRuntime(tok, eos_token_ids=vocab.eos_token_ids)
    adv = AdversarialRuntime(tok, eos_token_ids=vocab.eos_token_ids)
    print(f"\n{len(rows)} schemas of {name}, Gemma vocabulary, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| layout | forced tokens (random model) | adversarial runs ended valid, seeds 0-59 "
          "| seeds 1000-1059 |")
    print("|---|---|---|---|")
    for label, guards in LAYOUTS.items():
        compiler = GrammarCompiler(tok, guards=guards)
        cs = [compiler.compile(JsonSchema(r["schema"])) for r in rows]
        forced = total = 0
        for i, c in enumerate(cs):
            rnd.seed = i
            d = decode(rnd, [2], c.new_matcher(), SamplingParams(), max_tokens=384)
            forced += d.forced_tokens
            total += len(d.tokens)
        ended = []
        for shift in (0, 1000):
            ok = 0
            for i, c in enumerate(cs):
                adv.seed = i + shift
                d = decode(adv, [2], c.new_matcher(), SamplingParams(), max_tokens=512)
                ok += d.finish_reason == "stop" and bool(c.validate(d.text))
            ended.append(f"{ok}/{len(cs)}")
        print(f"| {label} | {forced}/{total} ({forced / total:.1%}) | {ended[0]} | {ended[1]} |")


if __name__ == "__main__":
    main()
