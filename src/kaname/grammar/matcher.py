"""kaname's own matcher interface over one grammar, per request.

Decoding, the replay verifier and the post-checks use this, not `llguidance.LLMatcher`
directly: it names the operations verified drafts need (validate without committing, roll
back) and keeps llguidance's error reporting in one place. As vLLM's `backend_types` does,
it would let another mask library stand in.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import llguidance as llg
import numpy as np
from numpy.typing import NDArray

# Forced runs longer than this are kept between steps (Matcher.forced_bytes); shorter ones,
# the keys and separators of everyday grammars, are asked of llguidance each time as before.
LONG_FORCED = 4096


class Matcher:
    """The state of one generation in one grammar.

    `first_mask`: the grammar's mask before any token, computed once when it was compiled.
    llguidance computes a mask in a state its matcher has not met by walking the whole token
    trie (2.5-4 ms on Gemma's 262k vocabulary for chat text, where the slicer cannot apply),
    and every request starts in that state; a copy of the words costs µs."""

    __slots__ = ("_depth", "_first", "_forced", "_m", "_spellings")

    def __init__(self, matcher: llg.LLMatcher, first_mask: NDArray[np.int32] | None = None,
                 spellings: Spellings | None = None, *, forced: bytes | None = None):
        self._m = matcher
        self._first = first_mask
        self._spellings = spellings
        self._depth = 0  # tokens committed: the first mask holds at 0 only
        # a long forced run and the depth it holds at (see forced_bytes); `forced`: the one
        # before any token, where it is known
        self._forced: tuple[int, bytes] | None = (0, forced) if forced else None

    @property
    def llg(self) -> llg.LLMatcher:
        """llguidance's matcher itself: for benchmarks that measure llguidance's own path."""
        return self._m

    def copy(self) -> Matcher:
        twin = Matcher(self._m.deep_copy(), self._first, self._spellings)
        twin._depth = self._depth
        twin._forced = self._forced
        return twin

    def accept_tokens(self, tokens: Sequence[int]) -> bool:
        """Commit `tokens`; False (and the matcher in error) where the grammar refuses one."""
        ok = bool(self._m.consume_tokens(list(tokens)))
        forced, self._forced = self._forced, None
        if ok:
            if forced is not None and forced[0] == self._depth and self._spellings:
                # what is left of a long forced run once these tokens spelled its start
                spelled = self._spellings.spelled(tokens)
                if spelled is not None and len(spelled) < len(forced[1]) \
                        and forced[1].startswith(spelled):
                    self._forced = (self._depth + len(tokens), forced[1][len(spelled):])
            self._depth += len(tokens)
        else:
            self._first = None  # (in error: its state is llguidance's alone)
        return ok

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, in order, the grammar allows from here, committing none."""
        return int(self._m.validate_tokens(list(tokens))) if tokens else 0

    def rollback(self, n: int) -> None:
        """Undo the last `n` committed tokens."""
        if n:
            self._m.rollback(n)
            self._depth -= n
            self._forced = None

    def fill_mask(self, words: NDArray[np.int32]) -> None:
        """The allowed next tokens as a bitmask (bit i of word i // 32: token i): every token
        `accept_tokens` takes (see `widen`)."""
        if self._depth == 0 and self._first is not None and len(words) == len(self._first):
            np.copyto(words, self._first)  # (widened when it was compiled)
            return
        self._m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        self.widen(words)

    def widen(self, words: NDArray[np.int32]) -> None:
        """Add to llguidance's mask `words`, computed in this state, the tokens it leaves out.

        Where the grammar forces some bytes, llguidance masks every token but the first of
        its own tokenization of them ("forcing by mask"), yet any token spelling a prefix of
        those bytes keeps the output valid, and `accept_tokens` (so the lazy one-token check)
        takes it. After a model's `t`, llguidance forces `e|chn|ical`; a masked pick would have
        to take `e` where an unmasked one takes the model's own `echn`. With these tokens the
        mask is the set of valid tokens everywhere, so that the lazy check and the mask agree
        (greedy picks the same token either way) and the model, not a tokenization, chooses
        how forced text is split. Only a mask of one token can be such a mask."""
        if self._spellings is None or np.count_nonzero(words) != 1:
            return
        at = int(np.flatnonzero(words)[0])
        word = int(words[at]) & 0xFFFFFFFF
        if word & (word - 1):
            return
        forced = self.forced_bytes()
        if not forced:
            return
        bits = words.view(np.uint32)
        for token in self._spellings.prefixes_of(forced):
            if self._m.validate_tokens([token]) == 1:
                bits[token >> 5] |= np.uint32(1 << (token & 31))

    def forced_bytes(self) -> bytes:
        """The bytes every continuation starts with (empty where the grammar has a choice).

        llguidance computes them holding the GIL, in time that grows with their length (a
        1 MB literal: 0.55 s a call, and the event loop frozen meanwhile, at every decoding
        step). A run longer than LONG_FORCED is computed once: after tokens that spell its
        start, the rest of it is still forced (every continuation began with all of it), so
        it is what is kept, until it runs out or a rollback."""
        if self._forced is not None and self._forced[0] == self._depth:
            return self._forced[1]
        forced = bytes(self._m.compute_ff_bytes())
        self._forced = (self._depth, forced) if len(forced) > LONG_FORCED else None
        return forced

    def forced_tokens(self) -> list[int]:
        """llguidance's tokenization of the forced bytes (boundary-safe, not canonical)."""
        return list(self._m.compute_ff_tokens())

    def is_stopped(self) -> bool:
        """Nothing but the end can follow."""
        return bool(self._m.is_stopped())

    def is_accepting(self) -> bool:
        """The output may end here."""
        return bool(self._m.is_accepting())

    def is_error(self) -> bool:
        return bool(self._m.is_error())

    def error(self) -> str:
        """llguidance's message, without its state dump."""
        return str(self._m.get_error()).split("\n<")[0].strip()


class Spellings:
    """The tokens of a vocabulary by the bytes they spell, compactly (a sorted array of the
    bytes' hashes, 12 bytes a token; a dict of bytes would hold ~40 MB for Gemma's 262k), to
    find the tokens spelling a prefix of some bytes."""

    def __init__(self, tokenizer: llg.LLTokenizer):
        self._tok = tokenizer
        ids: list[int] = []
        keys: list[int] = []
        longest = 0
        for token in range(tokenizer.vocab_size):
            if tokenizer.is_special_token(token):
                continue
            spelled = tokenizer.decode_bytes([token])
            if spelled:
                ids.append(token)
                keys.append(hash(spelled))  # (this process's hash: the index lives in it)
                longest = max(longest, len(spelled))
        order = np.argsort(np.array(keys, dtype=np.int64), kind="stable")
        self._keys = np.array(keys, dtype=np.int64)[order]
        self._ids = np.array(ids, dtype=np.int32)[order]
        self._longest = longest

    def spelled(self, tokens: Sequence[int]) -> bytes | None:
        """The bytes `tokens` spell; None where one is a special token (a marker, not text)."""
        if any(self._tok.is_special_token(t) for t in tokens):
            return None
        return bytes(self._tok.decode_bytes(list(tokens)))

    def prefixes_of(self, data: bytes) -> list[int]:
        """The tokens spelling data[:n] for some n >= 1, shortest first."""
        probes = [hash(data[:n]) for n in range(1, min(len(data), self._longest) + 1)]
        lo = np.searchsorted(self._keys, probes, side="left").tolist()
        hi = np.searchsorted(self._keys, probes, side="right").tolist()
        found: list[int] = []
        for n, (a, b) in enumerate(zip(lo, hi, strict=True), start=1):
            for token in self._ids[a:b].tolist():
                if self._tok.decode_bytes([token]) == data[:n]:  # not a mere hash collision
                    found.append(token)
        return found


@functools.lru_cache(maxsize=8)
def spellings(tokenizer: llg.LLTokenizer) -> Spellings:
    """The one `Spellings` of a tokenizer (built in ~0.3 s for 262k tokens)."""
    return Spellings(tokenizer)


# Grammars up to this many characters of Lark are warmed (`warm`): a chat turn's, a few small
# tools'. A larger one is not: copies share its lexer and the lexer's expression budget, which a
# mask of a large grammar can spend (see GrammarCompiler._finish).
WARM_MAX_CHARS = 4096


def warm(matcher: llg.LLMatcher, first_mask: NDArray[np.int32],
         tokenizer: llg.LLTokenizer) -> llg.LLMatcher:
    """A copy of the pristine `matcher` whose cache holds the mask after an ordinary first word,
    or `matcher` itself where that cannot be done.

    llguidance keeps the last mask a matcher computed, for the state it was computed in, and
    copies inherit it. Every request takes its first mask from `first_mask` (Matcher), so a
    copy's first mask computed by llguidance is the one after its first token: in free text,
    after any word, one and the same state. Computed here once, rolled back, so requests find
    it instead of walking the trie (2.5-4 ms on Gemma's vocabulary). A first token that leads
    elsewhere costs what it did before. Done on a copy: llguidance cannot roll back grammars
    with `max_tokens` or `stop` lexemes, and a failed rollback leaves the matcher in error."""
    token = _ordinary_word(first_mask, tokenizer)
    if token is None:
        return matcher
    warmed = matcher.deep_copy()
    if not warmed.consume_token(token):
        return matcher
    words = np.zeros_like(first_mask)
    warmed.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
    warmed.rollback(1)
    if warmed.is_error() or warmed.is_stopped():
        return matcher
    return warmed


def _ordinary_word(mask: NDArray[np.int32], tokenizer: llg.LLTokenizer) -> int | None:
    """The first allowed token (by id) spelling a lowercase word of letters, else None."""
    allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
    for token in allowed[allowed < tokenizer.vocab_size][:8192].tolist():
        if tokenizer.is_special_token(token):
            continue
        text = tokenizer.decode_bytes([token])
        if text.isalpha() and text.islower():
            return int(token)
    return None
