"""Self-distillation data for an EAGLE-3 head, streamed to disk in shards (memory bounded).

The target answers each prompt greedily; the chosen layers' features (``capture_layers``) and the
target's own next-token distribution at every position of prompt + answer, kept as its top-k
log-probabilities (soft labels), come from the answering forwards themselves
(``one_pass.one_pass``, what ``train-drafter`` runs) or, for reference, from one uncached
forward over prompt + answer (``samples_of``; tests and lab scripts). A shard is one
safetensors file of ``shard_size`` samples: tokens (N,) int32, features (N, 3H) float16,
topk_ids (N, K) int32, topk_logp (N, K) float16, answer (N,) uint8 (1 where an answer token is the target's own
argmax at the previous position), lengths (S,) int32. ``manifest.json`` makes the run resumable.
Tests: tests/eagle/test_data.py, tests/eagle/test_train.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import mlx.core as mx
import numpy as np

from ..core.arrays import load_arrays
from .capture import capture_layers

Answer = Callable[[list[list[int]]], list[list[int]]]  # prompts -> the target's greedy answers


@dataclass
class Sample:
    tokens: np.ndarray
    features: np.ndarray
    topk_ids: np.ndarray
    topk_logp: np.ndarray
    answer: np.ndarray


@dataclass(frozen=True)
class DataSpec:
    layer_ids: tuple[int, ...]
    top_k: int = 8
    shard_size: int = 16
    max_len: int = 640  # prompt + answer tokens kept per sample


# prompts (one shard's), data settings -> one sample per prompt, in prompt order
Distiller = Callable[[list[list[int]], DataSpec], list[Sample]]


def batch_answerer(model, max_tokens: int, eos: Sequence[int]) -> Answer:
    """Greedy answers for a batch of prompts with mlx-lm's ``BatchGenerator`` (a batch costs
    little more than one row on a CPU): the answers ``one_pass`` reproduces, and with
    ``samples_of`` the two-pass reference it is tested against."""
    from mlx_lm.generate import BatchGenerator

    def answer(prompts: list[list[int]]) -> list[list[int]]:
        # every prompt prefilled and decoded in one batch (mlx-lm's defaults, 8 and 32, split
        # a shard of 64 into rounds; a decode step's cost grows far less than its batch)
        n = len(prompts)
        gen = BatchGenerator(model, stop_tokens=[[t] for t in eos] or None,
                             completion_batch_size=n, prefill_batch_size=n)
        uids = gen.insert(prompts, [max_tokens] * len(prompts))
        out: dict[int, list[int]] = {u: [] for u in uids}
        while responses := gen.next_generated():
            for r in responses:
                if r.finish_reason != "stop":
                    out[r.uid].append(int(r.token))
        gen.close()
        return [out[u] for u in uids]

    return answer


def make_sample(tokens: np.ndarray, n_prompt: int, features: np.ndarray, topk_ids: np.ndarray,
                topk_logp: np.ndarray) -> Sample:
    """The sample of ``tokens`` (its first ``n_prompt`` the prompt's) from per-position arrays
    (at least ``len(tokens)`` rows); ``answer`` marks each answer token that is the target's
    argmax at the position before it."""
    n = len(tokens)
    ans = np.zeros(n, np.uint8)
    ans[n_prompt:] = tokens[n_prompt:] == topk_ids[n_prompt - 1:n - 1, 0]
    return Sample(tokens, features[:n], topk_ids[:n], topk_logp[:n], ans)


def samples_of(model, prompts: Sequence[list[int]], answers: Sequence[list[int]],
               spec: DataSpec) -> list[Sample]:
    """One right-padded uncached forward over every prompt + answer: features and the target's
    top-k (the reference ``one_pass`` is checked against; lab scripts distill with it)."""
    seqs = [(p + a)[: spec.max_len] for p, a in zip(prompts, answers)]
    T = max(len(x) for x in seqs)
    ids = mx.array([x + [0] * (T - len(x)) for x in seqs])
    with capture_layers(model, spec.layer_ids) as cap:
        logits = model(ids).astype(mx.float32)  # causal: padding at the right changes nothing
        feats = cap.fused_input().astype(mx.float16)
    mx.eval(logits, feats)
    np_top, np_lp = top_logp(np.asarray(logits), spec.top_k)
    np_feats = np.array(feats)
    return [make_sample(np.array(x, np.int32), len(p), np_feats[b], np_top[b], np_lp[b])
            for b, (p, x) in enumerate(zip(prompts, seqs))]


def top_logp(logits: np.ndarray, k: int, rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(..., V) float32 logits -> the k most likely ids (int32, best first) and their
    log-probabilities (float16), ``rows`` positions at a time.

    Why numpy and chunks: mlx's CPU logsumexp and argpartition over a (B, T, 49k) block took
    ~4x the time of numpy's (vectorised exp, one scratch buffer that stays in cache), and the
    full log-softmax is never stored: the top-k of the logits is the top-k of the log-probs.
    Tests: tests/eagle/test_data.py (against a float64 log-softmax + full sort)."""
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    ids = np.empty((len(flat), k), np.int32)
    logp = np.empty((len(flat), k), np.float16)
    buf = np.empty((min(rows, len(flat)), V), np.float32)
    for s in range(0, len(flat), rows):
        x = flat[s:s + rows]
        top = np.argpartition(x, V - k, axis=-1)[:, V - k:]
        val = np.take_along_axis(x, top, -1)
        order = np.argsort(-val, axis=-1, kind="stable")
        m = val.max(-1, keepdims=True)
        y = buf[: len(x)]
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        lse = m + np.log(y.sum(-1, keepdims=True))
        ids[s:s + rows] = np.take_along_axis(top, order, -1)
        logp[s:s + rows] = np.take_along_axis(val, order, -1) - lse
    return ids.reshape(logits.shape[:-1] + (k,)), logp.reshape(logits.shape[:-1] + (k,))


def write_shard(path: Path, samples: list[Sample]) -> None:
    arrays = {k: mx.array(np.concatenate([getattr(s, k) for s in samples]))
              for k in ("tokens", "features", "topk_ids", "topk_logp", "answer")}
    arrays["lengths"] = mx.array(np.array([len(s.tokens) for s in samples], np.int32))
    tmp = path.with_suffix(".tmp.safetensors")
    mx.save_safetensors(str(tmp), arrays)
    tmp.replace(path)


def read_shard(path: Path) -> list[Sample]:
    a = {k: np.array(v) for k, v in load_arrays(str(path)).items()}
    out, start = [], 0
    for n in a["lengths"].tolist():
        sl = slice(start, start + n)
        out.append(Sample(a["tokens"][sl], a["features"][sl], a["topk_ids"][sl],
                          a["topk_logp"][sl], a["answer"][sl]))
        start += n
    return out


def build_split(prompts: Sequence[list[int]], distiller: Distiller, spec: DataSpec, out: Path,
                split: str, progress: Callable[[int], None] = lambda n: None) -> list[Path]:
    """Distill ``prompts`` into ``out/<split>_NNNNN_<hash of its prompts>.safetensors``; a shard
    already written for the same prompts is reused (a longer prompt list extends the data)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s, start in enumerate(range(0, len(prompts), spec.shard_size)):
        chunk = prompts[start:start + spec.shard_size]
        digest = hashlib.sha256(json.dumps([list(p) for p in chunk]).encode()).hexdigest()[:10]
        path = out / f"{split}_{s:05d}_{digest}.safetensors"
        if not path.exists():
            write_shard(path, distiller([list(p) for p in chunk], spec))
        progress(len(chunk))
        paths.append(path)
    return paths


def write_manifest(out: Path, spec: DataSpec, train: list[Path], held: list[Path]) -> None:
    (out / "manifest.json").write_text(json.dumps(
        {"layer_ids": list(spec.layer_ids), "top_k": spec.top_k,
         "train": [p.name for p in train], "heldout": [p.name for p in held]}, indent=1))
