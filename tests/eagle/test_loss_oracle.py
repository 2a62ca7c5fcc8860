"""The training-time-test loss and the label mapping against loop-by-loop numpy oracles: step j
at position t is scored against the target's distribution at t+1+j (the token t+2+j), restricted
to the draft vocabulary and renormalised; positions past the sample's end count nothing."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specdec.eagle.data import Sample
from specdec.eagle.train import DraftVocab, feature_scale, fold_scale, make_batch, ttt_loss, unroll

from .conftest import VOCAB, tiny_head, tiny_target


def _sample(rng, n: int, h: int, k: int = 4) -> Sample:
    logp = np.log(rng.dirichlet(np.ones(k), n)).astype(np.float16)
    return Sample(rng.integers(0, VOCAB, n).astype(np.int32),
                  rng.normal(size=(n, 3 * h)).astype(np.float16),
                  np.stack([rng.choice(VOCAB, k, replace=False) for _ in range(n)]).astype(np.int32),
                  -np.sort(-logp, axis=-1), np.ones(n, np.uint8))


def test_draft_vocab_maps_and_labels_drop_ids_outside_it():
    counts = np.zeros(VOCAB, np.int64)
    counts[[7, 3, 50, 9]] = [5, 9, 1, 5]
    v = DraftVocab.from_counts(counts, 3)
    assert v.ids.tolist() == [3, 7, 9]  # the 3 most frequent, ties by id, ascending
    idx = v.index()
    assert [idx[i] for i in (3, 7, 9, 50, 0)] == [0, 1, 2, -1, -1]
    head = tiny_head(tiny_target("llama"))
    v.apply(head)
    assert head.to_target(mx.arange(3)).tolist() == [3, 7, 9]
    assert np.nonzero(np.array(head.t2d))[0].tolist() == [3, 7, 9]
    s = Sample(np.array([1, 2], np.int32), np.zeros((2, 6), np.float16),
               np.array([[7, 50, 9], [50, 0, 1]], np.int32),
               np.log(np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])).astype(np.float16),
               np.ones(2, np.uint8))
    b = make_batch([s], idx)
    assert np.array(b.label_ids)[0, 0].tolist() == [1, 0, 2]
    assert np.allclose(np.array(b.label_w)[0, 0], [0.5 / 0.7, 0, 0.2 / 0.7], atol=1e-3)
    assert np.array(b.label_w)[0, 1].tolist() == [0, 0, 0]  # no label in the draft vocabulary


@pytest.mark.parametrize("answer_only", [False, True])
def test_ttt_loss_equals_numpy_oracle(answer_only):
    """``answer_only``: only steps whose token t+2+j is an answer token count (the samples'
    answer flags start mid-sample, with a non-greedy hole, as stored shards have them)."""
    target = tiny_target("llama")
    head = tiny_head(target)
    h, rng, steps = target.args.hidden_size, np.random.default_rng(3), 3
    samples = [_sample(rng, 9, h), _sample(rng, 6, h)]
    samples[0].answer[:4] = 0
    samples[0].answer[6] = 0
    samples[1].answer[:2] = 0
    vocab = DraftVocab(np.array(np.nonzero(np.array(head.t2d))[0]), VOCAB)
    idx, batch = vocab.index(), make_batch(samples, vocab.index())
    logps = [np.array(lp) for lp, _ in unroll(head, batch, steps)]
    total = 0.0
    for j in range(steps):
        ce = []
        for b, s in enumerate(samples):
            for t in range(len(s.tokens) - 1 - j):  # the label position t+1+j inside the sample
                if answer_only and (t + 2 + j >= len(s.tokens) or not s.answer[t + 2 + j]):
                    continue
                ids, p = idx[s.topk_ids[t + 1 + j]], np.exp(s.topk_logp[t + 1 + j].astype(np.float64))
                p = p * (ids >= 0)
                p = p / max(p.sum(), 1e-9)
                ce.append(-sum(pi * logps[j][b, t, i] for pi, i in zip(p, ids) if i >= 0))
        total += 0.8 ** j * np.mean(ce)
    want = total / sum(0.8 ** j for j in range(steps))
    got = float(ttt_loss(head, batch, steps, answer_only))
    assert np.isclose(got, want, rtol=1e-4)
    if answer_only:  # the mask changed what was scored
        assert not np.isclose(got, float(ttt_loss(head, batch, steps)), rtol=1e-3)


def test_feature_scale_ignores_sink_tokens_and_folds_into_fc():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(400, 6)) * np.array([1, 1, 300, 300, 0.01, 1])
    f[0, 1] = 2e4  # an attention-sink token
    s = feature_scale(f)
    assert np.allclose((f * s)[1:].std(0), 1, atol=0.15), (f * s)[1:].std(0)
    head = tiny_head(tiny_target("llama"))
    x = mx.array(rng.normal(size=(1, 5, 3 * head.config.target_hidden_size)).astype(np.float32))
    sc = rng.uniform(0.1, 3, 3 * head.config.target_hidden_size).astype(np.float32)
    want = head.fuse(x * mx.array(sc))
    w0 = head.fc.weight
    fold_scale(head, sc)
    assert mx.allclose(head.fuse(x), want, atol=1e-5)
    head.fc.weight = w0
