"""What Ollama's clients read about the served model (/api/tags, /api/show): its size,
parameter count, quantization label and architecture fields, computed once.

Contract: ``model_card(api)`` never fails for a model it cannot measure (a distributed
leader's wrapper): those fields are then empty. Tests: tests/server/test_ollama_models.py.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TYPE_CHECKING, cast

import mlx.nn as nn

from ...core.arrays import flat_weights
from ...core.model import Model

if TYPE_CHECKING:  # the engine's handle is passed in (``register``); its type only
    from ..engine.api import Api

log = logging.getLogger("specdec.server")


def now() -> str:
    """Ollama's timestamp format (RFC 3339, UTC)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Weights:
    count: int = 0
    size: int = 0  # bytes
    quantization: str = ""


def weights(model: Model) -> Weights:
    """The served weights' parameter count, bytes and quantization (as Ollama labels it)."""
    modules = cast("nn.Module", model).named_modules()  # an mlx-lm model (a leader's raises)
    bits = {name: m.bits for name, m in modules
            if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}
    count = size = 0
    dtypes: set[str] = set()
    for name, a in flat_weights(model):
        size += a.nbytes
        owner, _, leaf = name.rpartition(".")
        if owner in bits:  # packed into uint32: 32 // bits parameters each (scales aside)
            count += a.size * 32 // bits[owner] if leaf == "weight" else 0
        else:
            count += a.size
            dtypes.add(str(a.dtype).rpartition(".")[2])
    label = "/".join(f"Q{b}" for b in sorted(set(bits.values()))) or \
        {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}.get(max(dtypes, default=""), "")
    return Weights(count, size, label)


@dataclass(frozen=True)
class Card:
    """The served model as /api/tags lists it, and the model_info /api/show adds."""

    listing: dict[str, Any]
    info: dict[str, Any]


def model_card(api: Api) -> Card:
    model, cfg = api.worker.model, api.cfg
    args = getattr(model, "args", None)
    arch = getattr(args, "model_type", None) or "unknown"
    try:
        w = weights(model)
    except Exception:  # a distributed leader's wrapper: no module tree to read
        log.debug("ollama: weights not measurable", exc_info=True)
        w = Weights()
    info: dict[str, Any] = {"general.architecture": arch, "general.basename": cfg.model_id,
                            "general.parameter_count": w.count,
                            f"{arch}.context_length": api.worker.context_length}
    for ours, theirs in (("hidden_size", "embedding_length"), ("num_hidden_layers", "block_count"),
                         ("intermediate_size", "feed_forward_length"),
                         ("num_attention_heads", "attention.head_count"),
                         ("num_key_value_heads", "attention.head_count_kv"),
                         ("vocab_size", "vocab_size"), ("rope_theta", "rope.freq_base")):
        if isinstance(getattr(args, ours, None), (int, float)):
            info[f"{arch}.{theirs}"] = getattr(args, ours)
    n = w.count
    details = {"parent_model": "", "format": "gguf" if cfg.model.endswith(".gguf")
               or "/" not in cfg.model else "safetensors", "family": arch, "families": [arch],
               "parameter_size": f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n else "",
               "quantization_level": w.quantization}
    name = cfg.model_id if ":" in cfg.model_id else f"{cfg.model_id}:latest"  # Ollama's tag
    digest = hashlib.sha256(f"{cfg.model}|{w.count}|{w.size}|{w.quantization}".encode()).hexdigest()
    return Card({"name": name, "model": name, "modified_at": now(), "size": w.size,
                 "digest": digest, "details": details}, info)


def show(api: Api, card: Card, thinks: bool) -> dict[str, Any]:
    """/api/show's answer: the card, the template, the defaults and the capabilities."""
    cfg = api.cfg
    template = getattr(api.worker.tokenizer, "chat_template", None)
    params = "\n".join(f"{k:<15}{v}" for k, v in (("temperature", cfg.temp), ("top_p", cfg.top_p),
                                                  ("top_k", cfg.top_k), ("min_p", cfg.min_p)))
    caps = ["completion"] + (["tools"] if api.tools.renders_tools and api.tools.format != "none"
                             else []) + (["thinking"] if thinks else [])
    modelfile = (f"# Modelfile of {cfg.model_id}, served by specdec\nFROM {cfg.model}\n"
                 + "".join(f"PARAMETER {line}\n" for line in params.splitlines()))
    return {"modelfile": modelfile, "parameters": params, "details": card.listing["details"],
            "template": template if isinstance(template, str) else "", "model_info": card.info,
            "capabilities": caps, "modified_at": card.listing["modified_at"]}
