"""`kaname serve` whose random test model takes $KANAME_TEST_STEP_S seconds a batch step (as a
real model would: one step advances every running sequence), so that a test can hold a
generation slot for a known time and queue work behind it; a prompt holding SLOW_PREFILL takes
$KANAME_TEST_PREFILL_S seconds more before its first token (a long prefill, which a cancelled
generation cannot cut short). Run as `python tests/slowserve.py SERVE-ARGS...`."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from kaname.cli import main
from kaname.runtimes.base import ModelCall
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.stepped import StepBatch

SLOW_PREFILL = "(slow prefill)"
STEP = float(os.environ.get("KANAME_TEST_STEP_S", "0"))
PREFILL = float(os.environ.get("KANAME_TEST_PREFILL_S", "0"))
_start = RandomLogitsRuntime.start
_step = StepBatch.step


def _slow_start(self: RandomLogitsRuntime, prompt: Sequence[int]):  # type: ignore[no-untyped-def]
    if SLOW_PREFILL in self.tokenizer.decode_str(list(prompt)):
        time.sleep(PREFILL)
    return _start(self, prompt)


def _slow_step(self: StepBatch, calls: Sequence[tuple[int, ModelCall]]):  # type: ignore[no-untyped-def]
    if any(not call.fresh for _, call in calls):
        time.sleep(STEP)  # one model call for the step's tokens, as a batching model makes
    return _step(self, calls)


RandomLogitsRuntime.start = _slow_start  # type: ignore[method-assign]
StepBatch.step = _slow_step  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
