"""The EAGLE-3 draft head: the target's low/mid/high features fused by ``fc``, one decoder
layer built from mlx-lm's own layer class, a norm and an LM head over a reduced draft vocabulary.

Invariants: the decoder layer is mlx-lm's ``TransformerBlock`` for ``config.model_type`` with its
q/k/v projections widened to 2H (EAGLE-3 attends over concat(input_layernorm(embed),
hidden_norm(hidden))); attention itself is mlx-lm's. The head's KV cache holds one entry per
target position whose features it has seen, so its rope positions equal the target's; ``draft``
trims its own speculative entries before returning. Draft id ``d`` is target id ``d + d2t[d]``.
Tests: tests/eagle/test_head.py.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from ..core.arrays import scalar_float, scalar_int

ARCHS = ("llama", "qwen2", "qwen3")


@dataclass(frozen=True)
class HeadConfig:
    """Everything that shapes a head; config.json's fields (see ``io``)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...]
    model_type: str = "llama"
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 8192
    attention_bias: bool = False
    extra: dict = field(default_factory=dict, compare=False)  # other config.json fields, kept

    def __post_init__(self) -> None:
        if self.model_type not in ARCHS:
            raise ValueError(f"EAGLE-3 head layer type {self.model_type!r} is not supported; "
                             f"use one of {', '.join(ARCHS)} (config.json 'model_type').")
        if len(self.aux_layer_ids) != 3:
            raise ValueError(f"EAGLE-3 fuses 3 target layers; got aux_layer_ids={self.aux_layer_ids}.")
        if not 0 < self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} must be in 1..{self.vocab_size}.")

    def layer_args(self) -> Any:
        """mlx-lm ``ModelArgs`` of the head's one decoder layer."""
        module = importlib.import_module(f"mlx_lm.models.{self.model_type}")
        d = asdict(self)
        d.update(num_hidden_layers=1, tie_word_embeddings=False,
                 head_dim=self.head_dim or self.hidden_size // self.num_attention_heads)
        return module.ModelArgs.from_dict(d)


def default_layer_ids(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low/mid/high choice (the inputs of these layers): 2, L//2, L-3."""
    if num_layers < 4:
        return (0, num_layers // 2, num_layers - 1)
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class Draft:
    """``tokens``: target ids, best first per step; ``logprobs``: the head's log-prob of each."""

    tokens: list[int]
    logprobs: list[float]


class DraftHead(Protocol):
    """What drafting and ``measure.head_cost`` use of a draft head (``Eagle3Head``, an MTP block:
    ``eagle.mtp.MtpHead``): the sizes its ``feed`` reads, what shapes it (a cost cache's key)
    and its verbs. Tests: tests/test_measure.py, tests/drafters/test_mtp.py."""

    fc: nn.Linear  # the projection of its input (its dtype: the head's)

    @property
    def feature_width(self) -> int:
        """One position's feature: the last axis of ``feed``'s ``features``."""
        ...

    @property
    def vocab_size(self) -> int:
        """The target vocabulary its tokens come from."""
        ...

    def describe(self) -> dict[str, Any]:
        """What shapes the head beyond the target (JSON-able): a cost cache's key."""
        ...

    def make_cache(self) -> list[KVCache]: ...

    def feed(self, cache: list[KVCache], features: mx.array, tokens: mx.array) -> list[mx.array]: ...

    def draft(self, cache: list[KVCache], features: mx.array, tokens: mx.array, k: int) -> Draft: ...


class Eagle3Head(nn.Module):
    """The head; ``embed_tokens`` is the target's (frozen) unless the file ships its own."""

    def __init__(self, config: HeadConfig, embed_tokens: nn.Module | None = None):
        super().__init__()
        self.config = config
        h = config.hidden_size
        module = importlib.import_module(f"mlx_lm.models.{config.model_type}")
        args = config.layer_args()
        layer = module.TransformerBlock(args)
        _widen_projections(layer.self_attn, 2 * h, config.attention_bias or config.model_type == "qwen2")
        layer.hidden_norm = nn.RMSNorm(h, eps=config.rms_norm_eps)
        self.midlayer = layer
        self.fc = nn.Linear(3 * config.target_hidden_size, h, bias=False)
        self.norm = nn.RMSNorm(h, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(config.vocab_size, h)
        self.d2t = mx.zeros((config.draft_vocab_size,), dtype=mx.int64)
        self.t2d = mx.zeros((config.vocab_size,), dtype=mx.bool_)

    @property
    def feature_width(self) -> int:
        """The target's three captured layers, concatenated (``DraftHead``)."""
        return 3 * self.config.target_hidden_size

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def describe(self) -> dict[str, Any]:
        return dict(vars(self.config))

    # -- the pieces -------------------------------------------------------------------------
    def fuse(self, features: mx.array) -> mx.array:
        """(B, T, 3*Ht) concatenated target features -> (B, T, H)."""
        return self.fc(features)

    def step(self, tokens: mx.array, hidden: mx.array, mask: Any, cache: Any) -> mx.array:
        """One decoder-layer pass: ``tokens`` (B, T) and ``hidden`` (B, T, H) -> hidden (B, T, H)."""
        layer = self.midlayer
        x = mx.concatenate([layer.input_layernorm(self.embed_tokens(tokens)),
                            layer.hidden_norm(hidden)], axis=-1)
        h = hidden + layer.self_attn(x, mask, cache)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, hidden: mx.array) -> mx.array:
        """Draft-vocabulary logits (B, T, draft_vocab_size)."""
        return self.lm_head(self.norm(hidden))

    def to_target(self, draft_ids: mx.array) -> mx.array:
        return draft_ids + self.d2t[draft_ids].astype(draft_ids.dtype)

    # -- decoding ---------------------------------------------------------------------------
    def make_cache(self) -> list[KVCache]:
        return [KVCache()]

    def feed(self, cache: list[KVCache], features: mx.array, tokens: mx.array) -> list[mx.array]:
        """Feed verified positions without drafting (``draft``'s first step alone); returns the
        cache's arrays, for the caller to evaluate (in the target forward's sync, or its own)."""
        hidden = self.fuse(features)
        self.step(tokens, hidden, create_attention_mask(hidden, cache[0]), cache[0])
        return list(cache[0].state)

    def draft(self, cache: list[KVCache], features: mx.array, tokens: mx.array, k: int) -> Draft:
        """Feed the verified positions and draft ``k`` tokens greedily.

        ``features`` (1, n, 3*Ht): the target's captured layers at the n newly verified positions;
        ``tokens`` (1, n): the token that follows each of them (the last is the next input token).
        The n entries stay in ``cache``; the k-1 speculative ones are trimmed before returning."""
        if features.shape[1] != tokens.shape[1] or features.shape[1] < 1:
            raise ValueError(f"features {features.shape} and tokens {tokens.shape} must cover the "
                             "same n >= 1 positions.")
        hidden = self.fuse(features)
        hidden = self.step(tokens, hidden, create_attention_mask(hidden, cache[0]), cache[0])[:, -1:]
        out, lps = [], []
        for i in range(k):
            logp = nn.log_softmax(self.logits(hidden)[0, -1].astype(mx.float32))
            d = mx.argmax(logp)
            tok = self.to_target(d)
            out.append(tok)
            lps.append(logp[d])
            if i + 1 < k:
                hidden = self.step(tok.reshape(1, 1), hidden, None, cache[0])
        mx.eval(out, lps)
        cache[0].trim(k - 1)
        return Draft([scalar_int(t) for t in out], [scalar_float(v) for v in lps])


def _widen_projections(attn: nn.Module, width: int, bias: bool) -> None:
    """Replace q/k/v so they read the 2H concat; o_proj and the attention stay mlx-lm's."""
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(attn, name)
        setattr(attn, name, nn.Linear(width, old.weight.shape[0], bias=bias))
