"""Sanity checks of EAGLE-3 training against the target itself (issue #47): a training row's
features and labels are what a fresh target forward gives (features up to t, the target's greedy
token t+2 as step 0's label at t), the head drafts at decode time exactly what the training-time
unroll computes at the same position (same layers, token shift, recursion on its own hidden
state), and training on a few short sequences drives their acceptance to ~1 at positions 1-3."""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest

from specdec.drafters.eagle import EagleDrafter
from specdec.eagle.capture import capture_layers
from specdec.eagle.data import DataSpec, batch_answerer, samples_of, write_shard
from specdec.eagle.pipeline import DrafterOptions, _check_is_target_layer, new_head
from specdec.eagle.train import Batch, DraftVocab, _shift, make_batch, unroll
from specdec.eagle.trainer import TrainConfig, TrainData, train
from specdec.engine import token_stream

from .conftest import VOCAB, tiny_head, tiny_target

STEPS = 150  # optimizer steps (one batch per epoch): acceptance ~0.97 on these answers
PROMPTS = [[5, 9, 2, 7, 1, 3], [8, 8, 40, 12, 3], [61, 2, 2, 17, 30, 4, 9]]


def _fresh(target, ids: list[int], layers) -> tuple[np.ndarray, int]:
    """(features at the last position, the target's greedy next token) from one uncached forward."""
    with capture_layers(target, layers) as cap:
        logits = target(mx.array([ids]))
    return np.array(cap.fused_input()[0, -1]), int(mx.argmax(logits[0, -1]).item())


def test_a_training_row_is_aligned_with_the_targets_own_forward():
    target = tiny_target("llama")
    spec = DataSpec((1, 3, 4))
    answers = batch_answerer(target, 10, eos=())(PROMPTS[:1])
    s = samples_of(target, PROMPTS[:1], answers, spec)[0]
    vocab = DraftVocab(np.arange(VOCAB), VOCAB)  # every id: labels are the target's own top-k
    b = make_batch([s], vocab.index())
    step0_label = np.array(_shift(b.label_ids, 1))[0, :, 0]  # what step 0 at t is scored on
    step0_token = np.array(_shift(b.tokens, 1))[0]  # the token step 0 reads at t
    n = len(s.tokens)
    for t in range(n - 2):
        feats, _ = _fresh(target, s.tokens[:t + 1].tolist(), spec.layer_ids)
        _, greedy_next = _fresh(target, s.tokens[:t + 2].tolist(), spec.layer_ids)
        assert np.allclose(s.features[t].astype(np.float32), feats, rtol=2e-3, atol=2e-2), t
        assert step0_token[t] == s.tokens[t + 1]
        assert step0_label[t] == greedy_next, t  # the distribution of token t + 2
        if s.answer[t + 2]:  # answer tokens are the target's greedy ones: acceptance's reference
            assert s.tokens[t + 2] == greedy_next
    assert s.answer[len(PROMPTS[0]):].all() and not s.answer[:len(PROMPTS[0])].any()


class _Recording(EagleDrafter):
    def __init__(self, head):
        super().__init__(head)
        self.proposals: list[tuple[int, list[int]]] = []

    def propose(self, context, k):
        p = super().propose(context, k)
        self.proposals.append((len(context), list(p.tokens)))
        return p


def test_decode_time_drafts_equal_the_training_unroll_at_the_same_position():
    target = tiny_target("llama")
    head = tiny_head(target)
    prompt, k = PROMPTS[2], 3
    drafter = _Recording(head)
    out = [e.token for e in token_stream(target, prompt, drafter=drafter, max_tokens=20,
                                         num_draft_tokens=k)]
    seq = prompt + out
    with capture_layers(target, head.config.aux_layer_ids) as cap:
        target(mx.array([seq]))
    T = len(seq)
    zeros = mx.zeros((1, T, 1))
    batch = Batch(mx.array([seq]), cap.fused_input(), zeros.astype(mx.int32), zeros,
                  mx.ones((1, T), dtype=mx.bool_), mx.array([T]))
    steps = [np.array(head.to_target(mx.argmax(lp, axis=-1)))[0] for lp, _ in unroll(head, batch, k)]
    compared = 0
    for n, drafts in drafter.proposals:  # context seq[:n]: the head's step 0 reads position n - 2
        for j, d in enumerate(drafts):
            if n + j >= T:
                break
            assert d == steps[j][n - 2], (n, j, drafts)
            compared += 1
            if d != seq[n + j]:  # later drafts read this (rejected) draft, not the target's token
                break
    assert compared >= 8 and len(drafter.proposals) >= 4


