"""The decoding loop: mask, sample, commit, forced tokens."""

from .loop import Decoded, FinishReason, decode
from .replay import Replay
from .sampling import PickStats, SamplingParams, TokenPicker

__all__ = ["Decoded", "FinishReason", "PickStats", "Replay", "SamplingParams", "TokenPicker",
           "decode"]
