"""The decoding loop: mask, sample, commit, forced tokens."""

from .generation import Enforced, FinishReason, Generation, Usage
from .loop import decode, decoding, run_steps
from .replay import Replay
from .sampling import PickStats, SamplingParams, TokenPicker

__all__ = ["Enforced", "FinishReason", "Generation", "PickStats", "Replay", "SamplingParams",
           "TokenPicker", "Usage", "decode", "decoding", "run_steps"]
