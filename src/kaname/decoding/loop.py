"""The decoding loop: pick → commit → forced tokens in one runtime call → repeat.

Stops when the grammar is complete (no token but end-of-sequence can follow), when the model
ends an accepting output, at a stop string, or at max_tokens ("length": never reported as
valid, since the output is cut short).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import llguidance as llg

from ..runtimes.base import Runtime
from .generation import FinishReason, Generation, Usage
from .masks import MaskBuffer
from .sampling import SamplingParams, TokenPicker, dead_end


def decode(
    runtime: Runtime,
    prompt: Sequence[int],
    matcher: llg.LLMatcher | None,
    params: SamplingParams,
    *,
    max_tokens: int,
    stop: Sequence[str] = (),
    lazy: bool = True,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> Generation:
    """Generate up to `max_tokens` tokens after `prompt`; `matcher=None` means unconstrained.

    `on_tokens` sees each step's new tokens (sampled + forced) as they are committed, except a
    step that completes a stop string; an exception it raises ends the generation (that is how
    a server cancels one).
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    tok = runtime.tokenizer
    masks = MaskBuffer(runtime.n_vocab, tok.vocab_size)
    eos = frozenset(runtime.eos_token_ids)
    picker = TokenPicker(params, masks, eos, lazy=lazy)
    out: list[int] = []
    forced = 0
    costs: list[int] = []
    started = time.perf_counter_ns()
    logits = runtime.start(prompt)
    model_ns = time.perf_counter_ns() - started
    first_token_ns = 0
    finish: FinishReason = "length"
    text_bytes = b""
    while len(out) < max_tokens:
        if matcher is not None and matcher.is_stopped():
            finish = "stop"
            break
        t0 = time.perf_counter_ns()
        if matcher is None:
            token = picker.pick_unconstrained(logits)
        else:
            token = picker.pick(logits, matcher)
        if token in eos:
            costs.append(time.perf_counter_ns() - t0)
            finish = "stop"
            break
        new = [token]
        if matcher is not None:
            if not matcher.consume_token(token):
                raise dead_end(matcher)  # a parser limit, or an internal error
            ff = matcher.compute_ff_tokens()[: max_tokens - len(out) - 1]
            if ff:
                if not matcher.consume_tokens(ff):
                    raise dead_end(matcher)
                forced += len(ff)
                new += ff
        costs.append(time.perf_counter_ns() - t0)
        if not first_token_ns:
            first_token_ns = time.perf_counter_ns() - started
        out += new
        if stop:
            text_bytes += tok.decode_bytes(new)
            hit = _stop_at(text_bytes, stop)
            if hit is not None:
                done = _done(tok, prompt, out, text_bytes[:hit[0]], "stop", forced, picker,
                             costs, model_ns, first_token_ns)
                done.stop_sequence = hit[1]
                return done
        if on_tokens is not None:
            on_tokens(new)
        if len(out) >= max_tokens or (matcher is not None and matcher.is_stopped()):
            finish = "stop" if matcher is not None and matcher.is_stopped() else "length"
            break
        t1 = time.perf_counter_ns()
        logits = runtime.advance(new)
        model_ns += time.perf_counter_ns() - t1
    return _done(tok, prompt, out, tok.decode_bytes(out), finish, forced, picker, costs,
                 model_ns, first_token_ns)


def _stop_at(text: bytes, stop: Sequence[str]) -> tuple[int, str] | None:
    """Where the first stop string starts, and which one it is."""
    hits = [(i, s) for s in stop if (i := text.find(s.encode())) >= 0]
    return min(hits) if hits else None


def _done(tok: llg.LLTokenizer, prompt: Sequence[int], out: list[int], text: bytes,
          finish: FinishReason, forced: int, picker: TokenPicker, costs: list[int],
          model_ns: int, first_token_ns: int) -> Generation:
    return Generation(text.decode("utf-8", errors="replace"), finish,
                      Usage(len(prompt), len(out), forced), tokens=out, stats=picker.stats,
                      constraint_ns=costs, model_ns=model_ns, first_token_ns=first_token_ns)
