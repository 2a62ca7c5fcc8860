"""Chains of drafters: the first with a non-empty proposal wins the step.

Contract: ``ChainDrafter([d1, d2, ...])`` asks each drafter in order and returns the first
non-empty ``Proposal`` whole (its ``q`` included, so exact rejection sampling sees the
distribution that actually produced the draft); ``observe`` goes to the drafter that
proposed, and every member keeps its own counts in ``stats`` (steps won, tokens
drafted, tokens accepted). ``begin`` reaches every member.
"""

from __future__ import annotations

from typing import Sequence

from .base import EMPTY, Drafter, Proposal


class ChainDrafter(Drafter):
    def __init__(self, drafters: Sequence[Drafter]):
        if not drafters:
            raise ValueError("a drafter chain needs at least one drafter")
        self.drafters = list(drafters)
        self.name = ",".join(d.name for d in self.drafters)
        self.stats = {d.name: {"won": 0, "drafted": 0, "accepted": 0} for d in self.drafters}
        self._winner: Drafter | None = None

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._winner = None
        for d in self.drafters:
            d.begin(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._winner = None
        for d in self.drafters:
            proposal = d.propose(context, k)
            if proposal:
                self._winner = d
                s = self.stats[d.name]
                s["won"] += 1
                s["drafted"] += len(proposal)
                return proposal
        return EMPTY

    def observe(self, num_accepted: int) -> None:
        if self._winner is not None:
            self.stats[self._winner.name]["accepted"] += num_accepted
            self._winner.observe(num_accepted)
