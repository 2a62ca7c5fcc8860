"""Chains of drafters: the first with a non-empty proposal wins the step.

Contract: ``ChainDrafter([d1, d2, ...])`` asks each drafter in order and returns the first
non-empty proposal; ``observe`` goes to the drafter that proposed, and every member keeps
its own counts in ``stats`` (steps won, tokens drafted, tokens accepted). ``last_q`` is the
winning drafter's draft distribution (None for deterministic drafters), so exact
rejection sampling sees the q that actually produced the draft.
"""

from __future__ import annotations

from typing import Sequence

from .base import Drafter


class ChainDrafter:
    def __init__(self, drafters: Sequence[Drafter]):
        if not drafters:
            raise ValueError("a drafter chain needs at least one drafter")
        self.drafters = list(drafters)
        self.name = ",".join(d.name for d in self.drafters)
        self.stats = {d.name: {"won": 0, "drafted": 0, "accepted": 0} for d in self.drafters}
        self._winner: Drafter | None = None
        self.last_q = None

    def begin(self, prompt_ids: Sequence[int]) -> None:
        for d in self.drafters:
            if hasattr(d, "begin"):
                d.begin(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        self._winner, self.last_q = None, None
        for d in self.drafters:
            draft = d.propose(context, k)
            if draft:
                self._winner = d
                self.last_q = getattr(d, "last_q", None)
                s = self.stats[d.name]
                s["won"] += 1
                s["drafted"] += len(draft)
                return draft
        return []

    def observe(self, num_accepted: int) -> None:
        if self._winner is not None:
            self.stats[self._winner.name]["accepted"] += num_accepted
            self._winner.observe(num_accepted)
