"""Load models for specdec: packaged GGUF models, any llama/qwen2/gemma3 GGUF, or mlx-lm.

Public API:
- ``load(model="smollm2-135m", *, dtype="auto") -> (mlx.nn.Module, TokenizerWrapper)``;
  ``dtype`` is one of ``DTYPES`` (auto, native, float32, float16, bfloat16: see ``api``)
- ``PACKAGED_MODELS``: name -> ``PackagedModel`` (pip packages, GGUF name, chat template?)
- ``packaged_gguf_path(name) -> Path``: the packaged model's .gguf (assembled once if chunked)
- ``ModelLoadError``: every user-facing failure; the message says what to do.

GGUF models are converted once to an mlx-lm directory (float32 safetensors, config.json,
tokenizer) under ``$SPECDEC_CACHE_DIR`` (default ``~/.cache/specdec``) and loaded from
there with mlx-lm's own model classes. Importing this package does not import mlx.
Tests: tests/loader/test_api.py.
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
