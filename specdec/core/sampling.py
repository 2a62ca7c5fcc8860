"""Sampling parameters and the target's processed distribution.

Contract: ``SamplingParams`` (temperature 0 = greedy; penalties and ``logit_bias`` as
mlx-lm's ``make_logits_processors`` takes them; ``validate()`` names a bad field);
``processed_probs`` is exactly what mlx-lm's ``make_sampler`` samples from (its own top-p,
min-p, top-k filters, then softmax(x / T)); ``Rng`` is a per-request seeded generator (never
the global state); ``PositionKeys``/``seeded_tokens`` make the token at output position t a
function of (seed, t, the distribution there) alone, whatever was drafted before it.
Tests: tests/core/test_sampling.py, tests/decode/test_step_seeded.py. Details: docs/verify-and-rollback.md#sampling-and-seeds."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    presence_penalty: float = 0.0
    presence_context_size: int = 20
    frequency_penalty: float = 0.0
    frequency_context_size: int = 20
    logit_bias: Any = ()  # {token id: bias} or pairs; stored as sorted (id, bias) pairs

    def __post_init__(self) -> None:
        bias = self.logit_bias or ()
        pairs = sorted((dict(bias) if not isinstance(bias, dict) else bias).items())
        object.__setattr__(self, "logit_bias", tuple((int(t), float(b)) for t, b in pairs))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> "SamplingParams":
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0 or self.repetition_context_size < 1:
            raise ValueError(
                "repetition_penalty must be > 0 (1.0 = off) and repetition_context_size >= 1, "
                f"got {self.repetition_penalty}, {self.repetition_context_size}"
            )
        for name in ("presence", "frequency"):
            penalty, size = getattr(self, f"{name}_penalty"), getattr(self, f"{name}_context_size")
            if not math.isfinite(penalty) or size < 1:
                raise ValueError(f"{name}_penalty must be finite and {name}_context_size >= 1, "
                                 f"got {penalty}, {size}")
        bad = [t for t, b in self.logit_bias if t < 0 or not math.isfinite(b)]
        if bad:
            raise ValueError(f"logit_bias: token ids must be >= 0 and biases finite (token {bad[0]})")
        return self


def penalize(logits: mx.array, windows: mx.array, params: SamplingParams) -> mx.array:
    """mlx-lm's repetition penalty, per row: logits of tokens in ``windows[i]`` are divided
    by the penalty when positive and multiplied when negative."""
    if params.repetition_penalty == 1.0 or windows.shape[-1] == 0:
        return logits
    sel = mx.take_along_axis(logits, windows, axis=-1)
    pen = params.repetition_penalty
    sel = mx.where(sel < 0, sel * pen, sel / pen)
    return mx.put_along_axis(logits, windows, sel, axis=-1)


def processed_probs(logits: mx.array, params: SamplingParams) -> mx.array:
    """Row-wise sampling distribution (float32) after mlx-lm's filters and temperature."""
    x = logits.astype(mx.float32)
    x = x - mx.logsumexp(x, axis=-1, keepdims=True)
    if 0 < params.top_p < 1:
        x = apply_top_p(x, params.top_p)
    if params.min_p > 0:
        x = apply_min_p(x, params.min_p)
    if 0 < params.top_k < x.shape[-1]:
        x = apply_top_k(x, params.top_k)
    return mx.softmax(x / params.temperature, axis=-1)


class KeySource(Protocol):
    """Where plain decoding takes each token's key: an ``Rng``, or a seeded row's sampler
    (its output positions' keys)."""

    def next(self) -> mx.array: ...


class Rng:
    """A seeded stream of mlx random keys for one request."""

    def __init__(self, seed: int | None):
        self._key = mx.random.key(seed if seed is not None else random.SystemRandom().randrange(2**63))

    def next(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub


class PositionKeys:
    """The key of each output position of one seeded request (docs/verify-and-rollback.md#sampling-and-seeds).

    Keys are derived lazily from the request's ``Rng`` (t splits for position t, made once
    and kept while the position may still be verified); ``release(t)`` forgets keys before
    t, which the request has emitted for good."""

    def __init__(self, rng: Rng):
        self._rng, self._base = rng, 0
        self._keys: list[mx.array] = []

    def at(self, t: int) -> mx.array:
        if t < self._base:
            raise ValueError(f"the key of output position {t} was released (first kept: {self._base})")
        while len(self._keys) <= t - self._base:
            self._keys.append(self._rng.next())
        return self._keys[t - self._base]

    def release(self, t: int) -> None:
        drop = max(0, min(t - self._base, len(self._keys)))
        del self._keys[:drop]
        self._base += drop


def draw_token(logits: mx.array, params: SamplingParams, key: mx.array) -> mx.array:
    """Plain sampling's draw from one row (V,) of logits with ``key``."""
    return mx.random.categorical(mx.log(processed_probs(logits, params)), key=key)


def seeded_tokens(logits: mx.array, params: SamplingParams, keys: list[mx.array]) -> mx.array:
    """Row r's token drawn with ``keys[r]`` from the processed distribution of
    ``logits[r]``, each row processed and drawn on its own exactly as plain decoding draws
    one token (``draw_token``), so the same key and logits give the same token."""
    return mx.stack([draw_token(logits[r], params, k) for r, k in enumerate(keys)])
