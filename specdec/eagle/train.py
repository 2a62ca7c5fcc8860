"""Training an EAGLE-3 head in MLX on self-distilled shards, with EAGLE-3's training-time test.

Training-time test: step 0 feeds (fc(features_t), token_{t+1}) at every position t; step j > 0
feeds the head's own step j-1 output at t with token_{t+1+j}; each step predicts token_{t+2+j}
against the target's distribution there (top-k, renormalised over the draft vocabulary), weighted
0.8**j. Step j attends to step 0 at positions <= t and to its own chain at t only, exactly what the
head's cache holds when it drafts from t; rope positions are t + j as at decode time.
Acceptance per draft position: the chance that drafts 1..j all equal the target's greedy tokens,
counted where the target's own answer runs for all steps.
Tests: tests/eagle/test_train.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..core.arrays import scalar_int
from .data import Sample
from .head import Eagle3Head


@dataclass(frozen=True)
class DraftVocab:
    """The ``size`` most frequent target ids, ascending: d2t[d] = id - d, t2d a mask."""

    ids: np.ndarray
    vocab_size: int

    @classmethod
    def from_counts(cls, counts: np.ndarray, size: int) -> "DraftVocab":
        size = min(size, len(counts))
        top = np.argsort(-counts, kind="stable")[:size]
        return cls(np.sort(top).astype(np.int64), len(counts))

    @classmethod
    def of_head(cls, head: Eagle3Head) -> "DraftVocab":
        """A trained head's own draft vocabulary (its ``d2t``)."""
        d2t = np.array(head.d2t).astype(np.int64)
        return cls(np.arange(len(d2t)) + d2t, head.config.vocab_size)

    def apply(self, head: Eagle3Head) -> None:
        head.d2t = mx.array(self.ids - np.arange(len(self.ids)))
        t2d = np.zeros(self.vocab_size, bool)
        t2d[self.ids] = True
        head.t2d = mx.array(t2d)

    def index(self) -> np.ndarray:
        """target id -> draft id, -1 where the id is not in the draft vocabulary."""
        m = np.full(self.vocab_size, -1, np.int32)
        m[self.ids] = np.arange(len(self.ids))
        return m


@dataclass(frozen=True)
class Batch:
    tokens: mx.array      # (B, T) int32, right-padded
    features: mx.array    # (B, T, 3H)
    label_ids: mx.array   # (B, T, K) draft ids (0 where absent)
    label_w: mx.array     # (B, T, K) target probability over the draft vocab (0 where absent)
    answer: mx.array      # (B, T) bool: token is the target's greedy output
    lengths: mx.array     # (B,)


def feature_scale(features: np.ndarray, quantile: float = 99.5) -> np.ndarray:
    """Per-feature 1/RMS of ``features`` (N, F), each feature clipped at its ``quantile`` of |x|
    first, so the few massive-activation tokens (attention sinks, ~1e4) do not set the scale.

    Why: the target's mid/high residual features differ in size by ~1e4 across dimensions;
    ``fc`` over raw features then learns the big dimensions far faster than the rest (Adam steps
    every weight by ~lr). Training fc on scaled features and folding the scale into fc's columns
    afterwards (``fold_scale``) keeps the published format (fc reads raw features)."""
    x = np.abs(features.astype(np.float32))
    clip = np.percentile(x, quantile, axis=0)
    rms = np.sqrt(np.mean(np.minimum(x, clip) ** 2, axis=0))
    return (1.0 / np.maximum(rms, 1e-2 * np.median(rms) + 1e-6)).astype(np.float32)


def fold_scale(head: Eagle3Head, scale: np.ndarray) -> None:
    """fc(x * scale) == fc'(x) with fc' = fc with its columns scaled: the head reads raw features."""
    head.fc.weight = head.fc.weight * mx.array(scale, dtype=head.fc.weight.dtype)[None, :]


def make_batch(samples: Sequence[Sample], index: np.ndarray, scale: np.ndarray | None = None,
               ) -> Batch:
    T = max(len(s.tokens) for s in samples)
    B, K = len(samples), samples[0].topk_ids.shape[1]
    tok = np.zeros((B, T), np.int32)
    feat = np.zeros((B, T, samples[0].features.shape[1]), np.float32)
    lid, lw = np.zeros((B, T, K), np.int32), np.zeros((B, T, K), np.float32)
    ans = np.zeros((B, T), bool)
    for b, s in enumerate(samples):
        n = len(s.tokens)
        tok[b, :n], feat[b, :n], ans[b, :n] = s.tokens, s.features, s.answer.astype(bool)
        d = index[s.topk_ids]
        p = np.exp(s.topk_logp.astype(np.float32)) * (d >= 0)
        lw[b, :n] = p / np.maximum(p.sum(-1, keepdims=True), 1e-9)
        lid[b, :n] = np.maximum(d, 0)
    if scale is not None:
        feat *= scale
    return Batch(mx.array(tok), mx.array(feat), mx.array(lid), mx.array(lw), mx.array(ans),
                 mx.array([len(s.tokens) for s in samples]))


