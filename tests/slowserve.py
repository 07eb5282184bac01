"""`kaname serve` whose random test model takes $KANAME_TEST_STEP_S seconds a token (as a real
model would), so that a test can hold a generation slot for a known time and queue work
behind it; a prompt holding SLOW_PREFILL takes $KANAME_TEST_PREFILL_S seconds more before its
first token (a long prefill, which a cancelled generation cannot cut short). Run as
`python tests/slowserve.py SERVE-ARGS...`."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from kaname.cli import main
from kaname.runtimes.random_logits import RandomLogitsRuntime

SLOW_PREFILL = "(slow prefill)"
STEP = float(os.environ.get("KANAME_TEST_STEP_S", "0"))
PREFILL = float(os.environ.get("KANAME_TEST_PREFILL_S", "0"))
_start, _advance = RandomLogitsRuntime.start, RandomLogitsRuntime.advance
_evaluate = RandomLogitsRuntime.evaluate


def _slow_start(self: RandomLogitsRuntime, prompt: Sequence[int]):  # type: ignore[no-untyped-def]
    if SLOW_PREFILL in self.tokenizer.decode_str(list(prompt)):
        time.sleep(PREFILL)
    return _start(self, prompt)


def _slow_advance(self: RandomLogitsRuntime, tokens: Sequence[int]):  # type: ignore[no-untyped-def]
    time.sleep(STEP)
    return _advance(self, tokens)


RandomLogitsRuntime.start = _slow_start  # type: ignore[method-assign]
def _slow_evaluate(self: RandomLogitsRuntime, tokens: Sequence[int],  # type: ignore[no-untyped-def]
                   logits_at: Sequence[int]):
    time.sleep(STEP)  # one model call, as the decoding loop makes them (a token and its draft)
    return _evaluate(self, tokens, logits_at)


RandomLogitsRuntime.advance = _slow_advance  # type: ignore[method-assign]
RandomLogitsRuntime.evaluate = _slow_evaluate  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
