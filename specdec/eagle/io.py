"""EAGLE-3 heads as published: config.json + model.safetensors, read and written.

Layouts read: the EAGLE repo's (``midlayer.*``) and SpecForge / vLLM / speculators' (``layers.0.*``,
optionally ``model.``-prefixed); ``fc.weight``, ``norm.weight``, ``lm_head.weight``, ``d2t``,
``t2d``, and ``embed_tokens.weight`` when shipped (else the target's). Config fields:
``draft_vocab_size``, ``target_hidden_size`` (default hidden_size), the aux layer ids under
``eagle_config.eagle_aux_hidden_state_layer_ids`` (vLLM/SpecForge; default 2, L/2, L-3 of the target).
Ours are written as ``LlamaForCausalLMEagle3`` with ``midlayer.*`` keys and no embeddings; ours
also carry ``draft_acceptance`` (held-out acceptance by draft position, from ``train-drafter``),
from which ``chain_k`` derives the head's own draft cap in a chain (``chain_k`` in config.json
sets it; other loaders ignore both fields).
Tests: tests/eagle/test_io.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ..core.arrays import flat_tree, load_arrays
from .head import Eagle3Head, HeadConfig, default_layer_ids

_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
           "vocab_size", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
           "max_position_embeddings", "attention_bias")
_ARCH_NAMES = {"llama": "LlamaForCausalLMEagle3", "qwen2": "Qwen2ForCausalLMEagle3",
               "qwen3": "Qwen3ForCausalLMEagle3"}


class HeadFormatError(ValueError):
    """A head directory that does not hold a published-format EAGLE-3 head."""


def config_from_json(cfg: dict[str, Any], target_layers: int | None = None) -> HeadConfig:
    """``HeadConfig`` of a published config.json (``target_layers`` fills default layer ids)."""
    eagle = cfg.get("eagle_config") or {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        if target_layers is None:
            raise HeadFormatError("config.json names no eagle_aux_hidden_state_layer_ids; pass the "
                                  "target so the EAGLE-3 default (2, L/2, L-3) can be used.")
        ids = default_layer_ids(target_layers)
    arch = (cfg.get("architectures") or [""])[0].lower()
    model_type = next((t for t in ("qwen3", "qwen2") if arch.startswith(t)), None) or "llama"
    known = {k: cfg[k] for k in _FIELDS if cfg.get(k) is not None}
    missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
               if k not in known]
    if missing:
        raise HeadFormatError(f"config.json lacks {', '.join(missing)}: not an EAGLE-3 head config.")
    known.setdefault("num_key_value_heads", known["num_attention_heads"])
    extra = {k: v for k, v in cfg.items() if k not in _FIELDS}
    return HeadConfig(
        draft_vocab_size=cfg.get("draft_vocab_size") or known["vocab_size"],
        target_hidden_size=cfg.get("target_hidden_size") or known["hidden_size"],
        aux_layer_ids=tuple(int(i) for i in ids), model_type=model_type, extra=extra, **known)


# a draft position accepted (unconditionally) less often than this does not pay for its slot
# in a verify block on a CPU-like curve (SmolLM2: each block token ~+5-10 % of a forward, the
# head's own ~3 %): head3-v4's held-out 0.46 / 0.21 / 0.08 gives 2, Spec-Bench's 0.24 / 0.06 1
MIN_POSITION_ACCEPTANCE = 0.1


def chain_k(cfg: HeadConfig) -> int | None:
    """The head's own draft cap in a chain (``Drafter.max_k``): config.json's ``chain_k``, else
    the leading draft positions whose ``draft_acceptance`` is >= ``MIN_POSITION_ACCEPTANCE``
    (at least 1), else None (no cap: the chain's k). Raises on a ``chain_k`` that is not >= 1.
    Tests: tests/eagle/test_io.py."""
    k = cfg.extra.get("chain_k")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise HeadFormatError(f"config.json's chain_k must be an integer >= 1, got {k!r}: fix "
                                  "or drop it (without it the cap follows draft_acceptance).")
        return k
    acceptance = cfg.extra.get("draft_acceptance")
    if not acceptance:
        return None
    paying = next((i for i, a in enumerate(acceptance) if a < MIN_POSITION_ACCEPTANCE), len(acceptance))
    return max(paying, 1)


def config_to_json(c: HeadConfig) -> dict[str, Any]:
    out = dict(c.extra)
    out.update({k: getattr(c, k) for k in _FIELDS if getattr(c, k) is not None})
    out.update(architectures=[_ARCH_NAMES[c.model_type]], model_type=c.model_type,
               num_hidden_layers=1, draft_vocab_size=c.draft_vocab_size,
               target_hidden_size=c.target_hidden_size, tie_word_embeddings=False,
               eagle_config={"eagle_aux_hidden_state_layer_ids": list(c.aux_layer_ids),
                             "use_aux_hidden_state": True})
    return out


def canonical_key(key: str) -> str:
    """Published weight name -> our module path (``midlayer.*``)."""
    if key.startswith("model."):
        key = key[len("model."):]
    if key.startswith("layers.0."):
        key = "midlayer." + key[len("layers.0."):]
    return key


def load_head(path: str | Path, target: nn.Module | None = None,
              dtype: mx.Dtype = mx.float32) -> Eagle3Head:
    """Load a head directory (float weights as ``dtype``); ``target`` supplies embeddings (when
    not shipped) and the layer count for default layer ids. Raises ``HeadFormatError`` saying
    what to fix (a bad ``chain_k`` too)."""
    d = Path(path)
    if not (d / "config.json").is_file() or not (d / "model.safetensors").is_file():
        raise HeadFormatError(f"{d} must hold config.json and model.safetensors (an EAGLE-3 head).")
    cfg = config_from_json(json.loads((d / "config.json").read_text()),
                           len(target.layers) if target is not None else None)
    try:  # refused here, at load: not when a chain's drafter is first built (per request)
        chain_k(cfg)
    except HeadFormatError as e:
        raise HeadFormatError(f"{d}/config.json: {e}") from e
    weights = {canonical_key(k): v for k, v in load_arrays(str(d / "model.safetensors")).items()}
    if "t2d" not in weights and cfg.draft_vocab_size == cfg.vocab_size:  # full vocabulary heads
        weights["t2d"] = mx.ones((cfg.vocab_size,), dtype=mx.bool_)
        weights["d2t"] = mx.zeros((cfg.vocab_size,), dtype=mx.int64)
    has_embed = "embed_tokens.weight" in weights
    embed = None
    if not has_embed:
        if target is None:
            raise HeadFormatError(f"{d} ships no embed_tokens.weight: load it with its target "
                                  "model.")
        embed = target.model.embed_tokens
        weights.update({f"embed_tokens.{k}": v for k, v in flat_tree(embed.parameters())})
    head = Eagle3Head(cfg, embed)
    weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) and
               not k.startswith("embed_tokens.") else v for k, v in weights.items()}
    weights["d2t"] = weights["d2t"].astype(mx.int64)
    weights["t2d"] = weights["t2d"].astype(mx.bool_)
    try:
        head.load_weights(list(weights.items()), strict=True)
    except ValueError as e:
        raise HeadFormatError(f"{d}/model.safetensors does not match its config.json: {e}") from e
    mx.eval(head.parameters())
    head.shipped_embeddings = has_embed
    return head


def save_head(head: Eagle3Head, path: str | Path, *, with_embeddings: bool = False,
              dtype: mx.Dtype | None = None) -> int:
    """Write ``head`` as config.json + model.safetensors (``midlayer.*``); returns bytes written."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    weights: dict[str, mx.array] = {}
    for k, v in flat_tree(head.parameters()):
        if k.startswith("embed_tokens.") and not with_embeddings:
            continue
        if dtype is not None and mx.issubdtype(v.dtype, mx.floating):
            v = v.astype(dtype)
        weights[k] = v
    tmp = d / "model.safetensors.tmp.safetensors"
    mx.save_safetensors(str(tmp), weights, metadata={"format": "pt"})
    tmp.replace(d / "model.safetensors")
    cfg = config_to_json(head.config)
    if dtype is not None:  # what transformers-based loaders read the weights as
        cfg["torch_dtype"] = {mx.float16: "float16", mx.bfloat16: "bfloat16"}.get(dtype, "float32")
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return (d / "model.safetensors").stat().st_size
