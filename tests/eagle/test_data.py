"""Distillation data: batched forwards give each sample what a solo forward gives, the answer
mask marks exactly the target's own argmax tokens, shards round-trip, prompts are deterministic."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mlx.core as mx

from specdec.eagle.capture import capture_layers
from specdec.eagle.data import (DataSpec, batch_answerer, read_shard, samples_of, top_logp,
                                write_shard)
from specdec.eagle.one_pass import one_pass
from specdec.bench import specbench
from specdec.eagle.prompts import default_prompts, mixed_prompts, read_jsonl

from .conftest import tiny_target

SPEC = DataSpec((1, 3, 4), top_k=4)


def test_batched_samples_equal_solo_and_mask_marks_greedy_tokens(tmp_path):
    target = tiny_target("qwen2")
    prompts = [[3, 5, 7, 11, 13, 17, 19], [2, 4]]
    answers = batch_answerer(target, 6, eos=())(prompts)
    answers[1][-1] = (answers[1][-1] + 1) % 96  # no longer the target's argmax
    both = samples_of(target, prompts, answers, SPEC)
    solo = samples_of(target, prompts[1:], answers[1:], SPEC)[0]
    # float16 features: batch and solo may round one ulp apart (2^-10 relative; 0.016 at 16)
    assert np.allclose(both[1].features.astype(np.float32), solo.features.astype(np.float32),
                       rtol=2e-3, atol=2e-3)
    assert np.array_equal(both[1].topk_ids[:, 0], solo.topk_ids[:, 0])
    assert both[0].answer.tolist() == [0] * 7 + [1] * 6
    assert both[1].answer.tolist() == [0, 0, 1, 1, 1, 1, 1, 0]
    assert np.all(np.diff(both[0].topk_logp.astype(np.float32), axis=-1) <= 0)  # best first
    write_shard(tmp_path / "s.safetensors", both)
    back = read_shard(tmp_path / "s.safetensors")
    for a, b in zip(both, back):
        assert all(np.array_equal(getattr(a, k), getattr(b, k))
                   for k in ("tokens", "features", "topk_ids", "topk_logp", "answer"))


def test_shard_samples_equal_a_float64_log_softmax_and_full_sort():
    """A shard's samples (``one_pass``: the answering forwards), in prompt order, are each
    prompt's solo forward's features and the top-k of a float64 log-softmax by a full sort (ids
    exactly, log-probs within fp16 rounding), however ``top_logp`` chunks the positions."""
    target = tiny_target("llama")
    prompts = [[5, 9, 2, 40, 41, 7, 3, 1, 8], [60, 61], [70, 2, 33, 4, 5], [11]]
    got = one_pass(target, 5, eos=())(prompts, SPEC)
    answers = [s.tokens[len(p):].tolist() for p, s in zip(prompts, got)]
    assert answers == batch_answerer(target, 5, eos=())(prompts)
    for p, a, s in zip(prompts, answers, got):
        with capture_layers(target, SPEC.layer_ids) as cap:
            logits = np.array(target(mx.array([p + a])).astype(mx.float32))[0].astype(np.float64)
            feats = np.array(cap.fused_input())[0]
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        ids = np.argsort(-logp, axis=-1, kind="stable")[:, :SPEC.top_k]
        assert s.tokens.tolist() == p + a and np.array_equal(s.topk_ids, ids)
        assert np.allclose(s.topk_logp, np.take_along_axis(logp, ids, -1), rtol=1e-3, atol=1e-3)
        assert np.allclose(s.features.astype(np.float32), feats, rtol=1e-3, atol=2e-3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7, 50)).astype(np.float32)
    whole, chunked = top_logp(x, 5, rows=64), top_logp(x, 5, rows=4)  # 21 rows: chunks 4,..,1
    assert all(np.array_equal(u, v) for u, v in zip(whole, chunked))
    assert np.array_equal(whole[0], np.argsort(-x, axis=-1, kind="stable")[..., :5])


def test_default_prompts_ship_and_jsonl_is_validated(tmp_path):
    p = default_prompts(0)
    assert len(p) > 300 and len(set(p)) == len(p) and p == default_prompts(0) != default_prompts(1)
    assert any(x.startswith("Translate into") for x in p) and any("Python" in x for x in p)
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "hi"}) + "\n\n" + json.dumps("there") + "\n")
    assert read_jsonl(f) == ["hi", "there"]
    f.write_text(json.dumps({"question": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl:1: .*\"prompt\""):
        read_jsonl(f)


def test_mixed_prompts_follow_the_first_set_and_are_not_specbench():
    """The Spec-Bench-shaped prompts come after the first set (its stored shards stay valid),
    cover the categories the first set lacks, and hold none of Spec-Bench's questions."""
    p, mixed = default_prompts(0), mixed_prompts(0)
    assert p[-len(mixed):] == mixed and not set(mixed) & set(p[:-len(mixed)])
    assert mixed == mixed_prompts(0) != mixed_prompts(1)
    for kind in ("Translate German to English: ", "Summarize: "):
        assert sum(x.startswith(kind) for x in mixed) >= 20, kind
    bench = [q.turns[0] for q in specbench.questions()]
    german = [t.split(": ", 1)[1] for t in bench if t.startswith("Translate German to English")]
    assert not set(bench) & set(p) and not any(g in x for g in german for x in mixed)
