"""Deciding when to draft: a prompt gate and a runtime gate around any drafter.

Contract of ``GatedDrafter(inner, ...)`` (itself a Drafter):
- Prompt gate: at the start of a request (``begin(prompt_ids)``) it scores the prompt
  with ``repetition_score``; below ``min_score`` speculation is off for the request
  unless ``force``.
- Runtime gate: after ``window`` proposals it turns drafting off when their acceptance
  rate is below ``min_acceptance``. While off it *shadow-drafts* every ``recheck_every``
  steps — asks the inner drafter for a guess without submitting it — and compares the
  guess with the token the target then emitted; when the recent shadow guesses would
  have been accepted at ``min_acceptance`` or more, drafting turns back on.
Off means ``propose`` returns [] and the engine runs a plain step: output never changes.
``propose_tree`` is gated alike (off: empty; shadow guesses stay linear); a tree's
acceptance rate is the accepted path length over the tree's depth (its longest path).
Capabilities (``branches``, ``draft_cost``) are the inner drafter's.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from .base import EMPTY, Drafter, Proposal


def repetition_score(tokens: Sequence[int], n: int = 3) -> float:
    """Distinct n-grams seen at least twice / distinct n-grams (0 when there are none).

    >>> repetition_score([1, 2, 3, 1, 2, 3, 9])   # 3-grams 123 231 312 123 239
    0.25
    """
    seen: dict[tuple[int, ...], int] = {}
    for i in range(len(tokens) - n + 1):
        g = tuple(tokens[i : i + n])
        seen[g] = seen.get(g, 0) + 1
    return sum(c >= 2 for c in seen.values()) / len(seen) if seen else 0.0


class GatedDrafter(Drafter):
    def __init__(
        self,
        inner: Drafter,
        *,
        min_score: float = 0.02,
        force: bool = False,
        min_acceptance: float = 0.2,
        window: int = 16,
        recheck_every: int = 8,
    ):
        self.inner, self.name = inner, inner.name
        self.draft_cost = inner.draft_cost
        self.min_score, self.force = min_score, force
        self.min_acceptance, self.window, self.recheck_every = min_acceptance, window, recheck_every
        self._reset()

    @property
    def branches(self) -> bool:
        return self.inner.branches

    def _reset(self) -> None:
        self.enabled = True
        self.prompt_score: float | None = None
        self._recent: deque[float] = deque(maxlen=self.window)  # per-proposal acceptance
        self._shadow: deque[float] = deque(maxlen=self.window)
        self._shadow_guess: tuple[int, list[int]] | None = None  # (position, guess)
        self._steps_off = 0
        self._proposed = 0

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._reset()
        self.prompt_score = repetition_score(prompt_ids)
        self.enabled = self.force or self.prompt_score >= self.min_score
        self.inner.begin(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return self._gated(context, k, None)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        return self._gated(context, k, budget)

    def _gated(self, context: Sequence[int], k: int, budget: int | None) -> Proposal:
        self._score_shadow(context)
        if self.enabled:
            if budget is None:
                proposal = self.inner.propose(context, k)
            else:
                proposal = self.inner.propose_tree(context, k, budget)
            self._proposed = proposal.depth  # = len for a linear proposal
            return proposal
        self._steps_off += 1
        if self._steps_off % self.recheck_every == 0:
            self._shadow_guess = (len(context), list(self.inner.propose(context, k).tokens))
        return EMPTY

    def _score_shadow(self, context: Sequence[int]) -> None:
        if self._shadow_guess is None:
            return
        pos, guess = self._shadow_guess
        self._shadow_guess = None
        if guess and len(context) > pos:
            self._shadow.append(float(context[pos] == guess[0]))
            if len(self._shadow) >= min(4, self.window) and sum(self._shadow) / len(self._shadow) >= self.min_acceptance:
                self.enabled, self._recent = True, deque(maxlen=self.window)

    def constrain(self, grammar):
        self.inner.constrain(grammar)

    def observe(self, num_accepted: int) -> None:
        if not self.enabled or not self._proposed:
            return
        self.inner.observe(num_accepted)
        self._recent.append(num_accepted / self._proposed)
        if len(self._recent) == self.window and sum(self._recent) / self.window < self.min_acceptance:
            if not self.force:
                self.enabled, self._shadow, self._steps_off = False, deque(maxlen=self.window), 0
        self._proposed = 0
