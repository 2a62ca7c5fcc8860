"""What cost gates carry from request to request (``policy.learnt``): one memory per verify cost
curve, bounded, owned by whoever passes it in (``DraftResources.learnt``), offer acceptance
per drafter."""

from specdec.drafters import DraftResources, DraftSpec
from specdec.policy.build import build_policy
from specdec.policy.gate import CostGate
from specdec.policy.learnt import Learnt, LearntCurves

CURVE = {L: 1.0 + 0.12 * (L - 1) for L in range(1, 10)}


def test_one_learnt_per_curve_and_old_curves_dropped():
    """Equal curves share one ``Learnt``; a calibrating server's provisional curves (a new one
    every few rounds) are dropped least recently used past ``limit``."""
    curves = LearntCurves(limit=3)
    first = curves.on({1: 1.0, 2: 1.5})
    assert curves.on({2: 1.5, 1: 1.0}) is first
    for i in range(2):
        curves.on({1: 2.0 + i, 2: 3.0})
    assert curves.on({1: 1.0, 2: 1.5}) is first  # used last: kept
    for i in range(3):
        curves.on({1: 5.0 + i, 2: 6.0})
    assert len(curves) == 3
    assert curves.on({1: 1.0, 2: 1.5}) is not first


def test_offers_are_carried_per_drafter_on_a_curve():
    """A gate records its drafts into its curve's offer model, so the next request's first
    offer of that length is priced on them; another drafter's offers are not its."""
    memory = Learnt()
    spec, res = DraftSpec(), DraftResources(cost=CURVE, draft_cost={"fixed": 0.0, "per_token": 0.0},
                                            learnt=LearntCurves())
    a, b = build_policy(spec, res), build_policy(spec, res)
    assert isinstance(a, CostGate) and isinstance(b, CostGate)
    assert a.memory is b.memory and a.offers is b.offers  # policy_for: one Learnt per curve
    prior = a.offers.estimate(1, 0)[0]
    first = CostGate(a.inner, CURVE, 8, memory=memory)
    for _ in range(6):  # one-token offers, all wrong
        first.offers.record((0, 1), 1, 0)
    second = CostGate(a.inner, CURVE, 8, memory=memory)
    assert second.offers.estimate(1, 0)[0] < prior / 2
    other = CostGate(OtherName(a.inner), CURVE, 8, memory=memory)
    assert other.offers is not second.offers and other.offers.estimate(1, 0)[0] == prior


class OtherName:
    """The same drafter under another name (another drafter's offers)."""

    name, guesses_paused = "other", True

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, attr):
        return getattr(self.inner, attr)
