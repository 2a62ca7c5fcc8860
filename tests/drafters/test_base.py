"""``specdec.drafters.base``: what the base class promises every drafter (defaults that do
nothing, the linear tree, no pausing) and what the seams' Protocols accept."""

import pytest

from specdec.drafters.base import (EMPTY, Constrainable, Drafter, NoDrafter, Pausable, Proposal, Proposer,
                                   Tailing, TreeProposing)


class Counting(Drafter):
    """Proposes 0, 1, ... k - 1 (as many as asked)."""

    name = "counting"

    def propose(self, context, k):
        return Proposal(range(k))


def test_the_base_defaults_do_nothing_and_the_tree_is_the_linear_proposal():
    d = Counting()
    d.begin([1, 2]), d.observe(3), d.constrain(None), d.watch([1]), d.step_time(2, 0.1)
    assert d.forced([1], 4) is EMPTY and not d.paused
    assert d.propose_tree([1], 5, 3) == Proposal([0, 1, 2])  # depth min(k, budget)
    assert not d.branches and d.draft_cost is None
    assert d.tail([1], [2]) is None and not d.tails and d.guesses_paused  # guesses while paused
    assert all(isinstance(d, p) for p in (Proposer, Pausable, Constrainable, TreeProposing, Tailing))


def test_a_drafter_must_implement_propose():
    with pytest.raises(TypeError, match="abstract"):
        Drafter()


def test_no_drafter_never_proposes():
    d = NoDrafter()
    assert d.name == "none" and d.propose([1, 2, 3], 8) is EMPTY and not d.propose_tree([1], 4, 8)


def test_an_object_with_only_the_core_verbs_is_a_proposer_and_nothing_more():
    class Bare:
        name = "bare"

        def begin(self, prompt_ids): ...
        def propose(self, context, k): ...
        def observe(self, num_accepted): ...

    assert isinstance(Bare(), Proposer)
    assert not isinstance(Bare(), (Pausable, Constrainable, TreeProposing, Tailing))
    assert not isinstance(object(), Proposer)
