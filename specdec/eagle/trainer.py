"""The training loop: AdamW on the head's trainable weights (embeddings and vocab maps frozen),
resumable checkpoints, a progress bar with ETA, held-out acceptance per draft position.

Contract: ``train(head, cfg, data)`` runs ``cfg.epochs`` epochs over the train shards in a
seeded order; after every shard it checkpoints (head weights, optimizer state, position), so a
rerun with the same arguments resumes where the last one stopped and reaches the same weights.
Tests: tests/eagle/test_train.py.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from tqdm import tqdm

from ..core.arrays import load_arrays
from .data import read_shard
from .head import Eagle3Head
from .train import (DraftVocab, acceptance_counts, batches, fold_scale, mean_accepted_length,
                    ttt_loss)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 2
    batch_size: int = 4
    lr: float = 1e-3
    warmup: int = 20
    ttt_steps: int = 3
    eval_steps: int = 5  # draft positions reported on held-out data
    grad_clip: float = 1.0
    checkpoint_every: int = 4  # shards (a checkpoint is ~12 bytes per head weight)
    seed: int = 0
    # train fc on per-feature scaled inputs (train.feature_scale); off: on SmolLM2 it learned
    # slower than raw features (held-out pos-1 0.075 vs 0.107 after 40 steps, docs/eagle.md)
    scale_features: bool = False
    # score only answer positions (the stored ``answer`` flags): prompt text is never drafted
    answer_only: bool = False


# fields added after runs were checkpointed: a checkpoint without one was written with this value
_LEGACY = {"answer_only": False}


@dataclass
class TrainData:
    """Shards, the draft vocabulary and the per-feature scale ``fc`` trains under (None: raw
    features); the scale is folded into ``fc`` when training ends (see ``train.feature_scale``)."""

    train: list[Path]
    heldout: list[Path]
    vocab: DraftVocab
    feature_scale: np.ndarray | None = None


@dataclass
class Report:
    """What training printed: loss per optimizer step, held-out acceptance per evaluation."""

    losses: list[float] = field(default_factory=list)
    acceptance: list[list[float]] = field(default_factory=list)
    resumed_from: int = 0


def freeze_fixed(head: Eagle3Head) -> None:
    head.freeze(keys=["d2t", "t2d"], recurse=False)
    head.embed_tokens.freeze()


def evaluate(head: Eagle3Head, data: TrainData, cfg: TrainConfig) -> list[float]:
    """Held-out P(drafts 1..j all accepted) for j = 1..eval_steps."""
    hits, n, index = np.zeros(cfg.eval_steps), 0, data.vocab.index()
    for path in data.heldout:
        for b in batches(read_shard(path), cfg.batch_size, index, np.random.default_rng(0),
                         data.feature_scale):
            h, m = acceptance_counts(head, b, cfg.eval_steps)
            hits, n = hits + h, n + m
    return (hits / max(n, 1)).tolist()


def _schedule(cfg: TrainConfig, total: int) -> Callable:
    warm = optim.linear_schedule(cfg.lr * 0.01, cfg.lr, max(cfg.warmup, 1))
    decay = optim.cosine_decay(cfg.lr, max(total - cfg.warmup, 1), cfg.lr * 0.05)
    return optim.join_schedules([warm, decay], [max(cfg.warmup, 1)])


def _ckpt_dir(out: Path) -> Path:
    return out / "checkpoint"


def save_checkpoint(out: Path, head: Eagle3Head, opt: optim.Optimizer, state: dict) -> None:
    d = _ckpt_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(d / "head.tmp.safetensors"), dict(tree_flatten(head.trainable_parameters())))
    mx.save_safetensors(str(d / "opt.tmp.safetensors"), dict(tree_flatten(opt.state)))
    (d / "head.tmp.safetensors").replace(d / "head.safetensors")
    (d / "opt.tmp.safetensors").replace(d / "opt.safetensors")
    (d / "state.json").write_text(json.dumps(state))  # written last: it names a complete pair


def load_checkpoint(out: Path, head: Eagle3Head, opt: optim.Optimizer, cfg: TrainConfig,
                    shards: list[str]) -> dict:
    d = _ckpt_dir(out)
    if not (d / "state.json").exists():
        return {"epoch": 0, "shard": 0, "step": 0}
    state = json.loads((d / "state.json").read_text())
    state["config"] = {**_LEGACY, **state["config"]}
    if state["config"] != asdict(cfg) or state.get("shards") != shards:
        raise ValueError(f"{d} was written with other training settings or data "
                         f"({state['config']}); rerun with those, or delete {d} to start over.")
    head.load_weights(list(load_arrays(str(d / "head.safetensors")).items()), strict=False)
    opt.state = tree_unflatten(list(load_arrays(str(d / "opt.safetensors")).items()))
    return state


def train(head: Eagle3Head, cfg: TrainConfig, data: TrainData, out: Path,
          log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
          stop_after_shards: int | None = None) -> Report | None:
    """Train ``head`` in place; see the module docstring. ``stop_after_shards``: return None
    after that many shards (checkpointed), as an interrupted run would."""
    freeze_fixed(head)
    index = data.vocab.index()
    per_epoch = sum(-(-len(read_shard(p)) // cfg.batch_size) for p in data.train)
    opt = optim.AdamW(learning_rate=_schedule(cfg, per_epoch * cfg.epochs), weight_decay=0.0)
    opt.init(head.trainable_parameters())
    shards = [p.name for p in data.train]
    state = load_checkpoint(out, head, opt, cfg, shards)
    report = Report(resumed_from=state["step"])
    step_fn = nn.value_and_grad(head, lambda b: ttt_loss(head, b, cfg.ttt_steps, cfg.answer_only))
    bar = tqdm(total=per_epoch * cfg.epochs, initial=state["step"], desc="train-drafter",
               unit="batch", file=sys.stderr, dynamic_ncols=True, mininterval=2.0)
    for epoch in range(state["epoch"], cfg.epochs):
        order = np.random.default_rng(cfg.seed + epoch).permutation(len(data.train))
        for si in range(state["shard"] if epoch == state["epoch"] else 0, len(order)):
            rng = np.random.default_rng([cfg.seed, epoch, si])
            for batch in batches(read_shard(data.train[order[si]]), cfg.batch_size, index, rng,
                                 data.feature_scale):
                loss, grads = step_fn(batch)
                grads, _ = optim.clip_grad_norm(grads, cfg.grad_clip)
                opt.update(head, grads)
                mx.eval(head.parameters(), opt.state, loss)
                report.losses.append(float(loss.item()))
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{report.losses[-1]:.3f}")
            if stop_after_shards is not None:
                stop_after_shards -= 1
            if stop_after_shards == 0 or (si + 1) % cfg.checkpoint_every == 0:
                state = {"epoch": epoch, "shard": si + 1, "step": bar.n, "config": asdict(cfg),
                         "shards": shards}
                save_checkpoint(out, head, opt, state)
                if stop_after_shards != 0 and si + 1 < len(order):  # long epochs: show progress
                    _log_acceptance(log, f"step {bar.n}", evaluate(head, data, cfg))
            if stop_after_shards == 0:
                bar.close()
                return None
        report.acceptance.append(evaluate(head, data, cfg))
        _log_acceptance(log, f"epoch {epoch + 1}/{cfg.epochs}", report.acceptance[-1])
        state = {"epoch": epoch + 1, "shard": 0, "step": bar.n, "config": asdict(cfg),
                 "shards": shards}
        save_checkpoint(out, head, opt, state)
    bar.close()
    if not report.acceptance:  # a finished run rerun: report the held-out figures again
        report.acceptance.append(evaluate(head, data, cfg))
        _log_acceptance(log, "already trained;", report.acceptance[-1])
    if data.feature_scale is not None:  # checkpoints keep the scaled-space fc; the head reads raw
        fold_scale(head, data.feature_scale)
    return report


def _log_acceptance(log: Callable[[str], None], when: str, acc: list[float]) -> None:
    cond = [acc[0]] + [b / a if a > 0 else 0.0 for a, b in zip(acc, acc[1:])]
    log(f"[train-drafter] {when} held-out acceptance by draft position: "
        + " ".join(f"{a:.3f}" for a in acc) + "  conditional: " + " ".join(f"{c:.2f}" for c in cond)
        + f"  (est. tokens per forward with k={len(acc)}: {mean_accepted_length(acc):.2f})")
