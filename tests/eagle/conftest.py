"""Tiny random targets (mlx-lm's own classes) and heads for the EAGLE-3 tests."""

from __future__ import annotations

import functools
import importlib

import mlx.core as mx
from mlx.utils import tree_map

from specdec.eagle.head import Eagle3Head, HeadConfig

VOCAB = 96


@functools.lru_cache(maxsize=None)
def tiny_target(arch: str = "llama", layers: int = 6, hidden: int = 32, seed: int = 0):
    """A random-weight mlx-lm model with enough layers for low/mid/high features."""
    module = importlib.import_module(f"mlx_lm.models.{arch}")
    args = module.ModelArgs.from_dict(dict(
        model_type=arch, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, rms_norm_eps=1e-5, num_hidden_layers=layers,
        max_position_embeddings=512, head_dim=hidden // 4, tie_word_embeddings=True,
        rope_theta=10000.0))
    m = module.Model(args)
    mx.random.seed(seed)
    m.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, m.parameters()))
    mx.eval(m.parameters())
    return m


def tiny_head(target, model_type: str = "llama", draft_vocab: int = 48, seed: int = 1) -> Eagle3Head:
    """A random head for ``target`` whose draft vocabulary is every other target id."""
    h = target.args.hidden_size
    cfg = HeadConfig(hidden_size=h, intermediate_size=2 * h, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=VOCAB, draft_vocab_size=draft_vocab,
                     target_hidden_size=h, aux_layer_ids=(1, 3, 4), model_type=model_type,
                     head_dim=h // 4)
    head = Eagle3Head(cfg, target.model.embed_tokens)
    mx.random.seed(seed)
    head.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.3,
                         {k: v for k, v in head.trainable_parameters().items() if k != "embed_tokens"}))
    ids = mx.arange(draft_vocab) * 2
    head.d2t = (ids - mx.arange(draft_vocab)).astype(mx.int64)
    head.t2d = mx.array([i % 2 == 0 and i < 2 * draft_vocab for i in range(VOCAB)])
    mx.eval(head.parameters())
    return head
