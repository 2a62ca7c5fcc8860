"""The head drafts what an uncached oracle (the whole sequence re-run with a causal mask)
drafts, across successive calls, and leaves only verified entries in its cache."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specdec.eagle.head import HeadConfig

from .conftest import VOCAB, tiny_head, tiny_target


def _oracle(head, feats, toks, k):
    """EAGLE-3's recurrence without a cache: re-run the full sequence for every draft."""
    hid = head.fuse(feats)
    toks = toks
    out = []
    for _ in range(k):
        h = head.step(toks, hid, "causal" if toks.shape[1] > 1 else None, None)
        last = h[:, -1:]
        d = head.to_target(mx.argmax(head.logits(last)[0, -1]))
        out.append(int(d.item()))
        toks = mx.concatenate([toks, d.reshape(1, 1).astype(toks.dtype)], 1)
        hid = mx.concatenate([hid, last], 1)
    return out


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_draft_matches_uncached_oracle_over_two_calls(model_type):
    target = tiny_target("llama")
    head = tiny_head(target, model_type)
    mx.random.seed(7)
    feats = mx.random.normal((1, 9, 3 * 32))
    toks = mx.random.randint(0, VOCAB, (1, 9))
    cache = head.make_cache()
    first = head.draft(cache, feats[:, :6], toks[:, :6], 5)
    assert cache[0].offset == 6
    assert first.tokens == _oracle(head, feats[:, :6], toks[:, :6], 5)
    assert all(t % 2 == 0 for t in first.tokens)  # only draft-vocabulary ids come out
    second = head.draft(cache, feats[:, 6:], toks[:, 6:], 4)
    assert cache[0].offset == 9
    assert second.tokens == _oracle(head, feats, toks, 4)
    assert all(lp <= 0 for lp in second.logprobs)


def test_config_rejects_bad_values():
    base = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=VOCAB, draft_vocab_size=48, target_hidden_size=32, aux_layer_ids=(1, 2, 3))
    with pytest.raises(ValueError, match="model_type"):
        HeadConfig(**{**base, "model_type": "gpt2"})
    with pytest.raises(ValueError, match="3 target layers"):
        HeadConfig(**{**base, "aux_layer_ids": (1, 2)})
    with pytest.raises(ValueError, match="draft_vocab_size"):
        HeadConfig(**{**base, "draft_vocab_size": VOCAB + 1})
