"""``train-drafter`` end to end: distill the target on prompts, choose the draft vocabulary,
build a head shaped like the target, train it, write it in the published format.

Contract: ``train_drafter(model, prompt_ids, out, opts, distiller)`` is resumable (shards and
checkpoints under ``out`` are reused when the run's fingerprint matches, refused otherwise) and
writes ``out/config.json`` (with ``draft_acceptance``: held-out, by draft position) +
``out/model.safetensors``. Tests: tests/eagle/test_train.py.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import mlx.core as mx
import numpy as np
from tqdm import tqdm

from .data import DataSpec, Distiller, build_split, read_shard, write_manifest
from ..core.arrays import flat_tree
from .head import ARCHS, Eagle3Head, HeadConfig, default_layer_ids
from .io import load_head, save_head
from .train import DraftVocab, feature_scale
from .trainer import Report, TrainConfig, TrainData, train


@dataclass(frozen=True)
class DrafterOptions:
    train: TrainConfig = TrainConfig()
    draft_vocab: int = 8192
    top_k: int = 8
    shard_size: int = 16
    max_len: int = 640
    heldout: int = 4  # prompts kept out of training for the acceptance figures
    layer_ids: tuple[int, ...] | None = None
    # the head's decoder layer class: "auto" is the target's own (``head_layer_type``) where the
    # head supports it, else llama (LlamaForCausalLMEagle3 loads in EAGLE, vLLM and SGLang)
    layer_type: str = "auto"
    # the decoder layer starts as the target's last (init_from_target); off: random, fc calibrated.
    # SmolLM2, 32 steps from the same start: held-out pos-1 0.129 vs 0.103, loss 5.5 vs 8.5
    init_from_target: bool = True
    save_dtype: str = "float16"
    # a trained head directory to start from (its weights and draft vocabulary): train it on
    # more or other data; init_from_target and layer_type are then the head's own
    init_head: str | None = None


def new_head(model, vocab: np.ndarray, layer_ids: tuple[int, ...], opts: DrafterOptions,
             seed: int, features: np.ndarray | None = None) -> Eagle3Head:
    """A head shaped like the target's layers; its norm and LM head start as the target's own
    (restricted to the draft vocabulary), which trains much faster than a random start.
    ``features`` (N, 3H), a sample of the training features: ``fc`` starts scaled so its output
    has RMS 1 there (``calibrate_fc``)."""
    a = model.args
    cfg = HeadConfig(
        hidden_size=a.hidden_size, intermediate_size=a.intermediate_size,
        num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_key_value_heads or a.num_attention_heads,
        vocab_size=a.vocab_size, draft_vocab_size=len(vocab), target_hidden_size=a.hidden_size,
        aux_layer_ids=tuple(layer_ids), model_type=head_layer_type(model, opts.layer_type),
        head_dim=getattr(a, "head_dim", None), rms_norm_eps=a.rms_norm_eps,
        rope_theta=getattr(a, "rope_theta", 10000.0), rope_scaling=getattr(a, "rope_scaling", None),
        max_position_embeddings=getattr(a, "max_position_embeddings", None) or 8192)
    mx.random.seed(seed)
    head = Eagle3Head(cfg, model.model.embed_tokens)
    eye = mx.eye(a.hidden_size)
    full = model.lm_head(eye) if hasattr(model, "lm_head") else model.model.embed_tokens.as_linear(eye)
    head.lm_head.weight = full.T[mx.array(vocab)].astype(mx.float32)
    head.norm.weight = model.model.norm.weight.astype(mx.float32)
    if opts.init_from_target:
        init_from_target(head, model)
    elif features is not None:
        calibrate_fc(head, features)
    mx.eval(head.parameters())
    return head


def head_layer_type(model, layer_type: str) -> str:
    """The head's decoder layer class: ``layer_type``, or for "auto" the target's own
    (``model.args.model_type``) when the head supports it (``head.ARCHS``), else llama.

    Why: ``init_from_target`` copies the target's last layer; only the target's own class holds
    every one of its weights (Qwen2's q/k/v biases, Qwen3's q/k norms)."""
    if layer_type != "auto":
        return layer_type
    target = getattr(model.args, "model_type", "llama")
    return target if target in ARCHS else "llama"


def init_from_target(head: Eagle3Head, model) -> None:
    """Start the head as the target's own top: ``fc`` passes the highest captured feature (a
    residual stream, layer ``aux_layer_ids[-1]``'s input) through, the decoder layer is the
    target's last layer reading it (q/k/v's embedding half zero), so with the target's norm and
    LM head the untrained head is the target's last layer applied a few layers early.

    Exact or refused: every weight of the target's last layer is copied (a weight the head's
    layer class has no place for is named in the error), and the head's step on a probe input
    must equal the target's layer (another class, e.g. another activation, fails).

    Why: a random layer has to learn what a transformer layer over this residual stream does;
    the target's last layer already maps such a stream to its LM head's space (its outputs are
    sized for that stream, which is why fc is not calibrated to RMS 1 here).
    Tests: tests/eagle/test_sanity.py."""
    h, ht = head.config.hidden_size, head.config.target_hidden_size
    if h != ht:
        raise ValueError(f"init_from_target needs the head's width ({h}) to be the target's ({ht})")
    fc = mx.zeros((h, 3 * ht))
    head.fc.weight = mx.concatenate([fc[:, : 2 * ht], mx.eye(ht)], axis=1)
    src = dict(flat_tree(model.layers[-1].parameters()))
    mine = dict(flat_tree(head.midlayer.parameters()))
    new = {}
    for k, v in src.items():
        v = v.astype(mx.float32)
        if k.startswith("self_attn.") and k.split(".")[1] in ("q_proj", "k_proj", "v_proj") \
                and k.endswith(".weight"):
            v = mx.concatenate([mx.zeros_like(v), v], axis=1)  # [embedding half, hidden half]
        if k in mine and mine[k].shape == v.shape:
            new[k] = v
    unused = sorted(set(src) - set(new))
    if unused:
        raise ValueError(
            f"the head's {head.config.model_type} decoder layer has no place for the target's "
            f"last-layer weights {unused}: init_from_target would drop them. Use the target's "
            "own layer class (--layer-type auto) or a random start (--no-init-from-target).")
    new["hidden_norm.weight"] = src["input_layernorm.weight"].astype(mx.float32)
    missing = sorted(set(mine) - set(new))
    if missing:
        raise ValueError(f"the target's last layer lacks the head's weights {missing}: "
                         "init_from_target needs the same layer type (--layer-type auto)")
    head.midlayer.load_weights(list(new.items()), strict=True)
    _check_is_target_layer(head, model)


def _check_is_target_layer(head: Eagle3Head, model) -> None:
    """The initialised head's step equals the target's last layer on a probe stream (fc
    passes the high feature through; the token's embedding half is zero)."""
    ht = head.config.target_hidden_size
    layer = model.layers[-1]
    dtype = next(v.dtype for _, v in flat_tree(layer.parameters()))
    x = mx.random.normal((1, 8, ht), key=mx.random.key(0)) * 4.0
    want = layer(x.astype(dtype), "causal", None).astype(mx.float32)
    got = head.step(mx.zeros((1, 8), dtype=mx.int32), x, "causal", None)
    err = float(mx.abs(got - want).max()) / max(float(mx.abs(want).max()), 1e-6)
    if not err < (1e-4 if dtype == mx.float32 else 2e-2):
        raise ValueError(f"the head's {head.config.model_type} decoder layer is not the target's "
                         f"({type(model.layers[-1]).__module__}) on the same weights (relative "
                         f"difference {err:.2g}): init_from_target needs the target's own layer "
                         "class (--layer-type auto) or a random start (--no-init-from-target).")


def calibrate_fc(head: Eagle3Head, features: np.ndarray) -> None:
    """Scale ``fc``'s initial weights so ``fc(features)`` has RMS 1.

    Why: the target's mid/high features have RMS ~120 (SmolLM2), so a default-initialised
    ``fc`` puts a residual of RMS ~60 beside the decoder layer's O(1) attention/MLP output: the
    head's output is then ``fc(features)`` alone and the next token's embedding (which only the
    attention reads) barely reaches the logits; learning to shrink ``fc`` first took most of a
    short run (tests/eagle/test_sanity.py: overfitting 3 answers, acceptance 0.53 vs 0.8)."""
    out = head.fuse(mx.array(features.astype(np.float32)))
    head.fc.weight = head.fc.weight / mx.maximum(mx.sqrt(mx.mean(out * out)), 1e-6)


def _fingerprint(model, spec: DataSpec, max_tokens: int) -> str:
    """What every shard depends on besides its prompts (those are in each shard's name)."""
    h = hashlib.sha256(json.dumps([list(spec.layer_ids), spec.top_k, spec.max_len, max_tokens,
                                   model.args.vocab_size, len(model.layers)]).encode())
    return h.hexdigest()[:16]


def distill(model, prompt_ids: Sequence[list[int]], out: Path, spec: DataSpec,
            distiller: Distiller, heldout: int, max_tokens: int) -> tuple[list[Path], list[Path]]:
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    fp, fp_file = _fingerprint(model, spec, max_tokens), data / "fingerprint"
    if fp_file.exists() and fp_file.read_text() != fp:
        raise ValueError(f"{data} holds data of another model or other data settings; use a new "
                         "--output directory or delete it.")
    fp_file.write_text(fp)
    held, rest = list(prompt_ids[:heldout]), list(prompt_ids[heldout:])
    bar = tqdm(total=len(prompt_ids), desc="distill", unit="prompt", file=sys.stderr,
               dynamic_ncols=True, mininterval=2.0)
    held_paths = build_split(held, distiller, spec, data, "heldout", bar.update)
    train_paths = build_split(rest, distiller, spec, data, "train", bar.update)
    bar.close()
    write_manifest(data, spec, train_paths, held_paths)
    return train_paths, held_paths


def token_counts(paths: Sequence[Path], vocab_size: int) -> np.ndarray:
    counts = np.zeros(vocab_size, np.int64)
    for p in paths:
        for s in read_shard(p):
            counts += np.bincount(s.tokens, minlength=vocab_size)[:vocab_size]
    return counts


def feature_rows(paths: Sequence[Path], max_rows: int) -> np.ndarray:
    """Up to ``max_rows`` feature rows spread evenly over the shards."""
    per = max(max_rows // max(len(paths), 1), 1)
    rows = []
    for p in paths:
        f = np.concatenate([s.features for s in read_shard(p)])
        rows.append(f[np.linspace(0, len(f) - 1, min(per, len(f))).astype(int)])
    return np.concatenate(rows)


def shard_feature_scale(paths: Sequence[Path], max_rows: int = 20000) -> np.ndarray:
    """``train.feature_scale`` of up to ``max_rows`` feature rows spread over the shards."""
    return feature_scale(feature_rows(paths, max_rows))


def _start_and_spec(model, n_prompts: int, opts: DrafterOptions) -> tuple[Eagle3Head | None, DataSpec]:
    """The start head (``init_head``, else None) and the data settings: its layers unless
    ``layer_ids`` names others, which is refused."""
    if n_prompts <= opts.heldout:
        raise ValueError(f"{n_prompts} prompts leave none to train on after {opts.heldout} "
                         "held out; give more prompts or a smaller --heldout.")
    start = load_head(opts.init_head, model) if opts.init_head else None
    layer_ids = opts.layer_ids or default_layer_ids(len(model.layers))
    if start is not None and opts.layer_ids is None:
        layer_ids = start.config.aux_layer_ids
    elif start is not None and tuple(layer_ids) != tuple(start.config.aux_layer_ids):
        raise ValueError(f"--layers {list(layer_ids)} differ from the start head's layers "
                         f"{list(start.config.aux_layer_ids)} ({opts.init_head}): drop --layers.")
    return start, DataSpec(tuple(layer_ids), opts.top_k, opts.shard_size, opts.max_len)


def distill_only(model, prompt_ids: Sequence[list[int]], out: str | Path, opts: DrafterOptions,
                 distiller: Distiller, max_tokens: int) -> tuple[list[Path], list[Path]]:
    """``train_drafter``'s data half alone: the shards it would write (train, held-out paths),
    so the same call without it later trains on them (resumed, never distilled twice).
    Tests: tests/eagle/test_train.py."""
    _, spec = _start_and_spec(model, len(prompt_ids), opts)
    return distill(model, prompt_ids, Path(out), spec, distiller, opts.heldout, max_tokens)


def train_drafter(model, prompt_ids: Sequence[list[int]], out: str | Path, opts: DrafterOptions,
                  distiller: Distiller, max_tokens: int, stop_after_shards: int | None = None,
                  ) -> Report | None:
    out = Path(out)
    start, spec = _start_and_spec(model, len(prompt_ids), opts)
    train_paths, held_paths = distill(model, prompt_ids, out, spec, distiller, opts.heldout,
                                      max_tokens)
    if start is not None:
        head, vocab = start, DraftVocab.of_head(start)
    else:
        vocab = DraftVocab.from_counts(token_counts(train_paths, model.args.vocab_size),
                                       opts.draft_vocab)
        head = new_head(model, vocab.ids, spec.layer_ids, opts, opts.train.seed,
                        features=feature_rows(train_paths, 2048))
        vocab.apply(head)
    scale = shard_feature_scale(train_paths) if opts.train.scale_features else None
    report = train(head, opts.train, TrainData(train_paths, held_paths, vocab, scale), out,
                   stop_after_shards=stop_after_shards)
    if report is None:
        return None
    # the held-out acceptance by draft position: its cap in a chain (``io.chain_k``) follows it
    head.config.extra["draft_acceptance"] = [round(float(a), 4) for a in report.acceptance[-1]]
    size = save_head(head, out, dtype=getattr(mx, opts.save_dtype))
    print(f"[train-drafter] wrote {out}/model.safetensors ({size / 2**20:.1f} MiB, draft vocabulary "
          f"{len(vocab.ids)}, layers {list(spec.layer_ids)})", file=sys.stderr)
    return report