def test_training_on_three_short_sequences_drives_their_acceptance_to_one(tmp_path):
    """Overfitting: the trainer on 3 answers of a tiny target reaches acceptance ~1 at draft
    positions 1-3 on those answers (a broken shift, mask, loss or vocabulary map cannot); ``fc``
    starts calibrated to output RMS 1 on the training features (``pipeline.calibrate_fc``)."""
    target = tiny_target("llama")
    spec = DataSpec((1, 3, 4))
    samples = samples_of(target, PROMPTS, batch_answerer(target, 12, eos=())(PROMPTS), spec)
    path = tmp_path / "train_00000.safetensors"
    write_shard(path, samples)
    counts = np.bincount(np.concatenate([s.tokens for s in samples]), minlength=VOCAB)
    vocab = DraftVocab.from_counts(counts, 64)
    feats = np.concatenate([s.features for s in samples])
    head = new_head(target, vocab.ids, spec.layer_ids, DrafterOptions(init_from_target=False), seed=0,
                    features=feats)
    assert abs(float(mx.sqrt(mx.mean(head.fuse(mx.array(feats.astype(np.float32))) ** 2))) - 1) < 1e-3
    vocab.apply(head)
    cfg = TrainConfig(epochs=STEPS, batch_size=3, lr=3e-3, warmup=5, ttt_steps=3, eval_steps=3,
                      checkpoint_every=10**6)
    data = TrainData([path], [path], vocab)
    report = train(head, cfg, data, tmp_path / "out", log=lambda s: None)
    assert min(report.acceptance[-1]) >= 0.9, report.acceptance[-1]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_a_head_initialised_from_the_target_is_its_last_layer_on_the_high_feature(arch):
    """``init_from_target``: before training, the head's step-0 logits at every position are
    the target's last layer, norm and LM head applied to the highest captured feature (the
    next token's embedding not read yet); a wrong half of q/k/v, a missing weight (Qwen2's q/k/v
    biases, Qwen3's q/k norms: the head's layer is the target's own class) or an fc that does
    not pass the feature through changes them."""
    target = tiny_target(arch)
    layers, seq = (1, 3, 4), PROMPTS[2] + PROMPTS[0]
    vocab = DraftVocab(np.arange(0, VOCAB, 2), VOCAB)
    head = new_head(target, vocab.ids, layers, DrafterOptions(init_from_target=True), seed=0)
    vocab.apply(head)
    assert head.config.model_type == arch
    with capture_layers(target, layers) as cap:
        target(mx.array([seq]))
    feats = cap.fused_input()
    hidden = head.step(mx.array([seq]), head.fuse(feats), "causal", None)
    got = head.logits(hidden)
    h = target.args.hidden_size
    top = target.layers[-1](feats[..., 2 * h:], "causal", None)
    want = target.model.embed_tokens.as_linear(target.model.norm(top))[..., mx.array(vocab.ids)]
    assert mx.allclose(got, want, atol=1e-4, rtol=1e-4), float(mx.abs(got - want).max())
    assert float(mx.abs(head.midlayer.self_attn.q_proj.weight[:, :h]).max()) == 0


@pytest.mark.parametrize("arch, unused", [("qwen2", "self_attn.q_proj.bias"),
                                          ("qwen3", "self_attn.q_norm.weight")])
def test_init_from_target_refuses_a_layer_class_that_drops_the_targets_weights(arch, unused):
    """A llama head over a Qwen target would silently drop the weights llama has no place
    for: refused, naming them."""
    vocab = DraftVocab(np.arange(0, VOCAB, 2), VOCAB)
    with pytest.raises(ValueError, match=re.escape(unused)):
        new_head(tiny_target(arch), vocab.ids, (1, 3, 4),
                 DrafterOptions(init_from_target=True, layer_type="llama"), seed=0)


def test_init_from_target_checks_the_layer_computes_the_targets_function():
    """The probe after copying: a head layer that differs from the target's (here one weight
    changed after the copy) is refused."""
    target = tiny_target("llama")
    vocab = DraftVocab(np.arange(0, VOCAB, 2), VOCAB)
    head = new_head(target, vocab.ids, (1, 3, 4), DrafterOptions(init_from_target=True), seed=0)
    _check_is_target_layer(head, target)  # as built: the target's layer
    head.midlayer.mlp.down_proj.weight = head.midlayer.mlp.down_proj.weight * 1.01
    with pytest.raises(ValueError, match="not the target's"):
        _check_is_target_layer(head, target)