def batches(samples: Sequence[Sample], size: int, index: np.ndarray, rng: np.random.Generator,
            scale: np.ndarray | None = None) -> Iterator[Batch]:
    """Length-sorted groups of ``size`` samples (little padding), in shuffled group order."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].tokens))
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    for g in rng.permutation(len(groups)):
        yield make_batch([samples[i] for i in groups[g]], index, scale)


class _Unrolled:
    """The keys/values of every unrolled step so far; ``offset`` is the step (rope shift)."""

    def __init__(self) -> None:
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None and self.values is not None:
            k = mx.concatenate([self.keys, k], axis=2)
            v = mx.concatenate([self.values, v], axis=2)
        self.keys, self.values = k, v
        return k, v


def _shift(x: mx.array, by: int) -> mx.array:
    """x[:, t + by] at t (zero past the end)."""
    pad = mx.zeros((x.shape[0], by, *x.shape[2:]), dtype=x.dtype)
    return mx.concatenate([x[:, by:], pad], axis=1)


def _mask(T: int, step: int) -> mx.array:
    t = mx.arange(T)
    causal = t[:, None] >= t[None, :]
    diag = mx.repeat((t[:, None] == t[None, :])[:, None, :], step, axis=1).reshape(T, step * T)
    return mx.concatenate([causal, diag], axis=1) if step else causal


def unroll(head: Eagle3Head, batch: Batch, steps: int) -> list[tuple[mx.array, mx.array]]:
    """(draft log-probs (B, T, Dv), valid (B, T)) for each training-time-test step."""
    T = batch.tokens.shape[1]
    pos = mx.arange(T)[None]
    cache, hidden, out = _Unrolled(), head.fuse(batch.features), []
    for j in range(steps):
        cache.offset = j
        valid = pos + 1 + j < batch.lengths[:, None]
        hidden = head.step(_shift(batch.tokens, 1 + j), hidden, _mask(T, j), cache)
        out.append((nn.log_softmax(head.logits(hidden), axis=-1), valid))
    return out


def ttt_loss(head: Eagle3Head, batch: Batch, steps: int, answer_only: bool = False) -> mx.array:
    """The training-time-test loss; ``answer_only``: step j at t counts only where token
    t+2+j is an answer token (the head drafts answers, never the prompt: prompt positions
    teach it to predict user text)."""
    total, norm = mx.array(0.0), 0.0
    for j, (logp, valid) in enumerate(unroll(head, batch, steps)):
        if answer_only:
            valid = valid & _shift(batch.answer, 2 + j)
        ids, w = _shift(batch.label_ids, 1 + j), _shift(batch.label_w, 1 + j)
        ce = -(mx.take_along_axis(logp, ids, axis=-1) * w).sum(-1)
        total = total + 0.8 ** j * (ce * valid).sum() / mx.maximum(valid.sum(), 1)
        norm += 0.8 ** j
    return total / norm


def acceptance_counts(head: Eagle3Head, batch: Batch, steps: int) -> tuple[np.ndarray, int]:
    """(number of positions whose drafts 1..j+1 all match the target, for each j), positions."""
    T = batch.tokens.shape[1]
    pos = mx.arange(T)[None]
    eligible = pos + 1 + steps < batch.lengths[:, None]
    for j in range(steps):
        eligible = eligible & _shift(batch.answer, 2 + j)
    ok, hits = eligible, []
    for j, (logp, _) in enumerate(unroll(head, batch, steps)):
        draft = head.to_target(mx.argmax(logp, axis=-1))
        ok = ok & (draft == _shift(batch.tokens, 2 + j))
        hits.append(ok.sum())
    mx.eval(hits, eligible)
    return np.array([scalar_int(h) for h in hits]), scalar_int(eligible.sum())


def mean_accepted_length(accept: Sequence[float]) -> float:
    """Tokens per target forward of a greedy chain of len(accept) drafts: 1 + sum of P(first j ok)."""
    return 1.0 + float(sum(accept))
