"""Load models for specdec: packaged GGUF models, any llama/qwen2/gemma3 GGUF, or mlx-lm.

Public API: ``load(model, *, dtype="auto")`` -> (model, tokenizer), ``DTYPES``,
``PACKAGED_MODELS``, ``packaged_gguf_path(name)``, ``ModelLoadError`` (every user-facing
failure; the message says what to do). GGUF models are converted once to an mlx-lm
directory under ``$SPECDEC_CACHE_DIR`` (default ``~/.cache/specdec``). Importing this
package does not import mlx. Full contract: docs/loading.md#the-loader. Tests: tests/loader/test_api.py.
"""

from __future__ import annotations

from .api import DTYPES, load
from .errors import ModelLoadError
from .registry import PACKAGED_MODELS, PackagedModel, packaged_gguf_path

__all__ = [
    "DTYPES",
    "PACKAGED_MODELS",
    "ModelLoadError",
    "PackagedModel",
    "load",
    "packaged_gguf_path",
]
