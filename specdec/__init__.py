"""specdec: lossless speculative decoding for mlx-lm models.

    import specdec
    model, tokenizer = specdec.load("smollm2-135m")
    result = specdec.generate(model, tokenizer, "…", drafter="ngram", max_tokens=256)

Names are imported lazily so that ``import specdec`` does not load mlx: the CLI must be
able to preload OpenBLAS before mlx starts (see ``specdec.backend``).
Tests: tests/test_engine.py (the API), tests/test_layers.py.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load": "specdec.loader",
    "generate": "specdec.engine",
    "stream_generate": "specdec.engine",
    "token_stream": "specdec.engine",
    "GenerationResponse": "specdec.engine",
    "GenerationResult": "specdec.engine",
    "check_parity": "specdec.parity",
    "make_prompt_cache": "specdec.cache.prompt_cache",
    "load_prompt_cache": "specdec.cache.prompt_cache",
    "PromptCache": "specdec.cache.prompt_cache",
    "DraftSpec": "specdec.drafters",
    "DraftResources": "specdec.drafters",
    "build_drafter": "specdec.drafters",
    "prepare_resources": "specdec.resources",
    "drafter_for": "specdec.resources",
    "Generation": "specdec.decode.generation",
    "Drafter": "specdec.drafters",
    "Proposal": "specdec.drafters",
    "SpecStats": "specdec.core.stats",
    "generate_wedlm": "specdec.decode.wedlm",  # WeDLM's lossy parallel decoder (docs/wedlm.md)
    "WedlmSettings": "specdec.core.wedlm",
    "load_wedlm": "specdec.loader.wedlm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'specdec' has no attribute {name!r}")
