"""What a host drafter's offer is worth to the cost gate: the draft length its price pays for,
and what drafting it a token late loses, weighed against what a pipelined plain token saves.

Contract: ``StepPrices`` is what steps cost now (the gate's verify curve and its scale, a
pipelined plain token's seconds, the proposal's cost); ``best`` cuts an offer to the draft length
that maximises expected tokens per second (0: plain), ``late_loss`` is the seconds a k-token draft
loses drafted a token late, ``pipelining_saves`` what a pipelined plain token saves over a
one-token verify step. ``LateLoss`` keeps the decayed loss of late drafts per idle ask (an ask
after one whose offer was not drafted) and ``pipelines`` weighs it against that saving. Values and
arithmetic only: the gate (``gate.CostGate``) decides when to ask and what it learns.
Tests: tests/drafters/test_gate.py, test_gate_live.py, tests/policy/test_offers.py. Why the
weighing: lab/gate-live-lag, lab/gate-start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .adaptive import best_k, draft_seconds, expected_tokens


@dataclass(frozen=True)
class StepPrices:
    """What steps cost now: ``cost`` the verify curve ({L: seconds}, the gate's line),
    ``scale`` a verify step's observed over predicted seconds, ``plain`` a pipelined plain
    token's seconds, ``draft`` the proposal's cost model ({"fixed", "per_token"}; None: free)."""

    cost: Mapping[int, float]
    scale: float
    plain: float
    draft: Mapping[str, float] | None

    def best(self, accept: Sequence[float], k_max: int) -> int:
        """The draft length in 0..``k_max`` an offer with per-slot acceptance ``accept`` pays
        for (the offer exists, so the hit rate is 1; ``adaptive.best_k``)."""
        return best_k(accept, self.cost, k_max, self.draft, scale=self.scale, plain=self.plain)

    def saving(self, accept: Sequence[float], k: int) -> float:
        """Seconds a k-token draft saves over plain decoding of the tokens it is expected to
        emit (0 for k = 0; negative where it does not pay)."""
        if not k:
            return 0.0
        verify = self.cost[k + 1] * self.scale + draft_seconds(self.draft, k)
        return expected_tokens(accept, k) * self.plain - verify

    def late_loss(self, accept: Sequence[float], k: int) -> float:
        """Seconds a k-token draft of an offer with acceptance ``accept`` is expected to lose
        drafted a token late: its saving now, less its tail's (slots 2..k, drafted after the
        first came true by a plain forward); never below 0."""
        return max(self.saving(accept, k) - accept[0] * max(self.saving(accept[1:], k - 1), 0.0), 0.0)

    def pipelining_saves(self) -> float:
        """Seconds a pipelined plain token saves over a one-token verify step (>= 0: ``plain``
        is priced never above a one-token verify step)."""
        return self.cost[1] * self.scale - self.plain


@dataclass
class LateLoss:
    """Decayed by ``decay``: ``lost`` seconds late drafts would have lost over ``asks`` idle
    asks (those priced while the offer before was not drafted: ``idle``). What late drafts
    lose is the text's, not the machine's: it stays the gate's (not carried: ``learnt.Learnt``)."""

    decay: float
    lost: float = 0.0
    asks: float = 0.0
    idle: bool = True

    def priced(self, depth: int, loss: Callable[[int], float]) -> None:
        """An offer was priced at ``depth`` (0: not drafted); on an idle ask, count what
        drafting it a token late would lose (``loss(depth)``, asked only where depth > 0)."""
        if self.idle:
            self.lost = self.decay * self.lost + (loss(depth) if depth else 0.0)
            self.asks = self.decay * self.asks + 1.0
        self.idle = depth == 0

    def pipelines(self, saves: float, measured: bool) -> bool:
        """Whether pipelined plain decoding pays while drafting nothing: a pipelined token
        queues the next forward before the gate sees this one, so an offer that pays is drafted
        one token late (its first token from a plain forward; a one-token offer never drafted;
        traced: q281 resumed ~20 times, each a forward more than its replay: 25-27 accepted
        against 29-30, lab/gate-live-lag). It pays where a pipelined token ``saves`` at least
        what late drafts lose per idle ask; before the saving is ``measured`` (or before any
        idle ask): it does."""
        if not measured or not self.asks:
            return True
        return saves >= self.lost / self.asks
