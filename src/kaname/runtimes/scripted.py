"""A deterministic model for end-to-end tests: it prefers, token by token, the text of scripted
assistant turns, while kaname's grammar still masks every step.

A script is a JSON file `{"turns": ["text of turn 1", "text of turn 2", ...]}`, each turn
written as the model would write it in its chat format's own syntax (tool-call markers and
all), starting right after the prompt's generation prompt.

Which turn a generation gets is read from its prompt: the number of assistant turns the
conversation already holds. So the answer to a conversation does not depend on what else the
server was asked in between: clients make side requests (Claude Code asks for a title, a
quota probe, a topic check) that a count of requests served would let steal a turn. A side
request is a fresh conversation and gets the first turn; a conversation past the last turn gets
nothing to prefer and ends its turn as soon as the grammar lets it.

Within a turn the runtime tracks how much of the turn's text has been written. Each step
prefers the tokens that spell the next bytes of it (the longest most), then, lower, the end
of the turn and tokens that close JSON (`"`, then `}` and `]`): where the grammar masks the
script's token (a script outside the grammar), the mask wins and what is written stays
valid and ends. Text the grammar writes that the script lacks (forced tokens) is skipped
over: the script picks up again where the last bytes written occur in it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

from .stepped import Stepped

# Logit levels. A script token gets at least 58, the end of the turn 30, closers 20 and 10,
# the rest 0: sampling at temperature 1 (what agents send) leaves the script with a probability
# under 1e-11 a token (e^-28 for each of a few end tokens, e^-38 for each closer, e^-58 for
# each of 262k others), so tests stay deterministic. Each byte a token covers adds _PER_BYTE:
# the longest spelling of the script's next bytes is preferred over a prefix of it by e^8.
_SCRIPT = 50.0
_PER_BYTE = 8.0
_END = 30.0
_CLOSE_QUOTE = 20.0
_CLOSE_BRACKET = 10.0
# bytes written last that, found in the script after the current place, move the place there
_RESYNC_BYTES = 16


def load_script(path: str | Path) -> list[str]:
    """The turns of a script file; ValueError naming what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"scripted model: cannot read {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"scripted model: {path} is not JSON: {e}") from e
    turns = data.get("turns") if isinstance(data, dict) else None
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ValueError(f'scripted model: {path} must be {{"turns": ["...", ...]}}, a list '
                         "of strings")
    return turns


@functools.lru_cache(maxsize=8)
def token_pieces(tokenizer: llg.LLTokenizer) -> dict[bytes, int]:
    """Bytes -> token id: special tokens by their names (`<|im_end|>`), and preferred over
    ordinary tokens that spell the same bytes, so that text's markers become the marker
    tokens a grammar names."""
    pieces: dict[bytes, int] = {}
    for i in range(tokenizer.vocab_size):
        b = tokenizer.decode_bytes([i])
        if b and (b not in pieces or tokenizer.is_special_token(i)):
            pieces[b] = i
    return pieces


@functools.lru_cache(maxsize=8)
def _closers(tokenizer: llg.LLTokenizer) -> NDArray[np.float32]:
    """Per token: how much it is preferred for closing JSON. Tokens of only quotes, brackets
    and whitespace: those that start with a quote most (inside a string a bracket is text, so
    preferring brackets would write `]]]]` until max_tokens), then the rest. Whitespace alone
    is not preferred: it never ends anything."""
    out = np.zeros(tokenizer.vocab_size, dtype=np.float32)
    for i in range(tokenizer.vocab_size):
        b = tokenizer.decode_bytes([i]).strip()
        if tokenizer.is_special_token(i) or not b or b.strip(b' \t\n"}]'):
            continue
        out[i] = _CLOSE_QUOTE if b.startswith(b'"') else _CLOSE_BRACKET
    return out


