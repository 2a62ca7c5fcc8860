"""Rollback: WindowKVCache keeps the model's exact window through wraps and trims."""

import random

import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, cached_tiny

from specdec.rollback import RollbackError, UnsupportedCacheError, WindowKVCache, make_cache, trim


def full_logits(model, seq):
    """Reference: the whole sequence in one forward pass on a fresh cache."""
    cache = make_cache(model, rollback=False)
    return model(mx.array(seq)[None], cache=cache)[0]


@pytest.mark.parametrize("seed", range(6))
def test_interleaved_blocks_and_trims_match_a_fresh_forward(seed):
    model = cached_tiny("gemma3", window=8)
    rng = random.Random(seed)
    cache = make_cache(model, max_trim=6)
    seq: list[int] = []
    for _ in range(25):  # ~60 positions: the 8-token window wraps many times
        block = [rng.randrange(TINY_VOCAB) for _ in range(rng.randint(1, 6))]
        out = model(mx.array(block)[None], cache=cache)[0]
        ref = full_logits(model, seq + block)[len(seq):]
        assert mx.allclose(out, ref, atol=1e-4).item(), f"block at {len(seq)} diverged"
        keep = rng.randint(1, len(block))
        trim(cache, len(block) - keep)
        seq += block[:keep]
    assert isinstance(cache[0], WindowKVCache) and cache[0].offset == len(seq)


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
