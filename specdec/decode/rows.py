"""One request's decode state in a batch (``Row``) and the two things a step does per row:
``propose`` (ask its decode policy, which asks its drafter) and ``observe`` (let them learn
what the step emitted).

Invariant: ``row.context`` is the prompt plus every emitted token, and the batch cache holds
``context[:-1]`` between steps (the last token is the next block's root). Tests:
tests/decode/test_rows.py, tests/decode/test_batch.py, tests/decode/test_step.py,
tests/decode/test_tree_attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol, Sequence

import mlx.core as mx

from ..core.processors import LogitsProcessor, processors_for
from ..core.proposal import EMPTY, Proposal, Wants
from ..core.sampling import Rng
from ..core.trees import cut, first_branch, prune_tree
from ..drafters.base import Drafter, NoDrafter
from ..policy.drafting import DecodePolicy, as_policy
from ..policy.pricing import ema
from ..policy.tree_shape import TreeShaper
from .generation import Generation
from .step import Greedy, Sampler, Step, sampler_for


class Countdown(Protocol):
    """What a row reads of its request (``request.Request``, which imports this module): the
    tokens it still wants, counted once, there (``Request.left``)."""

    @property
    def left(self) -> int: ...


@dataclass
class Row:
    """One request's row: its context, decode policy and ``Generation`` (the request's
    value, unchanged: k, sampling and outputs are read from it), the request's countdown,
    and its runtime state."""

    context: list[int]  # the prompt when made, then every token emitted after it
    policy: DecodePolicy  # a bare Drafter is given ``DecodePolicy``: the depth asked, every step
    gen: Generation
    request: Countdown  # its request: the tokens still wanted
    rng: Rng | None = None
    tree_budget: int = 0  # max tree nodes per step (0: linear drafts), resolved (``TreePlan``)
    shaper: TreeShaper | None = None  # "auto": each step's node count
    extra: Sequence[LogitsProcessor] = ()  # beyond what params ask for (a grammar)
    alpha: float = 0.5  # running estimate of the per-token acceptance probability
    parked: bool = False  # finished, its slot kept until enough rows leave together
    drafted: int | None = None  # the length of the drafter's last proposal (None: none yet)
    sampler: Sampler = field(init=False)
    processors: list[LogitsProcessor] = field(init=False)
    # whether it has a drafter: asked several times per row every batch step (once here:
    # the property through policy and isinstance was 1.3 ms a step at 32 rows, profiled)
    speculative: bool = field(init=False)

    def __post_init__(self) -> None:
        params = self.gen.sampling
        if self.rng is None and not params.greedy:
            raise ValueError("a sampled row needs its request's Rng")
        self.policy = as_policy(self.policy)
        self.speculative = not isinstance(self.policy.drafter, NoDrafter)
        self.sampler = sampler_for(params, self.rng, self.speculative)
        self.processors = processors_for(params) + list(self.extra)

    @property
    def k(self) -> int:
        """The draft depth asked for (the request's ``gen.k``)."""
        return self.gen.k

    @property
    def drafter(self) -> Drafter:
        return self.policy.drafter

    @property
    def left(self) -> int:
        """The tokens the request still wants (``Request.left``: not recounted here)."""
        return self.request.left

    @property
    def depth(self) -> int:
        """How deep this step may draft: k, but never past the tokens still wanted (the
        only place the loop's steps read the request's countdown)."""
        return min(self.k, self.left - 1)


class Drafted(NamedTuple):
    """A row's proposal this step: the drafter's whole ``full`` proposal (what it learns
    against) and the part of it the block ``verifies`` (cut by the tree shaper, the
    block length)."""

    full: Proposal
    verifies: Proposal


NOTHING = Drafted(EMPTY, EMPTY)


def draft_for_step(policy: DecodePolicy, context: Sequence[int], k: int,
                   tree_budget: int = 0) -> Proposal:
    """The proposal for this step, at most ``k`` tokens deep (none when k < 1; the policy
    may draft less); with ``tree_budget`` > 0 a tree of at most that many nodes (``propose_tree``)."""
    if k < 1:
        return EMPTY
    proposal = policy.propose_tree(context, k, tree_budget) if tree_budget > 0 else policy.propose(context, k)
    if not isinstance(proposal, Proposal):
        raise TypeError(f"{type(policy.drafter).__name__}.propose returned {type(proposal).__name__}, "
                        "not a specdec.drafters.Proposal")
    if not proposal.is_linear:
        if tree_budget < 1:
            raise ValueError(f"drafter {policy.name!r} proposed a token tree; set a draft tree "
                             "budget (--draft-tree-budget) to verify trees")
        return prune_tree(proposal, k, tree_budget)
    return proposal.truncated(k)


def propose(row: Row, alone: bool) -> Drafted:
    """The row's proposal; a token tree only for a row ``alone`` in its batch."""
    if not row.speculative:
        return NOTHING
    full = draft_for_step(row.policy, row.context, row.depth, row.tree_budget if alone else 0)
    verifies = cut(full, full.depth, row.shaper.budget(full.parents)) if row.shaper and full else full
    if not verifies.is_linear and verifies.q is not None:
        # draft distributions on a tree: its best branch is verified (exact, linear)
        verifies = first_branch(verifies)
    return Drafted(full, verifies)


def observe_row(rows: Sequence[Row], i: int, drafted: Drafted, step: Step) -> Step:
    """``observe`` for row i of a batch. A failure beside other rows is that row's: it
    comes back on its Step (``Step.error``) and the other rows still observe theirs; a
    lone row's is raised."""
    try:
        observe(rows[i], drafted, step)
        return step
    except Exception as e:
        return row_failed(rows, step, e)


def row_failed(rows: Sequence[Row], step: Step, error: Exception) -> Step:
    """``step`` carrying ``error`` as its row's own (``Step.error``); a lone row's is raised."""
    if len(rows) == 1:
        raise error
    return replace(step, error=error)


def observe(row: Row, drafted: Drafted, step: Step) -> None:
    """After the step: the drafter, the acceptance estimate, the tree shaper and the
    processors learn what it emitted; the context grows by it."""
    full, verified = drafted
    if row.speculative:
        row.drafted = len(full.tokens)
    if verified:
        row.policy.observe(step.accepted)
        row.alpha = ema(row.alpha, step.accepted / len(verified))
    elif full:  # drafted but cut to nothing (a plain step): would its first draft have held?
        row.alpha = ema(row.alpha, float(full.tokens[0] == step.tokens[0]))
    if row.shaper and full:
        row.shaper.update(full.tokens, full.parents, step.tokens)
    for proc in row.processors:
        proc.accept(step.tokens)
    row.context.extend(step.tokens)


PARKED = Generation(max_tokens=1)  # a parked slot's: greedy, nothing reported


def parked_stand_in(row: Row) -> Row:
    """A finished row's stand-in: greedy, one token a step, nothing drafted or checked."""
    return Row([row.context[-1]], as_policy(NoDrafter()), PARKED, row.request, parked=True)


def drafting(row: Row) -> bool:
    """Whether the row may draft this step (its policy may say no: the cost gate's k = 0)."""
    return row.speculative and row.policy.drafts


def wants(row: Row, drafted: Drafted, speculate: bool = True) -> Wants | None:
    """What the row's drafter wants from this verify forward (a tree block: ``tree_wants``): a
    row not drafting (paused, or no drafts this step) feeds its root as a plain step
    (``feed_wants``)."""
    if not row.drafter.outputs:
        return None
    if not drafted.verifies.is_linear:
        return row.drafter.tree_wants(row.context, drafted.verifies)
    if speculate and drafting(row):
        return row.drafter.wants(row.context, drafted.verifies.tokens)
    return row.drafter.feed_wants(len(row.context) - 1, 1)


def plain_row(row: Row) -> bool:
    """Whether the row's step needs nothing but the argmax (it may be pipelined)."""
    return (type(row.sampler) is Greedy and not row.processors and not row.gen.top_logprobs
            and not row.gen.diagnostics and not row.tree_budget)


def last_tokens(rows: Sequence[Row]) -> mx.array:
    """(B, 1) the rows' last tokens: the roots of the next block."""
    return mx.array([[r.context[-1]] for r in rows], dtype=mx.int32)
