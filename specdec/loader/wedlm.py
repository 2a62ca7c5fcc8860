"""Load a WeDLM checkpoint directory (as Tencent publishes it) onto mlx-lm's own classes.

A WeDLM directory holds config.json (architectures ``WeDLMForDiffusionLM`` or model type
``wedlm``, optionally ``mask_token_id``), *.safetensors and the tokenizer files. The
network is a plain causal Qwen decoder: Qwen3-initialised checkpoints (WeDLM-8B; q/k
norms in the weights) load as mlx-lm's ``qwen3``, Qwen2.5-initialised ones (WeDLM-7B) as
``qwen2`` — mlx-lm's model type is overridden, no architecture is written here. The mask
token id comes from the config, else the tokenizer's ``<|mask|>``, else Tencent's engine's
default (151665). The loaded model carries its ``WedlmSettings`` as ``wedlm_settings``;
``core.wedlm.settings_of(model)`` reads it and raises a clear error for any other model.
Tests: tests/loader/test_wedlm.py, tests/decode/test_wedlm.py (a synthetic directory with the
same file names and keys).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.nn as nn
from mlx_lm.utils import load as mlx_lm_load

from ..core.wedlm import DEFAULT_MASK_TOKEN_ID, WedlmSettings, attach_settings
from .errors import ModelLoadError

MASK_TOKEN = "<|mask|>"
WEDLM_ARCHITECTURES = ("WeDLMForDiffusionLM", "WeDLMForCausalLM")


@dataclass(frozen=True)
class WedlmCheckpoint:
    """A loaded WeDLM checkpoint: the mlx-lm model, its tokenizer and WeDLM's settings."""

    model: nn.Module
    tokenizer: Any
    settings: WedlmSettings
    base: str  # the mlx-lm model type it was loaded as: "qwen3" or "qwen2"


def read_config(path: Path) -> dict[str, Any]:
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelLoadError(f"{path} has no config.json: point at a WeDLM checkpoint directory")
    return json.loads(cfg.read_text())


def is_wedlm_config(config: dict[str, Any]) -> bool:
    """True for a WeDLM config (its architecture or model type names WeDLM)."""
    archs = config.get("architectures") or ()
    return str(config.get("model_type", "")).lower() == "wedlm" or any(
        str(a) in WEDLM_ARCHITECTURES or str(a).lower().startswith("wedlm") for a in archs)


def is_wedlm_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "config.json").is_file() and is_wedlm_config(read_config(p))


def _weight_names(path: Path) -> set[str]:
    """Tensor names from the safetensors headers (the data is not read)."""
    names: set[str] = set()
    for f in sorted(path.glob("*.safetensors")):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            names.update(k for k in json.loads(fh.read(n)) if k != "__metadata__")
    if not names:
        raise ModelLoadError(f"{path} has no *.safetensors weights: download the whole checkpoint")
    return names


def base_type(path: Path) -> str:
    """``qwen3`` when the weights have per-head q/k norms (Qwen3-initialised), else ``qwen2``."""
    return "qwen3" if any(n.endswith("q_norm.weight") for n in _weight_names(path)) else "qwen2"


def _mask_id(config: dict[str, Any], tokenizer: Any) -> int:
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    vocab = tokenizer.get_vocab()
    return int(vocab[MASK_TOKEN]) if MASK_TOKEN in vocab else DEFAULT_MASK_TOKEN_ID


def load_wedlm(path: str | Path, **settings: Any) -> WedlmCheckpoint:
    """Load the WeDLM directory ``path``; ``settings`` override WeDLM's defaults (window,
    entropy_threshold, position_penalty). Raises ``ModelLoadError`` saying what to do."""
    p = Path(path).expanduser()
    config = read_config(p)
    if not is_wedlm_config(config):
        raise ModelLoadError(
            f"{p} is not a WeDLM checkpoint (config.json architectures "
            f"{config.get('architectures')}, model_type {config.get('model_type')!r}): "
            "--decoder wedlm and --draft-type wedlm need a WeDLM model such as "
            "tencent/WeDLM-8B-Instruct")
    base = base_type(p)
    try:
        loaded = mlx_lm_load(str(p), model_config={"model_type": base})  # (model, tokenizer)
        model, tokenizer = loaded[0], loaded[1]
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"mlx-lm could not load the WeDLM checkpoint {p} as {base}: {exc}. "
                             "Check that the directory is complete.") from exc
    s = replace(WedlmSettings(mask_token_id=_mask_id(config, tokenizer)), **settings)
    rows = model.model.embed_tokens.weight.shape[0]
    if s.mask_token_id >= rows:
        raise ModelLoadError(f"{p}: mask token id {s.mask_token_id} is outside the model's "
                             f"{rows} embedding rows: set mask_token_id in config.json")
    attach_settings(model, s)
    return WedlmCheckpoint(model, tokenizer, s, base)


