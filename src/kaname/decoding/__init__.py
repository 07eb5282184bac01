"""The decoding loop: mask, sample, commit, forced tokens."""

from .loop import Decoded, FinishReason, decode
from .sampling import PickStats, SamplingParams, TokenPicker

__all__ = ["Decoded", "FinishReason", "PickStats", "SamplingParams", "TokenPicker", "decode"]
