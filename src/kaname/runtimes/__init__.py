"""Model execution behind one protocol: llama.cpp (embedded), random-logits and scripted test
models.

`llamacpp` is imported lazily so that code needing only the protocol or the random runtimes
does not load llama.cpp's shared library.
"""

from .base import Runtime
from .random_logits import AdversarialRuntime, RandomLogitsRuntime
from .scripted import ScriptedRuntime

__all__ = ["AdversarialRuntime", "RandomLogitsRuntime", "Runtime", "ScriptedRuntime"]
