"""``specdec.decode.rows``: a row's boundary checks, what ``draft_for_step`` hands the block
(cut, pruned or refused), and what ``observe`` teaches the row after a step (no model)."""

from __future__ import annotations

import pytest
from conftest import TINY_VOCAB, cached_tiny

from specdec.core.proposal import Proposal
from specdec.core.sampling import SamplingParams
from specdec.policy.drafting import as_policy
from specdec.decode.rows import (NOTHING, Drafted, Row, draft_for_step, last_tokens, observe,
                                 observe_row, parked_stand_in, plain_row, propose)
from specdec.decode.generation import Generation
from specdec.decode.request import Request
from specdec.decode.step import Step
from specdec.drafters.spec import DraftSpec
from specdec.drafters.base import Drafter, NoDrafter


def test_a_sampled_row_without_its_key_stream_is_refused():
    from specdec.core.sampling import SamplingParams
    from specdec.decode.rows import Row
    from specdec.drafters.base import NoDrafter

    with pytest.raises(ValueError, match="Rng"):
        gen = Generation(sampling=SamplingParams(temperature=0.5))
        Row([1, 2], NoDrafter(), gen, Request(cached_tiny("llama"), [1, 2], gen))
    assert TINY_VOCAB > 9  # the forced token is in the tiny vocabulary


class Listed(Drafter):
    """Proposes a fixed proposal and records what it observes."""

    name = "listed"

    def __init__(self, proposal, fail=False):
        self.proposal, self.seen, self.fail = proposal, [], fail

    def propose(self, context, k):
        return self.proposal

    def propose_tree(self, context, k, budget):
        return self.proposal

    def observe(self, n):
        if self.fail:
            raise RuntimeError("drafter broke")
        self.seen.append(n)


def row(drafter, k=4, left=10, **kw):
    """A row of a request (not started: only its countdown is read) wanting ``left`` tokens."""
    gen = Generation(left, DraftSpec(num_draft_tokens=k))
    return Row([5, 6, 7], drafter, gen, Request(cached_tiny("llama"), [5, 6, 7], gen), **kw)


def step(tokens, accepted, drafted):
    return Step(tokens=tokens, drafted=drafted, accepted=accepted, fed=drafted + 1,
                logprobs=[0.0] * len(tokens))


def test_draft_for_step_cuts_to_k_and_asks_nothing_below_one():
    d = Listed(Proposal([1, 2, 3, 4, 5]))
    assert draft_for_step(as_policy(d), [0], 3).tokens == (1, 2, 3)
    assert not draft_for_step(as_policy(d), [0], 0)


def test_draft_for_step_prunes_a_tree_to_its_budget_and_refuses_one_without():
    tree = Listed(Proposal([1, 2, 3, 4], parents=(-1, 0, -1, 2)))
    got = draft_for_step(as_policy(tree), [0], 2, tree_budget=3)
    assert (got.tokens, got.parents) == ((1, 2, 3), (-1, 0, -1))
    with pytest.raises(ValueError, match="drafter 'listed' proposed a token tree; set a draft tree budget"):
        draft_for_step(as_policy(tree), [0], 2)


def test_draft_for_step_refuses_what_is_not_a_proposal():
    with pytest.raises(TypeError, match="Listed.propose returned list, not a specdec.drafters.Proposal"):
        draft_for_step(as_policy(Listed([1, 2])), [0], 2)


def test_a_row_drafts_no_deeper_than_the_tokens_its_request_still_wants():
    """The countdown is the request's (``Request.left``), not the row's context: a context
    rolled back (trimmed) drafts no deeper, and the row follows what ``feed`` counted."""
    req = Request(cached_tiny("llama"), [5, 6, 7], Generation(3, DraftSpec(num_draft_tokens=4)),
                  drafter=Listed(Proposal([1, 2, 3, 4])))
    req.start()
    assert req.prefill()
    r = req.row()
    assert r.depth == 2 and propose(r, alone=True) == Drafted(Proposal([1, 2]), Proposal([1, 2]))
    s = step([8], accepted=0, drafted=0)
    observe(r, NOTHING, s)
    req.feed(s)  # one token emitted: two still wanted
    assert (r.left, r.depth) == (req.left, 1) == (2, 1) and propose(r, alone=True).full == Proposal([1])
    del r.context[-2:]  # rolled back past the prompt's end: the request's count stands
    assert (r.left, r.depth) == (2, 1) and propose(r, alone=True).full == Proposal([1])
    assert row(Listed(Proposal([1])), k=4, left=10).depth == 4  # k, while the budget is deeper
    assert propose(row(NoDrafter()), alone=True) is NOTHING


def test_observe_teaches_the_drafter_and_the_estimate_and_grows_the_context():
    d = Listed(Proposal([1, 2, 3]))
    r = row(d)
    observe(r, Drafted(Proposal([1, 2, 3]), Proposal([1, 2])), step([1, 2, 9], accepted=2, drafted=2))
    assert d.seen == [2] and r.drafted == 3 and r.context == [5, 6, 7, 1, 2, 9]
    assert r.alpha > 0.5  # every verified draft accepted: the estimate rises
    cut = row(Listed(Proposal([4])))
    observe(cut, Drafted(Proposal([4]), Proposal()), step([3], accepted=0, drafted=0))
    assert cut.alpha < 0.5 and cut.drafter.seen == []  # cut to a plain step: only the estimate learns


def test_a_failing_drafter_ends_only_its_row_beside_others_and_raises_alone():
    rows = [row(Listed(Proposal([1]), fail=True)), row(Listed(Proposal([1])))]
    drafted = Drafted(Proposal([1]), Proposal([1]))
    got = observe_row(rows, 0, drafted, step([1, 2], accepted=1, drafted=1))
    assert isinstance(got.error, RuntimeError) and got.tokens == [1, 2]
    assert observe_row(rows, 1, drafted, step([1, 2], 1, 1)).error is None
    with pytest.raises(RuntimeError, match="drafter broke"):
        observe_row(rows[:1], 0, drafted, step([1, 2], 1, 1))


def test_plain_rows_parked_stand_ins_and_last_tokens():
    r = row(Listed(Proposal([1])))
    assert plain_row(r) and not plain_row(row(NoDrafter(), tree_budget=4))
    stand_in = parked_stand_in(r)
    assert stand_in.context == [7] and stand_in.parked and not stand_in.speculative and stand_in.left == r.left
    assert last_tokens([r, stand_in]).tolist() == [[7], [7]]
