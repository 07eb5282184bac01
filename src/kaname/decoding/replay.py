"""Checking text that was generated elsewhere (an upstream server) against a grammar.

The upstream was sent the same Lark grammar this matcher was built from; replaying its output
token by token is the independent proof that it enforced it. Where the upstream returns the
token ids it generated (vLLM's `return_token_ids`), those very tokens are replayed: exact.
Otherwise its text is tokenized again, which is the same language but not always the same
tokens (text that is not valid UTF-8 comes back as U+FFFD, a budget in tokens counts other
tokens), so token ids are asked for wherever the upstream has them.
"""

from __future__ import annotations

import codecs

import llguidance as llg

from ..errors import NotEnforcedError
from ..grammar import CompiledConstraint


class Replay:
    """Replays upstream output through kaname's own matcher as it streams: only text the
    grammar accepts is passed on.

    `feed_tokens`: the upstream's token ids, consumed as they are, with the text the upstream
    sent for them; the text passed on is their decoding, no further than the upstream's text
    reaches (an upstream holds back what may begin a stop string and drops the stop string
    itself, while the tokens that spell it are generated all the same).
    `feed`: text only; the last token of the text so far is held back, since more text may
    merge into it, and a changed tokenization rolls the matcher back. One replay uses one of
    the two."""

    def __init__(self, compiled: CompiledConstraint, tokenizer: llg.LLTokenizer):
        self.compiled = compiled
        self.m = compiled.new_matcher()
        self.tok = tokenizer
        self.text = ""
        self.tokens: list[int] = []
        self.sent = 0
        self.exact = False  # fed token ids
        self.upstream_text = ""  # exact mode: the text the upstream sent with its tokens
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed_tokens(self, ids: list[int], text: str) -> str:
        """Accept the upstream's next tokens (and the text it sent with them); return the text
        that is now both checked and sent by the upstream."""
        self.exact = True
        self.upstream_text += text
        if ids and not self.m.accept_tokens(ids):
            raise NotEnforcedError(f"the upstream's tokens leave the grammar at "
                                   f"{self.tok.decode_str(ids)[:60]!r}: "
                                   f"{self.m.error() or 'token not allowed'}")
        self.tokens += ids
        self.text += self._decoder.decode(self.tok.decode_bytes(ids))
        # By length, not by comparing characters: the two decodings may differ (a split UTF-8
        # character, a token without bytes), and a mismatch must not stall the stream.
        return self._take(min(len(self.text), len(self.upstream_text)))

    def _take(self, upto: int | None = None) -> str:
        end = len(self.text) if upto is None else upto
        out = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        return out

    def _advance(self, target: list[int]) -> None:
        common = 0
        for a, b in zip(self.tokens, target, strict=False):
            if a != b:
                break
            common += 1
        if common < len(self.tokens):
            self.m.rollback(len(self.tokens) - common)
            self.tokens = self.tokens[:common]
            if self.m.is_error():  # llguidance cannot roll back max_tokens= lexemes: replay
                self.m = self.compiled.new_matcher()
                self.tokens, common = [], 0
        new = target[common:]
        if new and not self.m.accept_tokens(new):
            raise NotEnforcedError(f"the upstream text leaves the grammar near "
                                   f"{self.tok.decode_str(new)[:60]!r}: "
                                   f"{self.m.error() or 'token not allowed'}")
        self.tokens = list(target)

    def feed(self, chunk: str) -> str:
        """Accept a chunk of text; return the newly validated text."""
        self.text += chunk
        toks = self.tok.tokenize_str(self.text, parse_special=True)
        self._advance(toks[:-1])
        valid = self.tok.decode_bytes(self.tokens).decode("utf-8", errors="ignore")
        # A changed tokenization may validate a shorter prefix for a moment; what was passed
        # on is still a prefix of the text, so only text beyond it goes out.
        out = valid[self.sent:]
        self.sent = max(self.sent, len(valid))
        return out

    def finish(self, finish_reason: str, end_marker: str, *,
               stopped_by_string: bool = False) -> str:
        """Check the end of the output; return the text not passed on yet. A "stop" must
        complete the grammar (with `end_marker`, the end of turn an engine does not echo)
        unless the upstream stopped at one of the request's stop strings."""
        if self.exact:
            self.text += self._decoder.decode(b"", final=True)
            if stopped_by_string:
                # the text ends where the upstream's does: before the stop string; the grammar
                # checked every token up to there, and the rest of it is not owed
                self.text = self.text[:len(self.upstream_text)]
                return self._take()
        else:
            self._advance(self.tok.tokenize_str(self.text, parse_special=True))
        if finish_reason == "stop" and not self.m.is_accepting():
            # Engines do not echo the end-of-sequence token they stopped at: the turn's end
            # marker may be missing from the text.
            end = self.tok.tokenize_str(end_marker, parse_special=True) if end_marker else []
            probe = self.m.copy()
            if end and probe.accept_tokens(end) and probe.is_accepting():
                self.m = probe
                self.text += end_marker
            elif not stopped_by_string:
                raise NotEnforcedError("the upstream stopped before the grammar was complete")
        return self._take()
