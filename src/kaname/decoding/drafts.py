"""Draft tokens for one generation, which the model then verifies (see `loop.decode`).

Two sources, both free to compute:
  the grammar's forced bytes, tokenized as the model's tokenizer writes them (llguidance's own
      forced tokens split bytes the way its token trie walks them, `e|chn|ical`, which a model
      rarely chooses), except the rest of a word the model began (`Drafter.propose`);
  prompt lookup: the longest recent n-gram of the output that also occurs earlier (in the
      prompt or the output) proposes what followed it there. Extraction copies names, dates
      and places from the prompt, token for token.
A draft is only a guess: the model accepts each token only where it would have chosen it.
Any `DraftSource` can stand in for these two (`decode`'s `drafter`): the answer stays the same,
only the speed changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import llguidance as llg

from ..grammar.matcher import Matcher


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    forced: int  # how many of `tokens`, from the start, the grammar forces
    # check the first token alone before the rest: for a guess that is mostly all or nothing
    probe: bool = False


class DraftSource(Protocol):
    """Where a generation's drafts come from."""

    def commit(self, tokens: Sequence[int]) -> None:
        """Tokens now part of the output."""
        ...

    def propose(self, matcher: Matcher, limit: int) -> Draft:
        """A draft the grammar allows whole, at most `limit` tokens, for the state `matcher`
        is in (which it must not change)."""
        ...


class PromptLookup:
    """N-gram index over the prompt and the output so far."""

    def __init__(self, prompt: Sequence[int], *, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.seq: list[int] = []
        # n-gram -> the index right after its latest occurrence, for occurrences that end
        # before the end of `seq` (so that a continuation exists)
        self.after: dict[tuple[int, ...], int] = {}
        self.extend(prompt)

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            end = len(self.seq)
            for n in range(1, min(self.max_ngram, end) + 1):
                self.after[tuple(self.seq[end - n:end])] = end
            self.seq.append(t)

    def propose(self, limit: int) -> list[int]:
        """What followed the longest n-gram that ends the sequence, up to `limit` tokens; a
        1-gram match is a weaker guess, so it proposes fewer."""
        for n in range(min(self.max_ngram, len(self.seq)), 0, -1):
            at = self.after.get(tuple(self.seq[-n:]))
            if at is not None:
                return self.seq[at:at + (limit if n > 1 else min(limit, 3))]
        return []


class Drafter:
    def __init__(self, tokenizer: llg.LLTokenizer, prompt: Sequence[int], *,
                 max_draft: int = 8, lookup: bool = True, word_rests: bool = False):
        """`word_rests`: draft forced bytes that go on with a word the model began too (off:
        see `propose`)."""
        self.tok = tokenizer
        self.max_draft = max_draft
        self.lookup = PromptLookup(prompt) if lookup else None
        self.word_rests = word_rests
        self.last = b""  # the output's last byte

    def commit(self, tokens: Sequence[int]) -> None:
        """Tokens now part of the output."""
        if self.lookup is not None:
            self.lookup.extend(tokens)
        if tokens:
            self.last = self.tok.decode_bytes(list(tokens[-1:]))[-1:] or self.last

    def propose(self, matcher: Matcher, limit: int) -> Draft:
        """A draft the grammar allows whole, at most `limit` tokens."""
        limit = min(limit, self.max_draft)
        if limit <= 0:
            return Draft([], 0)
        forced = matcher.forced_bytes()
        if forced:
            # whole: the model sometimes merges the last forced token with the text after it
            # (`",` for `"`), a rejection that costs a token of the call; leaving the last
            # token out cost a token of a later call every time (3% slower over the bench
            # prompts, 9 alternating runs)
            # only what a draft can reach is tokenized (all of a 1 MB literal took 0.16 s a
            # step, holding the GIL); where that cuts the run, its last token may straddle
            # the cut, so it is left out
            reach = limit * _BYTES_PER_TOKEN
            tokens = self.tok.tokenize_bytes(forced[:reach])
            if len(forced) > reach:
                tokens = tokens[:-1]
            tokens = tokens[:limit]
            n = matcher.validate_tokens(tokens)
            if n and not self.word_rests and _word_byte(self.last) and _word_byte(forced[:1]):
                # the rest of a word the model began (`t` → `echnical`): a model made to write
                # a word it did not choose spells it in pieces of its own (`t|ec|h|nic|al`), so
                # such drafts are mostly rejected at their first token, a call's worth of
                # tokens for nothing. scripts/bench_word_rests.py, twice: 1.04x and 1.01x
                # (median over the seven bench prompts), triage 1.26-1.28x, tool_call
                # 0.95-0.96x (`passenger` → `s":` is kept there), the rest 1.00-1.10x
                return Draft([], 0)
            if n:
                return Draft(tokens[:n], n)
        if self.lookup is None:
            return Draft([], 0)
        tokens = self.lookup.propose(limit)
        return Draft(tokens[:matcher.validate_tokens(tokens)], 0, probe=True)


_BYTES_PER_TOKEN = 64  # above the longest spelling of a token in the vocabularies served


def _word_byte(b: bytes) -> bool:
    return b[:1].isalnum()


class KnownAnswer:
    """Drafts the answer itself, where it is known: the model's greedy output for the prompt,
    from a generation one token a call. No drafter can propose better, so verified drafts
    from it measure the ceiling of drafting on a runtime (`kaname bench e2e`'s
    kaname_ceiling). They are verified like any others: the output is the model's whatever
    this proposes."""

    def __init__(self, tokenizer: llg.LLTokenizer, answer: Sequence[int], *,
                 max_draft: int = 8):
        self.tok, self.answer, self.max_draft = tokenizer, list(answer), max_draft
        self.at = 0  # tokens of the output so far

    def commit(self, tokens: Sequence[int]) -> None:
        self.at += len(tokens)

    def propose(self, matcher: Matcher, limit: int) -> Draft:
        limit = min(limit, self.max_draft)
        if limit <= 0:
            return Draft([], 0)
        tokens = self.answer[self.at:self.at + limit]
        tokens = tokens[:matcher.validate_tokens(tokens)]
        # forced as `Drafter` counts them: the leading tokens that spell the forced bytes
        forced, spelled, left = 0, b"", matcher.forced_bytes()
        for t in tokens:
            spelled += self.tok.decode_bytes([t])
            if not left.startswith(spelled):
                break
            forced += 1
        return Draft(tokens, forced)
