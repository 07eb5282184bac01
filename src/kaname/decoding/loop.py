"""The decoding loop: pick → commit → draft → the model checks the draft in one call → repeat.

Each step picks a token from the model's logits under the grammar, then proposes a draft of
the tokens likely to follow (the grammar's forced bytes, or a continuation found in the prompt:
`drafts.py`) and evaluates the token and the draft in one runtime call, with logits at every
draft position. A draft token is kept only where the picker, run on the logits at its position
exactly as it would run without drafts, chooses it; at the first disagreement the picker's own
choice is the next token and the rest is rolled back (matcher and KV cache). So drafting never
changes an answer: greedy output is byte-identical to decoding one token per step, and sampled
output has the same distribution (a draft is accepted with the probability the picker gives
it, and a rejection leaves exactly the rest of that distribution). `drafting="force"` is the
old jump-forward (forced tokens committed without the model's say), kept for comparison.

The loop is a generator of model calls (`decoding`): `decode` makes its calls on one runtime,
and the server's scheduler makes the calls of many sequences in one batched step.

Stops when the grammar is complete (no token but end-of-sequence can follow), when the model
ends an accepting output, at a stop string, or at max_tokens ("length": never reported as
valid, since the output is cut short).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from ..grammar.matcher import Matcher
from ..runtimes.base import ModelCall, ModelFacts, Rows, Runtime
from .drafts import Drafter, DraftSource
from .generation import FinishReason, Generation, Usage
from .masks import MaskBuffer
from .sampling import SamplingParams, TokenPicker, dead_end

# verify: forced tokens and prompt n-grams as drafts the model verifies (exact);
# force: forced tokens committed unverified (changes answers); off: one token per model call
Drafting = Literal["verify", "force", "off"]

# A generation as the model calls it makes: send each call's rows back; returns the result.
Steps = Generator[ModelCall, Rows, Generation]


class _StopString(Exception):
    def __init__(self, at: int, sequence: str):
        self.at, self.sequence = at, sequence


def decode(
    runtime: Runtime,
    prompt: Sequence[int],
    matcher: Matcher | None,
    params: SamplingParams,
    *,
    max_tokens: int,
    stop: Sequence[str] = (),
    lazy: bool = True,
    on_tokens: Callable[[list[int]], None] | None = None,
    drafting: Drafting = "verify",
    drafter: DraftSource | None = None,
) -> Generation:
    """Generate up to `max_tokens` tokens after `prompt` on `runtime`; `matcher=None` means
    unconstrained (and undrafted: the baseline). `drafter`: where drafts come from with
    `drafting="verify"` (default: the grammar's forced bytes and prompt lookup, `Drafter`).

    `on_tokens` sees the new tokens as they are committed, except those that complete a stop
    string; an exception it raises ends the generation (that is how a server cancels one).
    """
    return run_steps(runtime, decoding(runtime, runtime.rollback, prompt, matcher, params,
                                       max_tokens=max_tokens, stop=stop, lazy=lazy,
                                       on_tokens=on_tokens, drafting=drafting,
                                       drafter=drafter))


def decoding(
    model: ModelFacts,
    rollback: Callable[[int], None],
    prompt: Sequence[int],
    matcher: Matcher | None,
    params: SamplingParams,
    *,
    max_tokens: int,
    stop: Sequence[str] = (),
    lazy: bool = True,
    on_tokens: Callable[[list[int]], None] | None = None,
    drafting: Drafting = "verify",
    draft_room: Callable[[], int] | None = None,
    drafter: DraftSource | None = None,
) -> Steps:
    """`decode` as the model calls it would make, for whoever makes them (`rollback` forgets
    the sequence's last n tokens); nothing runs before the first `next`. `draft_room()`: the
    most draft tokens the next call may carry (a batch's scheduler keeps its steps from
    growing with drafts; the answer is the same with any room, since drafts are verified)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    return _Run(model, rollback, prompt, matcher, params, max_tokens, stop, lazy, on_tokens,
                drafting, draft_room, drafter).steps()


def run_steps(runtime: Runtime, steps: Steps) -> Generation:
    """Make a generation's calls on one runtime, one at a time."""
    call = next(steps)
    while True:
        rows: Rows
        if call.fresh:
            rows = runtime.start(call.tokens)[None]
        else:
            rows = runtime.evaluate(call.tokens, call.logits_at, call.only)
        try:
            call = steps.send(rows)
        except StopIteration as done:
            result: Generation = done.value
            return result


class _Run:
    def __init__(self, model: ModelFacts, rollback: Callable[[int], None], prompt: Sequence[int],
                 matcher: Matcher | None, params: SamplingParams, max_tokens: int,
                 stop: Sequence[str], lazy: bool,
                 on_tokens: Callable[[list[int]], None] | None, drafting: Drafting,
                 draft_room: Callable[[], int] | None = None,
                 drafter: DraftSource | None = None):
        self.model, self.rollback, self.prompt, self.matcher = model, rollback, prompt, matcher
        self.max_tokens, self.stop, self.on_tokens = max_tokens, stop, on_tokens
        self.drafting = drafting if matcher is not None else "off"
        self.tok = model.tokenizer
        self.eos = frozenset(model.eos_token_ids)
        self.picker = TokenPicker(params, MaskBuffer(model.n_vocab, self.tok.vocab_size),
                                  self.eos, lazy=lazy)
        self.drafter: DraftSource | None = None
        if self.drafting == "verify":
            self.drafter = drafter if drafter is not None else Drafter(self.tok, prompt)
        # greedy reads only the allowed tokens' logits: where they are few, ask for them alone
        self.few = (FewAllowed(MaskBuffer(model.n_vocab, self.tok.vocab_size), self.eos)
                    if matcher is not None and params.greedy and model.answers_only else None)
        self.draft_room = draft_room
        self.out: list[int] = []
        self.text = b""  # of `out`, kept only where stop strings are watched
        self.forced = self.drafted = self.accepted = 0
        self.costs: list[int] = []
        self.model_ns = 0
        self.first_token_ns = 0
        self.started = 0

    def _call(self, call: ModelCall) -> Generator[ModelCall, Rows, Rows]:
        """One model call: its rows, and the time spent waiting for them counted as model
        time (in a batch, that is the whole step's)."""
        t = time.perf_counter_ns()
        rows = yield call
        self.model_ns += time.perf_counter_ns() - t
        return rows

    def _row(self, rows: Rows, j: int) -> NDArray[np.float32]:
        """Row j of a call's, its reading counted as model time (a runtime may compute a row
        only when it is read: `Rows`)."""
        t = time.perf_counter_ns()
        row = rows[j]
        self.model_ns += time.perf_counter_ns() - t
        return row

    def steps(self) -> Steps:
        self.started = time.perf_counter_ns()
        logits: NDArray[np.float32] = (yield from self._call(
            ModelCall(self.prompt, [len(self.prompt) - 1], fresh=True)))[0]
        m = self.matcher
        pending: int | None = None  # the model's own choice where it disagreed with a draft
        finish: FinishReason = "length"
        try:
            while len(self.out) < self.max_tokens:
                if m is not None and m.is_stopped():
                    finish = "stop"
                    break
                t0 = time.perf_counter_ns()
                if pending is not None:
                    token, pending = pending, None
                elif m is None:
                    token = self.picker.pick_unconstrained(logits)
                else:
                    token = self.picker.pick(logits, m)
                if token in self.eos:
                    self.costs.append(time.perf_counter_ns() - t0)
                    finish = "stop"
                    break
                new = [token]
                if m is not None:
                    if not m.accept_tokens([token]):
                        raise dead_end(m)  # a parser limit, or an internal error
                    if self.drafting == "force":
                        ff = m.forced_tokens()[: self.max_tokens - len(self.out) - 1]
                        if ff:
                            if not m.accept_tokens(ff):
                                raise dead_end(m)
                            self.forced += len(ff)
                            new += ff
                self.costs.append(time.perf_counter_ns() - t0)
                self._commit(new)
                done = len(self.out) >= self.max_tokens or (m is not None and m.is_stopped())
                if done:
                    finish = "stop" if m is not None and m.is_stopped() else "length"
                    break
                draft: list[int] = []
                draft_forced, probe = 0, False
                if self.drafter is not None and m is not None:
                    t2 = time.perf_counter_ns()
                    room = self.max_tokens - len(self.out)
                    if self.draft_room is not None:
                        room = min(room, self.draft_room())
                    proposed = self.drafter.propose(m, room)
                    draft, draft_forced, probe = proposed.tokens, proposed.forced, proposed.probe
                    self.costs[-1] += time.perf_counter_ns() - t2
                if not draft:
                    t2 = time.perf_counter_ns()
                    only = None if self.few is None or m is None else [self.few.of(m)]
                    self.costs[-1] += time.perf_counter_ns() - t2
                    logits = self._row((yield from self._call(
                        ModelCall(new, [len(new) - 1], only=only))), 0)
                    continue
                assert m is not None
                kept, pending, logits = yield from self._verify(new, draft, m, probe=probe)
                self.drafted += len(draft)
                self.accepted += kept
                self.forced += min(kept, draft_forced)
                if kept:
                    self._commit(draft[:kept])
        except _StopString as hit:
            return self._done(self.text[:hit.at], "stop", hit.sequence)
        if finish == "length" and m is not None and m.is_stopped():
            finish = "stop"  # the last draft completed the grammar at max_tokens
        return self._done(self.tok.decode_bytes(self.out), finish, None)

    def _verify(self, new: list[int], draft: list[int], m: Matcher, *, probe: bool = False
                ) -> Generator[ModelCall, Rows, tuple[int, int | None, NDArray[np.float32]]]:
        """Evaluate `new` and the draft with logits at every position, in calls of at most
        `exact_batch` tokens, checking each draft token as its logits come: how many the
        picker chooses in a row (committed to `m`), its own choice where it first disagrees
        (the rest rolled back), and the logits after the last token kept.

        `probe`: the first call takes one draft token only. A prompt-lookup draft is all or
        nothing as a rule: about half are wrong from their first token, the rest mostly kept
        whole (measured on the bench cases), and each token of a call costs (Gemma 3 270M
        here: ~3 ms a token up to the hidden state, ~8 ms more for a row a runtime computes
        whether read or not, as a batch's); a kept draft costs the same calls either way,
        only in another order."""
        seq = new + draft
        done = 0  # tokens of `seq` evaluated
        held = len(self.prompt) + len(self.out) - len(new)  # the sequence's KV cells
        while True:
            step = self.model.exact_batch or len(seq)
            cells = self.model.exact_cells
            if cells is not None:  # a call of several tokens must end within them
                step = max(1, min(step, cells - held - done))
            size = min(step, len(new) + 1) if probe and not done else step
            chunk = seq[done:done + size]
            t2 = time.perf_counter_ns()
            only = None if self.few is None else self.few.along(
                m, draft, done - len(new) + 1, len(chunk))
            self.costs[-1] += time.perf_counter_ns() - t2
            rows = yield from self._call(ModelCall(chunk, range(len(chunk)), only=only))
            for j in range(len(chunk)):
                i = done + j - len(new) + 1  # rows[j] chooses draft[i]
                if i < 0:
                    continue
                row = self._row(rows, j)
                if i == len(draft):
                    return len(draft), None, row
                t2 = time.perf_counter_ns()
                choice = self.picker.pick(row, m)
                if choice != draft[i]:
                    self.rollback(done + len(chunk) - len(new) - i)
                    self.costs[-1] += time.perf_counter_ns() - t2
                    return i, choice, row
                if not m.accept_tokens([draft[i]]):
                    raise dead_end(m)
                self.costs[-1] += time.perf_counter_ns() - t2
            done += len(chunk)

    def _commit(self, new: list[int]) -> None:
        if not self.first_token_ns:
            self.first_token_ns = time.perf_counter_ns() - self.started
        self.out += new
        if self.drafter is not None:
            self.drafter.commit(new)
        if self.stop:
            self.text += self.tok.decode_bytes(new)
            hit = _stop_at(self.text, self.stop)
            if hit is not None:
                raise _StopString(*hit)
        if self.on_tokens is not None:
            self.on_tokens(new)

    def _done(self, text: bytes, finish: FinishReason, stop_sequence: str | None
              ) -> Generation:
        return Generation(
            text.decode("utf-8", errors="replace"), finish,
            Usage(len(self.prompt), len(self.out), self.forced, self.drafted, self.accepted),
            tokens=self.out, stop_sequence=stop_sequence, stats=self.picker.stats,
            constraint_ns=self.costs, model_ns=self.model_ns,
            first_token_ns=self.first_token_ns)


class FewAllowed:
    """The tokens the grammar allows where they are few, for `ModelCall.only`.

    Only where the grammar forces some bytes: the allowed tokens are then those spelling a
    prefix of them (a handful), and elsewhere a mask would cost more than it saves."""

    MOST = 256

    def __init__(self, masks: MaskBuffer, eos: frozenset[int]):
        self.masks = masks
        self.eos = np.array(sorted(eos), dtype=np.int64)

    def of(self, state: Matcher) -> NDArray[np.int64] | None:
        if not state.forced_bytes():
            return None
        self.masks.fill(state)
        ids = self.masks.allowed_ids()
        if ids is None or len(ids) > self.MOST or state.is_error():
            return None
        if state.is_accepting():
            ids = np.union1d(ids, self.eos)
        return ids

    def along(self, m: Matcher, draft: Sequence[int], first: int, n: int
              ) -> list[NDArray[np.int64] | None]:
        """For the n rows of a call whose row j chooses draft[first + j], `m` standing after
        draft[:max(first, 0)]."""
        out: list[NDArray[np.int64] | None] = []
        state = m
        at = max(first, 0)
        for j in range(n):
            i = first + j
            if i < 0:
                out.append(None)
                continue
            if i > at:
                if state is m:
                    state = m.copy()
                if not state.accept_tokens(draft[at:i]):
                    return out + [None] * (n - len(out))
                at = i
            out.append(self.of(state))
        return out


def _stop_at(text: bytes, stop: Sequence[str]) -> tuple[int, str] | None:
    """Where the first stop string starts, and which one it is."""
    hits = [(i, s) for s in stop if (i := text.find(s.encode())) >= 0]
    return min(hits) if hits else None
