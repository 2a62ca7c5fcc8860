"""``specdec.drafters.base``: what the base class promises every drafter (four verbs, the
capabilities declared as data with defaults that do nothing, the linear tree) and that it
holds nothing of the decode policy (no pausing, no step times)."""

import pytest

from specdec.drafters.base import EMPTY, Drafter, NoDrafter, Proposal


class Counting(Drafter):
    """Proposes 0, 1, ... k - 1 (as many as asked)."""

    name = "counting"

    def propose(self, context, k):
        return Proposal(range(k))


def test_the_base_defaults_do_nothing_and_the_tree_is_the_linear_proposal():
    d = Counting()
    d.begin([1, 2]), d.observe(3), d.end([1, 2, 0]), d.constrain(None)
    assert d.forced([1], 4) is EMPTY
    assert d.propose_tree([1], 5, 3) == Proposal([0, 1, 2])  # depth min(k, budget)
    assert not d.branches and d.draft_cost is None
    assert d.wants([1], [2]) is None and d.tree_wants([1], Proposal([2, 3], parents=(-1, -1))) is None
    assert not d.outputs and d.guesses_paused  # guesses while paused
    d.draft_cost = {"fixed": 0.001, "per_token": 0.0}
    # a drafter is its own proposer and lead: what the cost gate prices a chain member with
    assert d.proposer is d and d.proposer_cost == d.lead_cost == d.draft_cost


def test_the_contract_is_a_few_verbs_and_no_policy():
    """The methods of the contract: four verbs (begin / propose / observe / end), the tree form,
    what it wants of the verify forward (a linear block's, a tree's) and of forwards that
    verify nothing (prefill chunks, plain steps), and the grammar's two; nothing of the cost
    gate."""
    verbs = {n for n, v in vars(Drafter).items() if callable(v) and not n.startswith("_")}
    assert verbs == {"begin", "propose", "observe", "end", "propose_tree", "wants", "tree_wants", "feed_wants",
                     "constrain", "forced"}
    assert Drafter.__abstractmethods__ == frozenset({"propose"})
    for gone in ("paused", "watch", "step_time", "tail", "tails"):
        assert not hasattr(Drafter, gone)


def test_a_drafter_must_implement_propose():
    with pytest.raises(TypeError, match="abstract"):
        Drafter()


def test_no_drafter_never_proposes():
    d = NoDrafter()
    assert d.name == "none" and d.propose([1, 2, 3], 8) is EMPTY and not d.propose_tree([1], 4, 8)
