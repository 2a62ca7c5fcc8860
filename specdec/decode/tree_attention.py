"""One forward over a token tree on an unmodified mlx-lm model.

Contract: inside ``tree_attention(model, cache, parents)`` a forward of the block ``[last]
+ tokens`` returns, at row ``r``, the logits of a plain forward of the context plus the
root path of row ``r`` (each token rotated at ``offset + depth``; each layer's mask "cache
prefix + ancestors"). Both swaps are restored on exit; not re-entrant. The cache then holds
the whole block: ``cache.batch_cache.roll_back`` compacts it to the accepted path.
Supported layers: KVCache, WindowKVCache. Full contract:
docs/trees.md#tree-attention. Tests: tests/decode/test_tree_attention.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache
from mlx_lm.models.rope_utils import Llama3RoPE, SuScaledRoPE, YarnRoPE

from ..cache.rollback import RollbackError, WindowKVCache
from ..core.trees import ancestor_mask, tree_positions

# RoPE modules whose __call__ hands ``offset`` straight to mx.fast.rope (so a vector of
# per-batch-row offsets is exact). Others (e.g. dynamic NTK, whose frequencies depend on
# the offset itself) are refused rather than guessed at.
ROPE_KINDS = (nn.RoPE, Llama3RoPE, SuScaledRoPE, YarnRoPE)


class TreeRoPE(nn.Module):
    """Applies the wrapped RoPE at ``offset + depth`` per token: x (1, H, L, D) moves to
    (L, H, 1, D), one batch row per token, each with its own offset."""

    def __init__(self, inner: nn.Module, depths: mx.array):
        super().__init__()
        self.inner = inner
        self.depths = depths

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        if x.shape[0] != 1 or x.shape[2] != self.depths.shape[0]:
            raise ValueError(f"tree forward: rope got shape {x.shape}, expected batch 1 and "
                             f"{self.depths.shape[0]} tokens")
        pos = (self.depths + offset).astype(mx.int32)
        y = self.inner(x.transpose(2, 1, 0, 3), offset=pos)
        return y.transpose(2, 1, 0, 3)


def rope_owners(model: nn.Module) -> list[nn.Module]:
    owners = [m for _, m in model.named_modules() if isinstance(m.get("rope"), nn.Module)]
    if not owners:
        raise ValueError(f"{type(model).__name__}: no attention layer with a `rope` module; "
                         "token trees need mlx-lm attention layers that own their RoPE")
    for m in owners:
        if not isinstance(m["rope"], ROPE_KINDS):
            raise ValueError(f"{type(m['rope']).__name__} is not a RoPE kind tree verification "
                             f"supports ({', '.join(k.__name__ for k in ROPE_KINDS)}): "
                             "use --draft-tree-budget 0")
    return owners


def _first_key(c: Any, n: int) -> int:
    """Absolute position of the first key the layer's attention will see."""
    if isinstance(c, WindowKVCache):
        return c.first_key(n)  # the same drop rule update_and_fetch applies
    if type(c) is KVCache:
        return 0
    raise RollbackError(f"{type(c).__name__}: token trees support KVCache and WindowKVCache "
                        "layers only: use --draft-tree-budget 0")


def tree_mask(c: Any, depths: mx.array, anc: mx.array, n: int,
              window_size: int | None = None) -> mx.array:
    """(n, keys) bool mask of a tree block on top of cache ``c``: the cached prefix and the
    row's ancestors, each within ``window_size`` logical positions when given."""
    if n != depths.shape[0]:
        raise ValueError(f"tree mask for {n} tokens, but the tree block has {depths.shape[0]}")
    window = window_size or getattr(c, "window", None)
    first, offset = _first_key(c, n), c.offset
    q = offset + depths[:, None]  # each row's logical position
    k = mx.arange(first, offset)[None]
    prefix = mx.broadcast_to(k <= q, (n, offset - first))
    block = anc
    if window is not None:
        prefix = prefix & (k > q - window)
        block = block & (depths[:, None] - depths[None] < window)
    return mx.concatenate([prefix, block], axis=1)


@contextmanager
def tree_attention(model: nn.Module, cache: list, parents: Sequence[int]) -> Iterator[None]:
    """Within the block, the model rotates each token at its depth and masks attention to
    the prefix and its ancestors (see module doc). Restores everything on exit."""
    owners = rope_owners(model)
    depths = mx.array([0] + tree_positions(parents), dtype=mx.int32)
    anc = mx.array(ancestor_mask(parents))
    for i, c in enumerate(cache):
        _first_key(c, 1)  # refuse unsupported layers before touching anything
        if "make_mask" in vars(c):
            raise RuntimeError(f"layer {i}: cache already in a tree forward (not re-entrant)")
    inner = [m["rope"] for m in owners]
    try:
        for m, r in zip(owners, inner):
            m.rope = TreeRoPE(r, depths)
        for c in cache:
            c.make_mask = (lambda c: lambda N, window_size=None, **_: tree_mask(
                c, depths, anc, N, window_size))(c)
        yield
    finally:
        for m, r in zip(owners, inner):
            m.rope = r
        for c in cache:
            vars(c).pop("make_mask", None)
