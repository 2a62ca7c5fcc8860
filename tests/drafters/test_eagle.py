"""drafters.eagle: an EAGLE-3 head drafting from the features the verify forward returns
(declared outputs). Greedy output is plain decoding's, whatever the head: a random one on a
tiny target, and the head trained here on SmolLM2 through the spec path (``--draft-model DIR``,
``--no-gate``; slow: a real model, and the head lives outside the repository)."""

from __future__ import annotations

import os

import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, cached_tiny

from specdec.core.stats import SpecStats
from specdec.drafters.eagle import EagleDrafter
from specdec.drafters.spec import DraftSpec
from specdec.eagle.head import Eagle3Head, HeadConfig
from specdec.engine import token_stream
from specdec.resources import drafter_for

HEAD_DIR = "/work/heads/smollm2"  # a head trained here (issue #47); skipped where absent


def random_head(target):
    cfg = HeadConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                     vocab_size=TINY_VOCAB, draft_vocab_size=TINY_VOCAB, target_hidden_size=64,
                     aux_layer_ids=(0, 1, 1), rms_norm_eps=1e-5)
    mx.random.seed(3)
    head = Eagle3Head(cfg, target.model.embed_tokens)
    head.t2d = mx.ones((TINY_VOCAB,), dtype=mx.bool_)
    return head


def test_a_random_head_keeps_greedy_parity():
    target = cached_tiny("llama")
    prompt = [5, 9, 17, 3, 5, 9, 17, 3, 5]
    plain = [e.token for e in token_stream(target, prompt, max_tokens=24)]
    stats = SpecStats()
    out = [e.token for e in token_stream(target, prompt, drafter=EagleDrafter(random_head(target)),
                                         max_tokens=24, num_draft_tokens=4, stats=stats)]
    assert out == plain and stats.drafted > 0


def test_the_spec_refuses_eagle_without_a_head_dir():
    with pytest.raises(ValueError, match="--draft-type eagle needs --draft-model DIR"):
        DraftSpec("eagle").check_used()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(HEAD_DIR), reason=f"no trained head at {HEAD_DIR}")
def test_a_trained_head_on_smollm2_keeps_greedy_parity(smollm):
    model, tok = smollm
    prompt = tok.encode("The capital of France is Paris. The capital of Germany is")
    plain = [e.token for e in token_stream(model, prompt, max_tokens=24)]
    drafter = drafter_for(DraftSpec("eagle", draft_model=HEAD_DIR, gate=False), model, tok)
    stats = SpecStats()
    out = [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=24,
                                         num_draft_tokens=4, stats=stats)]
    assert out == plain and stats.drafted > 0 and stats.accepted > 0
