"""Chains of drafters: the first with a non-empty proposal wins the step.

Contract: ``ChainDrafter([d1, d2, ...])`` returns the first non-empty ``Proposal`` whole (its
``q`` too); ``observe`` goes to the member that proposed; ``stats`` counts each member's
steps won, drafted and accepted. Each member is asked for at most its own ``max_k`` tokens
(``capped``: a head that hits only at its first positions drafts 1-2 while suffix drafts 8).
``draft_cost`` set with a ``"members"`` entry (``measure.draft_cost_for`` of a chain) gives
each member its own cost; ``proposer`` is the member whose proposal was returned last and
``proposer_cost`` its cost (the cost gate prices that offer with it, on that member's own offer
model). ``propose_tree`` merges the members' tries, first member first (a sampled tree with
``q`` is returned whole), telling each member how many of its own tokens were accepted.
Tests: tests/drafters/test_chain.py, tests/drafters/test_trie.py. Details: docs/drafters.md#chain."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .base import EMPTY, Drafter, Proposal, Wants
from .trie import merge_trees, shared_nodes, walk

if TYPE_CHECKING:  # core.grammar imports mlx: for annotations only
    from ..core.grammar import Grammar


class ChainDrafter(Drafter):
    def __init__(self, drafters: Sequence[Drafter]):
        if not drafters:
            raise ValueError("a drafter chain needs at least one drafter")
        self.drafters = list(drafters)
        self.name = ",".join(d.name for d in self.drafters)
        self.stats = {d.name: {"won": 0, "drafted": 0, "accepted": 0} for d in self.drafters}
        self._winner: Drafter | None = None
        self._trees: list[tuple[Drafter, Proposal]] = []  # the last tree step's members
        self._pending: tuple[int, int] | None = None  # (context length, accepted), tree step
        costs = [c for d in self.drafters if (c := d.draft_cost)]  # all proposing: an upper bound
        self._cost = {key: sum(c[key] for c in costs) for key in ("fixed", "per_token")} \
            if len(costs) == len(self.drafters) else None
        # members fix these when built: two members' proposals merge into a trie with branches
        self.branches = len(self.drafters) > 1 or self.drafters[0].branches
        self.outputs = any(d.outputs for d in self.drafters)
        self.guesses_paused = any(d.guesses_paused for d in self.drafters)

    @property
    def draft_cost(self) -> dict | None:
        """Every member proposing (an upper bound); ``"members"``: each member's own."""
        return self._cost

    @draft_cost.setter
    def draft_cost(self, cost: dict | None) -> None:
        """Set the chain's cost; a ``"members"`` entry {name: cost} is each member's own
        (``measure.draft_cost_for``), so a proposal is priced by the member that made it."""
        self._cost = cost
        members = (cost or {}).get("members") or {}
        for d in self.drafters:
            if d.name in members:
                d.draft_cost = dict(members[d.name])

    @property
    def proposer(self) -> Drafter | None:
        """The member whose proposal was returned last (None: none was, or it was a tree)."""
        return self._winner

    @property
    def proposer_cost(self) -> dict | None:
        """The cost of the member whose proposal was returned last (None: none was, or
        its cost is unknown): the cost gate prices that offer with it, not the chain's sum."""
        return self._winner.draft_cost if self._winner is not None else None

    @property
    def lead_cost(self) -> dict | None:
        """The first member's cost: what an offer costs when the first member has one."""
        return self.drafters[0].draft_cost

    @staticmethod
    def capped(d: Drafter, k: int) -> int:
        """The draft length member ``d`` is asked for: ``k``, at most its own ``max_k``."""
        return k if d.max_k is None else min(k, d.max_k)

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants | None:
        """The first member's wants (its predictions follow whoever drafted the block)."""
        return next((w for d in self.drafters if d.outputs and (w := d.wants(context, drafts)) is not None),
                    None)

    def tree_wants(self, context: Sequence[int], tree: Proposal) -> Wants | None:
        """The first member's wants of a tree block (whichever members' tries it merges)."""
        return next((w for d in self.drafters
                     if d.outputs and (w := d.tree_wants(context, tree)) is not None), None)

    def feed_wants(self, start: int, n: int) -> Wants | None:
        """The first member's that wants something of a forward that verifies nothing."""
        return next((w for d in self.drafters if d.outputs and (w := d.feed_wants(start, n)) is not None),
                    None)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        # a new prompt need not hold the last step's tokens: its count is dropped
        self._trees, self._pending = [], None
        self._winner = None
        for d in self.drafters:
            d.begin(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._credit_members(context)
        self._winner = None
        for d in self.drafters:
            proposal = d.propose(context, self.capped(d, k))
            if proposal:
                return self._won(d, proposal)
        return EMPTY

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        """The first member's forced tokens, proposed as ``propose`` would (observed by it)."""
        for d in self.drafters:
            proposal = d.forced(context, k)
            if proposal:
                self._credit_members(context)
                return self._won(d, proposal)
        return EMPTY

    def _won(self, d: Drafter, proposal: Proposal) -> Proposal:
        self._winner = d
        s = self.stats[d.name]
        s["won"] += 1
        s["drafted"] += len(proposal)
        return proposal

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        self._credit_members(context)
        self._winner = None
        trees: list[tuple[Drafter, Proposal]] = []
        for d in self.drafters:
            tree = d.propose_tree(context, self.capped(d, k), budget)
            if tree and tree.q is not None:
                if not trees:  # sampled: cannot share nodes exactly, so it goes alone
                    trees = [(d, tree)]
                    break
                continue  # left out, and so not observed
            if tree:
                trees.append((d, tree))
        if not trees:
            return EMPTY
        merged = trees[0][1] if len(trees) == 1 else merge_trees([t for _, t in trees], budget)
        self._trees, self._context_len = trees, len(context)
        self.stats[trees[0][0].name]["won"] += 1
        for d, t in trees:
            self.stats[d.name]["drafted"] += shared_nodes(t, merged)
        return merged

    def _credit_members(self, context: Sequence[int]) -> None:
        """Tell each member of the last tree step how many of its own tokens the target
        accepted, now that the context shows which ones they were."""
        trees, pending = self._trees, self._pending
        self._trees, self._pending = [], None
        if pending is None:
            return
        start, n = pending
        accepted = list(context[start : start + n])
        for d, t in trees:
            got = walk(t, accepted)
            self.stats[d.name]["accepted"] += got
            d.observe(got)

    def constrain(self, grammar: Grammar | None) -> None:
        for d in self.drafters:
            d.constrain(grammar)

    def end(self, tokens: Sequence[int]) -> None:
        for d in self.drafters:
            d.end(tokens)

    def observe(self, num_accepted: int) -> None:
        if self._trees:
            self._pending = (self._context_len, num_accepted)
            return
        if self._winner is not None:
            self.stats[self._winner.name]["accepted"] += num_accepted
            self._winner.observe(num_accepted)

