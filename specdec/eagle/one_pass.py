"""Self-distillation in one pass: the forwards that answer a batch of prompts (the prompts'
prefill, then one batched step per answer token) give every position's features and top-k, so no
second forward over prompt + answer runs (it cost a third of distillation's CPU).

Invariants (tests/eagle/test_one_pass.py): the answers are mlx-lm ``BatchGenerator``'s greedy
tokens (``data.batch_answerer``), because its schedule is kept: ``prompt[:-1]`` prefilled
right-padded, one step per token from the last prompt token, the argmax of the log-probs, a row
leaving at a stop token (not kept) or after ``max_tokens``; each position's features and top-k
are a fresh uncached forward's (``data.samples_of``) within rounding; one host sync per forward;
samples in prompt order, as ``samples_of`` writes them (same shard format).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from ..core.arrays import ints
from .capture import capture_layers
from .data import DataSpec, Distiller, Sample, make_sample, top_logp

# batch rows x positions per prefill forward: its float32 logits (this many x the vocabulary;
# 0.8 GB at 49k) come back to the host for the top-k; longer prompts prefill in chunks
PREFILL_POSITIONS = 4096


@dataclass
class _Row:
    """One prompt's sample as it grows: ``fed`` positions have their features and top-k."""

    prompt: list[int]
    answer: list[int] = field(default_factory=list)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    fed: int = 0
    done: bool = False

    def take(self, feats: np.ndarray, ids: np.ndarray, logp: np.ndarray) -> None:
        self.parts.append((feats, ids, logp))
        self.fed += len(feats)

    def stepped(self, token: int, max_tokens: int, eos: frozenset[int], max_len: int) -> None:
        """After a decode step fed this row's last token: keep the token it gave, or finish
        (every kept position fed, ``max_tokens`` answered, or a stop token, not kept)."""
        if self.fed >= max_len or len(self.answer) == max_tokens or token in eos:
            self.done = True
        else:
            self.answer.append(token)

    def sample(self, max_len: int) -> Sample:
        tokens = np.array((self.prompt + self.answer)[:max_len], np.int32)
        feats, ids, logp = (np.concatenate(a) for a in zip(*self.parts))
        return make_sample(tokens, len(self.prompt), feats, ids, logp)


def one_pass(model: Any, max_tokens: int, eos: Sequence[int]) -> Distiller:
    """The distiller ``train-drafter`` runs: every prompt of a shard answered in one batch
    (at most ``max_tokens`` greedy tokens, stopping at ``eos``), its samples from those forwards."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    stop = frozenset(int(t) for t in eos)

    def samples(prompts: list[list[int]], spec: DataSpec) -> list[Sample]:
        if not prompts or not all(prompts):
            raise ValueError("one_pass needs at least one prompt and no empty prompt")
        rows = [_Row(list(p)) for p in prompts]
        cache = _batch_cache(model, len(rows))
        _prefill(model, cache, rows, spec)
        for r in rows:
            r.done = r.fed >= spec.max_len
        _decode(model, cache, rows, spec, max_tokens, stop)
        return [r.sample(spec.max_len) for r in rows]

    return samples


def _batch_cache(model: Any, n: int) -> list[Any]:
    """mlx-lm's batched cache for ``n`` empty rows (each layer's ``merge``, as BatchGenerator)."""
    rows = [make_prompt_cache(model) for _ in range(n)]
    return [rows[0][i].merge([r[i] for r in rows]) for i in range(len(rows[0]))]


def _forward(model: Any, tokens: mx.array, cache: list[Any], spec: DataSpec
             ) -> tuple[mx.array, mx.array]:
    """The model's logits (in its dtype) and the fused features (float16, as stored) of one
    forward of ``tokens`` (B, L) over ``cache``."""
    with capture_layers(model, spec.layer_ids) as cap:
        logits = model(tokens, cache=cache)
        feats = cap.fused_input().astype(mx.float16)
    return logits, feats


def _prefill(model: Any, cache: list[Any], rows: list[_Row], spec: DataSpec) -> None:
    """Feed every row's ``prompt[:-1]``, right-padded as BatchGenerator does (padding after a
    row's tokens changes none of them: causal), recording each real position; ``finalize``
    then turns the padding into the left padding decode steps expect."""
    parts = [r.prompt[:-1] for r in rows]
    lengths = [len(p) for p in parts]
    width = max(lengths)
    if not width:
        return
    for c in cache:
        c.prepare(lengths=lengths, right_padding=[width - n for n in lengths])
    block = mx.array([p + [0] * (width - len(p)) for p in parts])
    step = max(1, PREFILL_POSITIONS // len(rows))
    for s in range(0, width, step):
        logits, feats = _forward(model, block[:, s:s + step], cache, spec)
        logits = logits.astype(mx.float32)
        mx.eval(logits, feats, [c.state for c in cache])  # the chunk's one sync
        np_logits, np_feats = np.asarray(logits), np.asarray(feats)
        for b, (r, n) in enumerate(zip(rows, lengths)):
            real = min(n - s, step)  # this row's positions in the chunk (its padding follows)
            if real > 0:
                r.take(np_feats[b, :real], *top_logp(np_logits[b, :real], spec.top_k))
    for c in cache:
        c.finalize()
    mx.eval([c.state for c in cache])
    mx.clear_cache()


def _decode(model: Any, cache: list[Any], rows: list[_Row], spec: DataSpec, max_tokens: int,
            eos: frozenset[int]) -> None:
    """One batched step per token from each row's last prompt token; a finished row leaves the
    batch before the next step (as BatchGenerator's filter), so the others see what they would
    there. The step after a row's last answer token records that token's position (its own
    forward's features and top-k), the one step more than answering alone costs."""
    live, inputs = list(rows), [r.prompt[-1] for r in rows]
    while True:
        keep = [i for i, r in enumerate(live) if not r.done]
        if not keep:
            return
        if len(keep) < len(live):
            for c in cache:
                c.filter(keep)
            live, inputs = [live[i] for i in keep], [inputs[i] for i in keep]
        logits, feats = _forward(model, mx.array(inputs)[:, None], cache, spec)
        last = logits[:, -1, :]
        greedy = mx.argmax(last - mx.logsumexp(last, axis=-1, keepdims=True), axis=-1)  # mlx-lm's
        last = last.astype(mx.float32)
        mx.eval(last, feats, greedy)  # the step's one sync
        ids, logp = top_logp(np.asarray(last), spec.top_k)
        np_feats, tokens = np.asarray(feats)[:, -1], ints(greedy)
        for i, r in enumerate(live):
            r.take(np_feats[i:i + 1], ids[i:i + 1], logp[i:i + 1])
            r.stepped(tokens[i], max_tokens, eos, spec.max_len)
            if not r.done:
                inputs[i] = r.answer[-1]
