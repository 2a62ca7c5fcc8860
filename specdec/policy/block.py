"""The batch's block policy as pure functions: what a B x L block is expected to emit and
what it costs, and the block length that emits most per second.

Contract: ``choose_block(drafts, alphas, cost)`` is the L (1 + drafted tokens per row)
maximising the rows' expected emitted tokens (``expected_tokens``, each draft accepted
with its row's ``alpha`` given its predecessors were) over ``cost(B * L)``; ties go to
the shorter block, so L = 1 (plain batching) unless drafting pays. ``curve_cost`` prices
a forward from a measured verify cost curve; ``unknown_cost`` is the price while none is
known (every token a one-token forward: no block pays).
Tests: tests/policy/test_block.py, tests/decode/test_batch.py.
"""

from __future__ import annotations

from typing import Callable, Sequence


def expected_tokens(drafted: int, alpha: float) -> float:
    """Expected emitted tokens of a step drafting ``drafted`` tokens, each accepted with
    probability ``alpha`` given its predecessors were (plus the target's own token).

    >>> expected_tokens(0, 0.9), round(expected_tokens(2, 0.5), 2)
    (1.0, 1.75)
    """
    return sum(alpha**j for j in range(drafted + 1))


def choose_block(drafts: Sequence[int], alphas: Sequence[float], cost: Callable[[int], float]) -> int:
    """The block length L (1 + drafted tokens per row) that maximises the rows' expected
    emitted tokens per second, a row drafting ``min(L - 1, drafts[i])``; ``cost(n)`` is
    the seconds of a forward of n tokens (B rows x L).

    >>> choose_block([4, 0], [0.9, 0.5], lambda n: 1.0)  # a flat cost: draft all
    5
    >>> choose_block([4, 4], [0.9, 0.9], lambda n: float(n))  # every token costs: none
    1
    """
    rows = len(drafts)
    # each row's expected tokens at every depth up to its draft, summed once (as
    # ``expected_tokens`` sums them: the same floats), not again for every L
    gains = [_cumulative(d, a) for d, a in zip(drafts, alphas)]

    def rate(L: int) -> float:
        return sum(g[min(L - 1, len(g) - 1)] for g in gains) / cost(rows * L)

    return max(range(1, max(drafts, default=0) + 2), key=rate)


def _cumulative(drafted: int, alpha: float) -> list[float]:
    """``[expected_tokens(j, alpha) for j in 0..drafted]``, each the same float, in one pass
    (a batch of 32 rows priced every step: the per-L sums cost a millisecond a step)."""
    out: list[float] = []
    total: float = 0
    for j in range(drafted + 1):
        total += alpha**j
        out.append(total)
    return out


def curve_cost(curve: dict[int, float]) -> Callable[[int], float]:
    """``cost(n)`` from a measured {length: seconds} curve: linear between measured
    lengths, extended along the last segment beyond them.

    >>> curve_cost({1: 1.0, 2: 1.5, 4: 2.0})(3), curve_cost({1: 1.0, 2: 1.5, 4: 2.0})(6)
    (1.75, 2.5)
    """
    xs = sorted(curve)
    if len(xs) < 2:
        raise ValueError("a cost curve needs at least two lengths")

    def cost(n: int) -> float:
        hi = next((i for i, x in enumerate(xs) if x >= n), len(xs) - 1)
        lo_x, hi_x = xs[max(hi - 1, 0)], xs[max(hi, 1)]
        t = (n - lo_x) / (hi_x - lo_x)
        return curve[lo_x] + t * (curve[hi_x] - curve[lo_x])

    return cost


def unknown_cost(n: int) -> float:
    """The price of an n-token forward while no curve is known: each token a one-token
    forward's worth, as on a compute-bound device (this CPU at a batch's sizes). Under it a
    batch of several rows never drafts (plain batching, which cannot lose), where an
    unpriced batch drafting each row's k ran 0.72-0.88x plain at 32 rows on this CPU.

    >>> choose_block([8, 8], [0.9, 0.9], unknown_cost)
    1
    """
    return float(n)
