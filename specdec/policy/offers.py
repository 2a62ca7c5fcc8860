"""What a host drafter's offer will have accepted: the cost gate's acceptance model for offers.

Contract of ``OfferModel(k_max, prior, decay)``: ``estimate(n, state, grade)`` is the per-slot
acceptance (slot i given slots < i were accepted) of an offer of ``n`` tokens of ``grade``
(``grade``: how sure the drafter said it was) made after ``state`` (what the drafts before did:
``gate``'s REJECTED / ACCEPTED / RUN), and ``record((state, n), proposed, accepted, grade)``
counts a draft of such an offer once the context shows it. Each grade is counted apart; two
models, averaged by how well each predicted the outcomes so far (dynamic model averaging: each
one's weight is its forgotten-by-``decay`` likelihood, Raftery et al. 2010):
- *length*: each offer length its own decayed counts (slot 1 leaning on 1/2, slot i on the
  same length's slot i - 1: a copy going on), a longer offer (a longer match) never accepted
  less often than a shorter one (``monotone``: pooled where evidence says otherwise);
- *state*: the same, refined by what the drafts before did (``prior`` pseudo-counts on the
  length model): a run of misses says a quote ended.
Why (lab/gate-acceptance, Spec-Bench's recorded answers): slot 1 is accepted 25 % of the time
on one-token offers, 54 % on two-token, 91 % on eight-token ones, and given the length the
drafts before say little (one-token offers: 28 % after one miss, 25 % after four or five);
the old estimate leaned every length on shorter ones' and on the state's few counts, swung
0.02-0.9 where the acceptance was 0.2-0.4 and priced a two-token offer at 0.01 after six
one-token misses. Where the state does predict (a drafter whose offers are all one length
copying a quote that ends: ``tests/drafters/test_gate.py``) its weight grows within a few drafts.
Tests: tests/policy/test_offers.py, tests/drafters/test_gate.py.
"""

from __future__ import annotations

import math
from typing import Sequence

from .adaptive import SlotCounts

STATES = 3  # the gate's REJECTED, ACCEPTED, RUN
GRADES = 2  # an offer's grade (``grade``): 0 not sure or not said, 1 sure


def grade(support: float | None) -> int:
    """An offer's grade from its ``Proposal.support``: 1 where at least three quarters of the
    match's earlier occurrences went on with the offered token, else 0 (and where the drafter
    does not say). Why (lab/specbench/engine-clock, Spec-Bench's 480 answers): slot 1 is accepted
    18 % of the time on one-token offers below it, 40 % above (two-token 27 % / 60 %, eight 38 % /
    92 %); a policy knowing each length's rate per grade reads 1.413x where per length alone
    1.388x (quartiles: 1.415x; a half: 1.406x)."""
    return int(support is not None and support >= 0.75)


def monotone(counts: Sequence[tuple[float, float]], prior: float, toward: float) -> float:
    """The acceptance of the last of ``counts`` ((accepted, tested) per offer length, short
    to long) under the constraint that a longer offer is accepted at least as often:
    adjacent lengths that break it are pooled (pool-adjacent-violators), each pool's
    estimate its counts leaning on ``toward`` with ``prior`` pseudo-counts. A length
    without evidence neither lifts nor lowers its neighbours' evidence.

    >>> monotone([(0.0, 0.0), (0.0, 9.0)], 1.0, 0.5)   # no one-token evidence: 0.5 / 10
    0.05
    >>> monotone([(0.0, 9.0), (0.0, 0.0)], 1.0, 0.5)   # a new longer offer: its prior
    0.5
    >>> monotone([(3.0, 4.0), (0.0, 1.0)], 1.0, 0.5)   # pooled: 3.5 / 6
    0.5833333333333334
    """
    def rate(pool: tuple[float, float]) -> float:
        return (pool[0] + prior * toward) / (pool[1] + prior)

    pools: list[tuple[float, float]] = []
    for pool in counts:
        pools.append(pool)
        while len(pools) > 1 and rate(pools[-2]) > rate(pools[-1]):
            (a1, t1), (a2, t2) = pools.pop(), pools.pop()
            pools.append((a1 + a2, t1 + t2))
    return rate(pools[-1])


class OfferModel:
    def __init__(self, k_max: int, prior: float, decay: float):
        self.k_max, self.prior, self.decay = k_max, prior, decay
        # per grade (``grade``: how sure the drafter said it was) and offer length
        self.lengths = {(g, n): SlotCounts.zeros(k_max) for g in range(GRADES) for n in range(1, k_max + 1)}
        self.states = {(s, g, n): SlotCounts.zeros(k_max) for s in range(STATES) for g in range(GRADES)
                       for n in range(1, k_max + 1)}
        self.evidence = 0.0  # forgotten log-likelihood ratio: state model over length model
        # estimates by (n, state, grade) since the last ``record`` (nothing else changes them):
        # the gate prices an offer every token, drafting or paused, and records far less often
        self._memo: dict[tuple[int, int, int], list[float]] = {}

    def by_length(self, n: int, grade: int = 0) -> list[float]:
        """The length model's per-slot acceptance of an offer of ``n`` tokens of ``grade``."""
        est: list[float] = []
        for i in range(min(n, self.k_max)):
            counts = [(self.lengths[grade, m].accepted[i], self.lengths[grade, m].tested[i])
                      for m in range(1, n + 1)]
            est.append(monotone(counts, self.prior, est[-1] if est else 0.5))
        return est

    def by_state(self, n: int, state: int, length: Sequence[float], grade: int = 0) -> list[float]:
        """The state model's: the length model's refined by this state's counts."""
        return self.states[(state, grade, n)].lean(length, self.prior)

    @property
    def weight(self) -> float:
        """The state model's share of the average (1/2 before any evidence)."""
        return 1.0 / (1.0 + math.exp(-max(min(self.evidence, 50.0), -50.0)))

    def estimate(self, n: int, state: int, grade: int = 0) -> list[float]:
        """The per-slot acceptance of an offer of ``n`` tokens of ``grade`` made after ``state``
        (a list shared until the next ``record``: read it, do not change it)."""
        n = min(n, self.k_max)
        if n <= 0:
            return []
        key = (n, state, grade)
        if key not in self._memo:
            length = self.by_length(n, grade)
            w = self.weight
            self._memo[key] = [w * s + (1.0 - w) * p
                               for s, p in zip(self.by_state(n, state, length, grade), length)]
        return self._memo[key]

    def record(self, made: tuple[int, int], proposed: int, accepted: int, grade: int = 0) -> None:
        """Score both models' predictions of this draft's slots, then count it."""
        state, n = made
        n = min(n, self.k_max)
        self._memo.clear()
        length = self.by_length(n, grade)
        by_state = self.by_state(n, state, length, grade)
        self.evidence *= self.decay
        for i in range(min(accepted + 1, proposed, n)):
            hit = i < accepted
            self.evidence += _log(by_state[i], hit) - _log(length[i], hit)
        self.lengths[grade, n].record(proposed, accepted, self.decay)
        self.states[state, grade, n].record(proposed, accepted, self.decay)


def _log(p: float, hit: bool) -> float:
    return math.log(max(p if hit else 1.0 - p, 1e-9))
