"""Adaptive draft length: choose each step's k to maximise expected tokens per second.

Contract of ``AdaptiveK(inner, cost, k_max, draft_cost=None)`` (a decode policy over the drafter
``inner``: ``drafting.DecodePolicy``): before each proposal
k* = argmax_k E[tokens | k] / (cost(k + 1) + draft(k)) over 0..k_max, E from the recent
per-slot acceptance (decayed counts from ``observe``), cost the measured verify curve, draft
the drafter's own cost (None = free). k* = 0 is a plain step; output is unchanged for any k.
Tests: tests/drafters/test_adaptive.py, tests/drafters/test_chain.py, tests/test_measure.py.
Details: docs/gate.md#adaptive-k."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..core.proposal import EMPTY, Proposal
from ..drafters.base import Drafter
from .drafting import DecodePolicy


def expected_tokens(accept: Sequence[float], k: int) -> float:
    """Expected tokens one verify step emits when drafting k tokens.

    >>> expected_tokens([0.5, 0.5], 2)   # 1 + 0.5 + 0.25
    1.75
    """
    total, run = 1.0, 1.0
    for i in range(k):
        run *= accept[i]
        total += run
    return total


def draft_seconds(draft_cost: Mapping[str, float] | None, k: int) -> float:
    """A proposal of ``k`` tokens under the cost model ``{"fixed", "per_token"}`` (None: 0).

    >>> draft_seconds({"fixed": 0.1, "per_token": 0.5}, 2), draft_seconds({"fixed": 0.1, "per_token": 0.5}, 0)
    (1.1, 0.0)
    """
    if not draft_cost or k <= 0:
        return 0.0
    return draft_cost["fixed"] + draft_cost["per_token"] * k


def token_rate(accept: Sequence[float], cost: Mapping[int, float], k: int,
               draft_cost: Mapping[str, float] | None = None, *, scale: float = 1.0,
               plain: float | None = None, hit: float = 1.0) -> float:
    """Expected tokens per second of a step drafting ``k`` tokens (0: a plain step), priced
    as ``best_k`` states.

    >>> c = {1: 1.0, 2: 1.1}
    >>> token_rate([0.5], c, 0), round(token_rate([0.5], c, 1), 4)
    (1.0, 1.3636)
    """
    if k == 0:
        return 1.0 / (plain if plain is not None else cost[1] * scale)
    gain = hit * expected_tokens(accept, k) + (1.0 - hit)
    verify = scale * (hit * cost[k + 1] + (1.0 - hit) * cost[1])
    return gain / (verify + draft_seconds(draft_cost, k))


def best_k(accept: Sequence[float], cost: Mapping[int, float], k_max: int,
           draft_cost: Mapping[str, float] | None = None, *, scale: float = 1.0,
           plain: float | None = None, hit: float = 1.0) -> int:
    """The k in 0..k_max maximising expected tokens per second (ties: the smaller k),
    the proposal's own cost (``draft_seconds``) counted beside the verify cost.

    ``scale`` multiplies every verify step's predicted cost (what a step really takes over
    the curve's forward); ``plain`` is the seconds of a k = 0 step (None: a one-token
    verify step, ``cost[1] * scale``; the cost gate passes a pipelined plain token's);
    ``hit`` is the fraction of steps where the drafter finds anything to propose (a step
    without a proposal emits one token for a one-token verify).

    >>> c = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.4}
    >>> best_k([0.9] * 4, c, 4)
    4
    >>> best_k([0.05] * 4, c, 4)
    0

    A costly drafter (0.5 of a target forward per token, 0.1 per call): k = 3 gives
    3.439 / (1.3 + 1.6) = 1.186 tokens per unit, k = 4 only 4.095 / (1.4 + 2.1) = 1.170.

    >>> best_k([0.9] * 4, c, 4, {"fixed": 0.1, "per_token": 0.5})
    3

    Drafts accepted half the time pay for k = 1 (1.5 / 1.1), unless the drafter finds a
    proposal in only a fifth of the steps and a verify step costs 1.25x a plain token:
    (0.2 * 1.5 + 0.8) / (1.25 * (0.2 * 1.1 + 0.8 * 1.0)) = 0.86 < 1.

    >>> best_k([0.5], c, 1), best_k([0.5], c, 1, scale=1.25, plain=1.0, hit=0.2)
    (1, 0)
    """
    rates = [token_rate(accept, cost, k, draft_cost, scale=scale, plain=plain, hit=hit)
             for k in range(0, k_max + 1)]
    return max(range(len(rates)), key=lambda k: (rates[k], -k))


def robust_line(cost: Mapping[int, float], upto: int) -> dict[int, float]:
    """The curve as the robust line through its points up to block length ``upto``
    (Theil-Sen: the median pairwise slope, never below 0, and the median intercept),
    evaluated at every length it names. Pricing needs the curve's shape; its level is
    learnt online (the gate's ``scale``). A curve timed on a loaded machine scatters
    (traced: 0.18, 0.65, 1.23, 0.28 s at L = 1..4 on this shared CPU), and priced point
    by point it makes drafting look 3.7x a plain step where it costs ~1.1x: a line
    through the scatter keeps the shape, a linear curve is kept as it is.

    >>> robust_line({1: 1.0, 2: 3.0, 3: 1.2, 4: 1.3}, 4)
    {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}
    """
    pts = sorted((L, c) for L, c in cost.items() if L <= upto)
    if len(pts) < 2:
        return dict(cost)
    slope = max(0.0, statistics.median((c2 - c1) / (L2 - L1) for i, (L1, c1) in enumerate(pts)
                                       for L2, c2 in pts[i + 1:]))
    base = statistics.median(c - slope * (L - 1) for L, c in pts)
    if base <= 0:
        raise ValueError(f"a verify cost curve with a non-positive fitted c(1) ({base}): re-measure it")
    return {L: round(base + slope * (L - 1), 12) for L in cost}


@dataclass
class SlotCounts:
    """Decayed per-slot counts of drafts: slot i ``tested`` (drafted with every slot before
    it accepted) and ``accepted``."""

    tested: list[float]
    accepted: list[float]

    @classmethod
    def zeros(cls, k_max: int) -> "SlotCounts":
        return cls([0.0] * k_max, [0.0] * k_max)

    def estimates(self, prior: float) -> list[float]:
        """Per-slot acceptance; a slot with little evidence leans on the slot before it
        (``prior`` pseudo-counts; 0.5 before slot 1)."""
        out, prev = [], 0.5
        for a, t in zip(self.accepted, self.tested):
            prev = (a + prior * prev) / (t + prior)
            out.append(prev)
        return out

    def lean(self, toward: Sequence[float], prior: float) -> list[float]:
        """Per-slot acceptance, each slot leaning on ``toward`` with ``prior`` pseudo-counts
        (as many slots as ``toward``).

        >>> SlotCounts([2.0, 0.0], [2.0, 0.0]).lean([0.5, 0.25], 1.0)
        [0.8333333333333334, 0.25]
        """
        return [(a + prior * p) / (t + prior) for a, t, p in zip(self.accepted, self.tested, toward)]

    def record(self, proposed: int, accepted: int, decay: float) -> None:
        """Decay every slot, then count a draft of ``proposed`` tokens of which the first
        ``accepted`` were accepted (slots after a rejection were untested)."""
        k_max = len(self.tested)
        for i in range(k_max):
            self.tested[i] *= decay
            self.accepted[i] *= decay
        for i in range(min(accepted + 1, proposed, k_max)):
            self.tested[i] += 1.0
            self.accepted[i] += float(i < accepted)


class AdaptiveK(DecodePolicy):
    def __init__(self, inner: Drafter, cost: Mapping[int, float], k_max: int, decay: float = 0.95,
                 draft_cost: Mapping[str, float] | None = None):
        super().__init__(inner)
        missing = [L for L in range(1, k_max + 2) if L not in cost]
        if missing:
            raise ValueError(f"cost curve lacks block lengths {missing}; measure up to {k_max + 1}")
        self.inner, self.name = inner, f"{inner.name}+adaptive-k"
        self.cost, self.k_max, self.decay = robust_line(cost, k_max + 1), k_max, decay
        cost_of_inner = draft_cost or inner.draft_cost
        self.draft_cost = dict(cost_of_inner) if cost_of_inner else None
        self.counts = SlotCounts.zeros(k_max)
        self._proposed = 0
        self.chosen: list[int] = []

    prior = 2.0  # pseudo-counts pulling a slot's estimate towards the slot before it

    def acceptance(self) -> list[float]:
        """Per-slot estimates; a slot with little evidence leans on the slot before it
        (``prior`` pseudo-counts; 0.5 before slot 1), so slots never yet tested do not pin
        k at its first value."""
        return self.counts.estimates(self.prior)

    def _choose(self, k: int) -> int:
        depth = min(k, best_k(self.acceptance(), self.cost, min(k, self.k_max), self.draft_cost))
        self.chosen.append(depth)
        # k* = 0 still probes one slot now and then so estimates can recover
        if depth == 0 and len(self.chosen) % 8 == 0:
            depth = min(k, 1)
        return depth

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        depth = self._choose(k)
        proposal = self.inner.propose(context, depth) if depth else EMPTY
        self._proposed = len(proposal)
        return proposal

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        depth = self._choose(k)
        proposal = self.inner.propose_tree(context, depth, budget) if depth else EMPTY
        self._proposed = proposal.depth
        return proposal

    def observe(self, num_accepted: int) -> None:
        if not self._proposed:
            return
        self.inner.observe(num_accepted)
        self._record(self._proposed, num_accepted)
        self._proposed = 0

    def _record(self, proposed: int, accepted: int) -> None:
        self.counts.record(proposed, accepted, self.decay)

