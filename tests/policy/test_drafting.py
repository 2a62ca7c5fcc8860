"""``specdec.policy.drafting``: the decode policy a row owns, outside its drafter. The plain
policy asks the drafter for the depth asked, every step, and never pauses; the cost gate's
``drafts`` / ``plain`` / ``took`` are its pause, watch and step times (tests/drafters/test_gate.py
holds its pricing)."""

from specdec.core.proposal import Proposal
from specdec.drafters.base import Drafter, NoDrafter
from specdec.policy.drafting import DecodePolicy, StepTime, as_policy
from specdec.policy.gate import CostGate

CPU = {1: 0.10, 2: 0.13, 3: 0.16, 4: 0.19, 5: 0.22}


class Fixed(Drafter):
    name = "fixed"

    def __init__(self, tokens):
        self.tokens, self.asked, self.accepted = list(tokens), [], []

    def propose(self, context, k):
        self.asked.append(k)
        return Proposal(self.tokens[:k])

    def observe(self, num_accepted):
        self.accepted.append(num_accepted)


def test_the_plain_policy_drafts_the_depth_asked_and_never_pauses():
    d = Fixed([5, 6, 7])
    p = as_policy(d)
    assert type(p) is DecodePolicy and p.drafter is d and p.name == "fixed" and as_policy(p) is p
    assert isinstance(as_policy(None).drafter, NoDrafter)
    p.begin([1]), p.plain([1, 2]), p.took(StepTime(3, 0.5, 0.1))
    assert p.drafts and p.propose([1], 2) == Proposal([5, 6]) and d.asked == [2]
    p.observe(1)
    assert d.accepted == [1] and p.last == StepTime(3, 0.5, 0.1) and p.describe() == {"paused": False}


def test_the_gate_pauses_through_the_policy_verbs():
    """A drafter priced by state (its proposal costs per token: not offer-priced) starts
    paused under its gate (no k); plain tokens that bear out its shadow guess make it
    draft; the step times it is told reach its scale (its clock: the wall time between
    steps, here each verify step's own)."""
    now = [0.0]
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4, draft_cost={"fixed": 0.0, "per_token": 1e-9},
                    clock=lambda: now[0])
    assert not gate.peeks
    gate.begin([1, 2, 3])
    assert not gate.drafts and not gate.propose([1, 2, 3], 4)  # paused: a shadow guess instead
    gate.plain([1, 2, 3, 5])  # plain decoding emitted what it guessed
    assert gate.drafts and gate.describe()["paused"] is False
    for _ in range(3):  # the first time of a block length is a warm-up
        now[0] += 2.0 * CPU[5]
        gate.took(StepTime(5, 2.0 * CPU[5], 0.0))
    assert gate.scale > 1.0 and gate.last.block == 5
