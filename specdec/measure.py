"""Cost measurements that decide whether speculation can pay: verify cost and draft cost.

Contract:
- ``verify_cost_curve(model, max_len)`` returns {L: seconds} for one forward of an
  L-token block on top of a ``context``-token cache, L = 1..max_len (median of
  ``repeats``), measured interleaved so machine noise hits every L alike. cost(L)/cost(1)
  bounds the speedup: a step that emits m tokens for cost(L) beats plain decoding only if
  m > cost(L)/cost(1).
- ``proposal_cost(drafter, context_len)`` returns the median seconds of one ``propose``
  call on a context of that length, after the drafter has indexed the context, i.e. the
  steady-state per-step cost during decoding.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import mlx.core as mx

from .drafters import Drafter
from .steps import prefill
from .rollback import make_cache, trim


def verify_cost_curve(
    model: Any, max_len: int = 17, *, context: int = 256, repeats: int = 7, seed: int = 0
) -> dict[int, float]:
    rng = random.Random(seed)
    vocab = model.args.vocab_size if hasattr(model, "args") else 1000
    cache = make_cache(model, max_trim=max_len + 1)
    prefill(model, cache, [rng.randrange(vocab) for _ in range(context)])
    times: dict[int, list[float]] = {L: [] for L in range(1, max_len + 1)}
    for r in range(repeats + 1):  # round 0 warms up every shape
        for L in range(1, max_len + 1):
            block = mx.array([[rng.randrange(vocab) for _ in range(L)]])
            t0 = time.perf_counter()
            mx.eval(mx.argmax(model(block, cache=cache)[0], axis=-1))
            dt = time.perf_counter() - t0
            trim(cache, L)
            if r:
                times[L].append(dt)
    return {L: statistics.median(v) for L, v in times.items()}


def proposal_cost(
    drafter: Drafter, context_len: int, *, k: int = 8, vocab: int = 49152, repeats: int = 200, seed: int = 0
) -> float:
    rng = random.Random(seed)
    # Natural-ish text: a mix of repeated phrases and fresh tokens.
    phrases = [[rng.randrange(vocab) for _ in range(rng.randint(3, 12))] for _ in range(64)]
    ctx: list[int] = []
    while len(ctx) < context_len:
        ctx += rng.choice(phrases) if rng.random() < 0.5 else [rng.randrange(vocab)]
    ctx = ctx[:context_len]
    drafter.propose(ctx, k)  # index the context once, as prefill would
    times = []
    for _ in range(repeats):
        ctx.append(rng.randrange(vocab))  # one new token per step, as in decoding
        t0 = time.perf_counter()
        drafter.propose(ctx, k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
