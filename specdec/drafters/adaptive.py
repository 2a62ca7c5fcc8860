"""Adaptive draft length: choose each step's k to maximise expected tokens per second.

Contract of ``AdaptiveKDrafter(inner, cost, k_max, draft_cost=None)`` (a Drafter): before
each proposal it picks ``k* = argmax_k E[tokens | k] / (cost(k + 1) + draft(k))`` over
0..k_max, where

    E[tokens | k] = 1 + sum_{j=1..k} prod_{i=1..j} a_i
    draft(k)      = fixed + per_token * k   (draft(0) = 0: a plain step proposes nothing)

``a_i`` is the recent probability that draft slot i is accepted given slots < i were
(decayed counts learned from ``observe``, shrunk towards the previous slot's estimate), and ``cost(L)`` the
measured seconds of one L-token verify forward (``specdec.measure.cost_curve_for``,
measured once per model and cached). ``draft_cost`` = ``{"fixed": s, "per_token": s}`` is
the drafter's own measured proposal cost in the curve's units (``measure.draft_cost_for``;
None: the inner drafter's ``draft_cost``, and None there = free, the old rule): a draft model's tokens cost a fraction of a target forward
each, which pulls k* down. k* = 0 means a plain step. The inner drafter
proposes up to k* tokens; output is unchanged whatever k is. ``propose_tree`` caps the
tree's depth at the same k* (the budget is passed through) and learns from the accepted
path length as a linear draft of the tree's depth. ``branches`` is the inner drafter's.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .base import EMPTY, Drafter, Proposal


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


def best_k(accept: Sequence[float], cost: Mapping[int, float], k_max: int,
           draft_cost: Mapping[str, float] | None = None) -> int:
    """The k in 0..k_max maximising expected tokens per second (ties: the smaller k),
    the proposal's own cost (``draft_seconds``) counted beside the verify cost.

    >>> c = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.4}
    >>> best_k([0.9] * 4, c, 4)
    4
    >>> best_k([0.05] * 4, c, 4)
    0

    A costly drafter (0.5 of a target forward per token, 0.1 per call): k = 3 gives
    3.439 / (1.3 + 1.6) = 1.186 tokens per unit, k = 4 only 4.095 / (1.4 + 2.1) = 1.170.

    >>> best_k([0.9] * 4, c, 4, {"fixed": 0.1, "per_token": 0.5})
    3
    """
    rates = [expected_tokens(accept, k) / (cost[k + 1] + draft_seconds(draft_cost, k))
             for k in range(0, k_max + 1)]
    return max(range(len(rates)), key=lambda k: (rates[k], -k))


class AdaptiveKDrafter(Drafter):
    def __init__(self, inner: Drafter, cost: Mapping[int, float], k_max: int, decay: float = 0.95,
                 draft_cost: Mapping[str, float] | None = None):
        missing = [L for L in range(1, k_max + 2) if L not in cost]
        if missing:
            raise ValueError(f"cost curve lacks block lengths {missing}; measure up to {k_max + 1}")
        self.inner, self.name = inner, f"{inner.name}+adaptive-k"
        self.cost, self.k_max, self.decay = dict(cost), k_max, decay
        cost_of_inner = draft_cost or inner.draft_cost
        self.draft_cost = dict(cost_of_inner) if cost_of_inner else None
        self._tested = [0.0] * k_max  # decayed counts, per slot
        self._accepted = [0.0] * k_max
        self._proposed = 0
        self.chosen: list[int] = []

    @property
    def branches(self) -> bool:
        return self.inner.branches

    def acceptance(self) -> list[float]:
        """Per-slot estimates; a slot with little evidence leans on the slot before it
        (2 pseudo-counts), so slots never yet tested do not pin k at its first value."""
        out, prev = [], 0.5
        for a, t in zip(self._accepted, self._tested):
            prev = (a + 2.0 * prev) / (t + 2.0)
            out.append(prev)
        return out

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.inner.begin(prompt_ids)

    def _choose(self, k: int) -> int:
        kk = min(k, best_k(self.acceptance(), self.cost, min(k, self.k_max), self.draft_cost))
        self.chosen.append(kk)
        # k* = 0 still probes one slot now and then so estimates can recover
        if kk == 0 and len(self.chosen) % 8 == 0:
            kk = min(k, 1)
        return kk

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        kk = self._choose(k)
        proposal = self.inner.propose(context, kk) if kk else EMPTY
        self._proposed = len(proposal)
        return proposal

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        kk = self._choose(k)
        proposal = self.inner.propose_tree(context, kk, budget) if kk else EMPTY
        self._proposed = proposal.depth
        return proposal

    def constrain(self, grammar):
        self.inner.constrain(grammar)

    def observe(self, num_accepted: int) -> None:
        if not self._proposed:
            return
        self.inner.observe(num_accepted)
        tested = min(num_accepted + 1, self._proposed)  # slots after a rejection were untested
        for i in range(self.k_max):
            self._tested[i] *= self.decay
            self._accepted[i] *= self.decay
        for i in range(tested):
            self._tested[i] += 1.0
            self._accepted[i] += float(i < num_accepted)
        self._proposed = 0

