"""train-drafter on a tiny random target: the training-time test equals cached decoding, the
loss falls, an interrupted run resumes to the same weights, and the output loads."""

from __future__ import annotations

import dataclasses
import json
import re

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import KVCache

from specdec.eagle.data import DataSpec, samples_of
from specdec.eagle.io import load_head
from specdec.eagle.one_pass import one_pass
from specdec.eagle.pipeline import DrafterOptions, distill_only, train_drafter
from specdec.eagle.train import DraftVocab, make_batch, unroll
from specdec.eagle.trainer import TrainConfig

from .conftest import VOCAB, tiny_head, tiny_target

OPTS = DrafterOptions(train=TrainConfig(epochs=3, batch_size=2, lr=3e-3, warmup=2, ttt_steps=3,
                                        eval_steps=3, checkpoint_every=2),
                      draft_vocab=64, shard_size=4, heldout=2, save_dtype="float32",
                      init_from_target=False)  # a random start: the loss must fall from it


def _prompts(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, rng.integers(6, 12)).tolist() for _ in range(n)]


def test_training_time_test_equals_cached_decoding():
    target = tiny_target("llama")
    head = tiny_head(target)
    spec = DataSpec((1, 3, 4))
    s = samples_of(target, [[5, 9, 2, 7, 1, 3]], [[8, 4, 6, 2, 9, 11]], spec)[0]
    vocab = DraftVocab(np.array(np.nonzero(np.array(head.t2d))[0]), VOCAB)
    batch = make_batch([s], vocab.index())
    steps = unroll(head, batch, 3)
    feats, toks = mx.array(s.features.astype(np.float32))[None], mx.array(s.tokens)[None]
    for t in (0, 4, 7):
        cache = KVCache()
        h = head.step(toks[:, 1:t + 2], head.fuse(feats[:, :t + 1]), "causal" if t else None, cache)
        hid = h[:, -1:]
        for j in range(3):
            if j:
                hid = head.step(toks[:, t + 1 + j:t + 2 + j], hid, None, cache)
            ref = head.logits(hid)[0, 0]
            got = steps[j][0][0, t]
            assert mx.allclose(got - mx.logsumexp(got), ref - mx.logsumexp(ref), atol=1e-4), (t, j)


def test_tiny_end_to_end_loss_falls_resumes_and_loads(tmp_path, capsys):
    target = tiny_target("llama")
    distiller = one_pass(target, 16, eos=())
    prompts = _prompts()
    full = train_drafter(target, prompts, tmp_path / "full", OPTS, distiller, 16)
    first, last = np.mean(full.losses[:3]), np.mean(full.losses[-3:])
    assert last < 0.8 * first, full.losses
    assert len(full.acceptance) == 3 and all(0 <= a <= 1 for a in full.acceptance[-1])
    err = capsys.readouterr().err
    assert "epoch 3/3 held-out acceptance by draft position" in err
    assert re.search(r"step \d+ held-out acceptance by draft position", err)  # mid-epoch checkpoint

    assert train_drafter(target, prompts, tmp_path / "cut", OPTS, distiller, 16, stop_after_shards=4) is None
    state = tmp_path / "cut" / "checkpoint" / "state.json"  # written before answer_only existed
    legacy = json.loads(state.read_text())
    del legacy["config"]["answer_only"]
    state.write_text(json.dumps(legacy))
    resumed = train_drafter(target, prompts, tmp_path / "cut", OPTS, distiller, 16)
    assert resumed.resumed_from > 0
    a = load_head(tmp_path / "full", target)
    b = load_head(tmp_path / "cut", target)
    for (ka, va), (kb, vb) in zip(tree_flatten(a.parameters()), tree_flatten(b.parameters())):
        assert ka == kb and mx.allclose(va, vb, atol=1e-6), ka
    assert a.config.aux_layer_ids == (2, 3, 3) and a.config.draft_vocab_size == 64
    # its held-out acceptance by position rides in config.json: its cap in a chain follows it
    assert a.config.extra["draft_acceptance"] == pytest.approx(full.acceptance[-1], abs=1e-4)

    other = dataclasses.replace(OPTS, train=dataclasses.replace(OPTS.train, lr=1e-2))
    with pytest.raises(ValueError, match="other training settings or data"):
        train_drafter(target, prompts, tmp_path / "cut", other, distiller, 16)
    with pytest.raises(ValueError, match="other training settings or data"):  # more prompts
        train_drafter(target, prompts + _prompts(4, seed=1), tmp_path / "cut", OPTS, distiller, 16)
    with pytest.raises(ValueError, match="another model or other data settings"):
        train_drafter(target, prompts, tmp_path / "cut", OPTS, one_pass(target, 8, ()), 8)


def test_init_head_continues_a_trained_head_with_its_vocabulary_and_layers(tmp_path):
    """``init_head``: training starts from the head's weights and keeps its draft vocabulary and
    layers (a new head's vocabulary would come from the new prompts' token counts); with a zero
    learning rate the output is the start head itself. Layers that differ are refused."""
    target = tiny_target("llama")
    distiller = one_pass(target, 8, eos=())
    one = dataclasses.replace(OPTS, train=dataclasses.replace(OPTS.train, epochs=1))
    train_drafter(target, _prompts(6), tmp_path / "start", one, distiller, 8)
    start = load_head(tmp_path / "start", target)
    frozen = dataclasses.replace(one, init_head=str(tmp_path / "start"), draft_vocab=32,
                                 train=dataclasses.replace(one.train, lr=0.0))
    train_drafter(target, _prompts(6, seed=3), tmp_path / "more", frozen, distiller, 8)
    more = load_head(tmp_path / "more", target)
    assert more.config == start.config
    for (ka, va), (kb, vb) in zip(tree_flatten(start.parameters()), tree_flatten(more.parameters())):
        assert ka == kb and mx.array_equal(va, vb), ka
    with pytest.raises(ValueError, match="differ from the start head's layers"):
        train_drafter(target, _prompts(6, seed=3), tmp_path / "other",
                      dataclasses.replace(frozen, layer_ids=(1, 2, 3)), distiller, 8)


def test_distill_only_writes_the_shards_a_later_training_run_reuses(tmp_path):
    """``distill_only`` (``train-drafter --distill-only``) writes exactly the shards
    ``train_drafter`` would, and nothing else: the same call without it answers no prompt again."""
    target = tiny_target("llama")
    base, calls = one_pass(target, 8, eos=()), []

    def distiller(prompts, spec):
        calls.append(len(prompts))
        return base(prompts, spec)

    one = dataclasses.replace(OPTS, train=dataclasses.replace(OPTS.train, epochs=1))
    train, held = distill_only(target, _prompts(6), tmp_path, one, distiller, 8)
    assert calls == [2, 4] and len(held) == 1 and len(train) == 1  # 2 held out, shards of 4
    assert all(p.exists() for p in train + held) and not (tmp_path / "model.safetensors").exists()
    calls.clear()
    assert train_drafter(target, _prompts(6), tmp_path, one, distiller, 8) is not None
    assert calls == [] and (tmp_path / "model.safetensors").exists()
