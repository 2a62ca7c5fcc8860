"""Rollback: WindowKVCache keeps the model's exact window through wraps and trims.

References are mlx-lm's own: a cache-less forward (mlx-lm's windowed causal mask) and
mlx-lm's ``RotatingKVCache`` fed token by token; neither runs specdec's cache or mask code.
"""

import random

import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, cached_tiny
from mlx_lm.models.cache import RotatingKVCache

from specdec.cache.rollback import RollbackError, UnsupportedCacheError, WindowKVCache, make_cache, trim


def mlx_lm_full_logits(model, seq):
    """Independent reference: the whole sequence in one forward with no cache, so the model
    builds mlx-lm's own mask (``create_causal_mask(N, window_size=...)`` on window layers)
    and no specdec code runs."""
    return model(mx.array(seq)[None])[0]


def mlx_lm_stepwise_logits(model, seq):
    """Independent reference: mlx-lm's own caches (``RotatingKVCache`` on window layers,
    which rotates in place) fed one token at a time, as mlx-lm decodes."""
    cache = model.make_cache()
    assert any(isinstance(c, RotatingKVCache) for c in cache)  # the reference is mlx-lm's window
    rows = [model(mx.array([[t]]), cache=cache)[0, -1] for t in seq]
    return mx.stack(rows)


def assert_logits_match(out, ref, what):
    assert out.shape == ref.shape, what
    assert mx.allclose(out, ref, atol=1e-4).item(), f"{what}: max |diff| {mx.abs(out - ref).max().item():.3g}"
    assert mx.argmax(out, axis=-1).tolist() == mx.argmax(ref, axis=-1).tolist(), what


def blocks_and_trims(model, seed, window, max_block, n_blocks=25):
    """Feed a long random first block (crossing the window), then random blocks of
    1..max_block tokens into a ``make_cache`` cache, keeping a random prefix of each (the
    rest is trimmed, as a rejected draft). Yields (kept sequence before the block, block,
    block logits, kept); the sequence crosses the window several times."""
    rng = random.Random(seed)
    cache = make_cache(model, max_trim=max_block)
    seq: list[int] = []
    for i in range(n_blocks):
        n = rng.randint(1, 3 * window) if i == 0 else rng.randint(1, max_block)
        block = [rng.randrange(TINY_VOCAB) for _ in range(n)]
        out = model(mx.array(block)[None], cache=cache)[0]
        keep = len(block) if i == 0 else rng.randint(1, len(block))
        yield seq, block, out, keep
        assert trim(cache, len(block) - keep) == len(block) - keep
        seq = seq + block[:keep]
    assert isinstance(cache[0], WindowKVCache) and cache[0].offset == len(seq)
    assert len(seq) > 4 * window  # the window wrapped several times


# (window, longest block): blocks shorter than the window, and longer than it
SHAPES = [(8, 6), (4, 7)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window,max_block", SHAPES)
def test_blocks_and_trims_match_mlx_lm_full_forward(seed, window, max_block):
    """Every row of every block (kept or trimmed) equals mlx-lm's own windowed mask."""
    model = cached_tiny("gemma3", window=window)
    for seq, block, out, _ in blocks_and_trims(model, seed, window, max_block):
        ref = mlx_lm_full_logits(model, seq + block)[len(seq):]
        assert_logits_match(out, ref, f"block at {len(seq)}")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("window,max_block", SHAPES)
def test_blocks_and_trims_match_mlx_lm_rotating_cache(seed, window, max_block):
    """The kept rows, read in order, are the logits mlx-lm's RotatingKVCache gives when
    decoding the kept sequence token by token."""
    model = cached_tiny("gemma3", window=window)
    rows, seq = [], []
    for seq, block, out, keep in blocks_and_trims(model, seed, window, max_block):
        rows.append(out[:keep])
        final = seq + block[:keep]
    assert_logits_match(mx.concatenate(rows), mlx_lm_stepwise_logits(model, final), "kept rows")


def test_trim_past_the_retained_window_raises():
    model = cached_tiny("gemma3", window=8)
    cache = make_cache(model, max_trim=2)
    for _ in range(60):  # 180 positions: the buffer compacts to window - 1 + slack
        model(mx.array([[1, 2, 3]]), cache=cache)
    offsets = [c.offset for c in cache]
    assert trim(cache, 3) == 3  # within the retained history: fine
    w = cache[0]
    assert w.start > 0  # history older than window + slack was dropped
    with pytest.raises(RollbackError, match="cannot trim"):
        trim(cache, w.offset - w.start - w.window + 2)  # would leave less than a window
    assert [c.offset for c in cache] == [o - 3 for o in offsets]  # no layer half-trimmed


def test_window_cache_rejects_bad_shapes():
    with pytest.raises(ValueError):
        WindowKVCache(0)


def test_recurrent_cache_is_refused_for_speculation_but_fine_for_plain():
    from mlx_lm.models import mamba

    args = mamba.ModelArgs(model_type="mamba", vocab_size=TINY_VOCAB, hidden_size=32,
                           intermediate_size=64, state_size=4, num_hidden_layers=1,
                           conv_kernel=4, use_bias=False, use_conv_bias=True, time_step_rank=4)
    model = mamba.Model(args)
    with pytest.raises(UnsupportedCacheError, match="MambaCache|ArraysCache"):
        make_cache(model)
    assert len(make_cache(model, rollback=False)) == 1


def test_quantized_kv_cache_trims_exactly():
    model = cached_tiny("llama", hidden=128)  # head_dim 32: a valid quantization group
    cache = make_cache(model, kv_bits=8, kv_group_size=32)
    assert type(cache[0]).__name__ == "QuantizedKVCache"
    model(mx.array([[1, 2, 3, 4]]), cache=cache)
    assert trim(cache, 3) == 3 and cache[0].offset == 1