def _common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class ScriptedRuntime(Stepped):
    """Prefers the text of scripted assistant turns; the prompt only chooses the turn.

    `assistant_prefix`: what opens an assistant turn in a rendered prompt (the chat format's
    `assistant_prefix`); `generation_prompts`: the tails a prompt may end with to open the
    turn being generated (not counted as a turn of the history). Without `assistant_prefix`
    every generation gets the first turn (a raw completion prompt has no turns).
    `end_markers`: the text of the format's end-of-turn markers, preferred like EOS.
    """

    def __init__(self, tokenizer: llg.LLTokenizer, turns: Sequence[str], *,
                 eos_token_ids: Sequence[int] | None = None, bos_token_id: int | None = None,
                 assistant_prefix: str | None = None, generation_prompts: Sequence[str] = (),
                 end_markers: Sequence[str] = (), n_ctx: int | None = None):
        if n_ctx is not None and n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1 or None, got {n_ctx}")
        self.n_ctx = n_ctx
        self._tokenizer = tokenizer
        self._n_vocab = tokenizer.vocab_size
        self._eos = tuple(eos_token_ids if eos_token_ids is not None else tokenizer.eos_tokens)
        self._bos = bos_token_id
        self._turns = [t.encode() for t in turns]
        self._assistant_prefix = assistant_prefix
        # longest first: a tail that extends another is the one the prompt ends with
        self._generation_prompts = sorted(set(generation_prompts), key=len, reverse=True)
        self._pieces = token_pieces(tokenizer)
        self._longest = max(map(len, self._pieces))
        self._base = self._make_base(end_markers)
        self._row = np.empty(self._n_vocab, dtype=np.float32)
        self.turn = 0  # the turn (0-based) of the generation in progress
        self._script = b""
        self._place = 0  # bytes of the script written so far
        self._written = b""

    def _make_base(self, end_markers: Sequence[str]) -> NDArray[np.float32]:
        """What every step prefers besides the script: the end of the turn, then closers."""
        base = _closers(self._tokenizer).copy()
        ends = [*self._eos, *(self._pieces[m.encode()] for m in end_markers
                              if m.encode() in self._pieces)]
        base[ends] = _END
        return base

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        return self._tokenizer

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def eos_token_ids(self) -> Sequence[int]:
        return self._eos

    def tokenize(self, text: str) -> list[int]:
        ids = self._tokenizer.tokenize_str(text)
        return [self._bos, *ids] if self._bos is not None else ids

    def turn_of(self, prompt: str) -> int:
        """The turn a prompt gets: the assistant turns it holds before the one it opens."""
        if self._assistant_prefix is None:
            return 0
        for tail in self._generation_prompts:
            if prompt.endswith(tail):
                prompt = prompt[: len(prompt) - len(tail)]
                break
        return prompt.count(self._assistant_prefix)

    def start(self, prompt: Sequence[int]) -> NDArray[np.float32]:
        text = self._tokenizer.decode_bytes(list(prompt)).decode("utf-8", errors="replace")
        self.turn = self.turn_of(text)
        self._script = self._turns[self.turn] if self.turn < len(self._turns) else b""
        self._place = 0
        self._written = b""
        self._reset_steps()
        return self._next()

    def _snapshot(self) -> Any:
        return self._place, self._written

    def _context(self) -> Any:
        return self.turn, self._script

    def _set_context(self, context: Any) -> None:
        self.turn, self._script = context

    def _restore(self, state: Any) -> None:
        self._place, self._written = state

    def _step(self, token: int) -> NDArray[np.float32]:
        return self.advance([token])

    def advance(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        new = self._tokenizer.decode_bytes(list(tokens))
        self._written += new
        agree = _common_prefix(new, self._script[self._place:self._place + len(new)])
        self._place += agree
        if agree < len(new):  # the grammar wrote something else: pick up where it is scripted
            tail = self._written[-_RESYNC_BYTES:]
            at = self._script.find(tail, self._place)
            if at >= 0:
                self._place = at + len(tail)
        return self._next()

    def _next(self) -> NDArray[np.float32]:
        row = self._row
        np.copyto(row, self._base)
        rest = self._script[self._place:self._place + self._longest]
        for n in range(1, len(rest) + 1):
            token = self._pieces.get(rest[:n])
            if token is not None:
                row[token] = _SCRIPT + _PER_BYTE * n
        return row
