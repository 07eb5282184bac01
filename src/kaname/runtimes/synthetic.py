"""Small byte-level BPE vocabularies trained in-process, carrying a chat format's special tokens.

Real vocabularies of most chat formats cannot be had offline; a synthetic one with the same
special tokens exercises the same grammar paths (markers as tokens, not spellings) in seconds.
"""

from __future__ import annotations

import functools

import llguidance as llg

_CORPUS = [
    'The weather in Tokyo is sunny, 20 degrees. {"city": "Tokyo", "temp": 20.5, "ok": true}',
    "Call the tool with the right arguments; then answer the user in one short sentence.",
    '[1, 2, 3] {"a": null, "b": [false, "x"]} 0123456789 -42 3.14 1e10 "quoted \\" text"',
    "functions.get_weather:0 <tag> </tag> ```json\n{}\n``` name arguments parameters",
    "ほしぞら書店株式会社は2011年5月に横浜市中区で設立された。従業員は約120名。",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ !?.,:;-_+*/=()[]{}<>@#$%^&|~`'",
]


@functools.lru_cache(maxsize=32)
def synthetic_tokenizer_json(special_tokens: tuple[str, ...], vocab_size: int = 1200
                             ) -> tuple[str, int]:
    """(HF tokenizer.json text, eos id): BPE trained on a few KB plus `special_tokens` as special
    added tokens; `<eos>` is added and is the end-of-sequence token. Deterministic, so two
    processes build the same vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<eos>", *dict.fromkeys(special_tokens)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_CORPUS * 20, trainer)
    eos = tok.token_to_id("<eos>")
    if eos is None:  # pragma: no cover - "<eos>" is the trainer's first special token
        raise RuntimeError("the synthetic vocabulary lost its <eos> token")
    return tok.to_str(), eos


@functools.lru_cache(maxsize=32)
def synthetic_tokenizer(special_tokens: tuple[str, ...], vocab_size: int = 1200
                        ) -> tuple[llg.LLTokenizer, tuple[int, ...]]:
    """(tokenizer, eos ids) of `synthetic_tokenizer_json`."""
    text, eos = synthetic_tokenizer_json(special_tokens, vocab_size)
    return llg.LLTokenizer(text, eos_token=eos), (eos,)
