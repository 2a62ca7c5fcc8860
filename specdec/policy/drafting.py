"""The decode policy: what a row drafts each step, outside the drafter. ``DecodePolicy`` asks its
drafter for the depth the request asked, every step; ``gate.CostGate`` (the default) and
``adaptive.AdaptiveK`` choose each step's k from prices instead (k = 0: a plain step, and
while ``drafts`` is False the stream decodes plain, pipelined, told each token by ``plain``).

Contract: the row owns one policy per request (``build.policy_for``); the loop calls ``begin``,
``propose``/``propose_tree``, ``observe``, ``plain`` and ``took`` and reads ``drafts`` — the
same verbs whatever the policy. A policy changes when a row drafts, never what is emitted.
Tests: tests/policy/test_drafting.py, tests/drafters/test_gate.py, tests/decode/test_trace.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..core.proposal import Proposal
from ..drafters.base import Drafter, NoDrafter


@dataclass(frozen=True)
class StepTime:
    """A single stream's step took ``seconds``: a verify step of ``block`` tokens whose
    proposing took ``proposing`` of them, or (``block == 0``) one pipelined plain token."""

    block: int
    seconds: float
    proposing: float | None = None


class DecodePolicy:
    """Drafts the depth asked every step (no pricing): the policy of ``--no-gate``."""

    def __init__(self, inner: Drafter):
        self.inner, self.name, self.draft_cost = inner, inner.name, inner.draft_cost
        self.last: StepTime | None = None  # the last step's time (a trace reads it)

    @property
    def drafter(self) -> Drafter:
        return self.inner

    @property
    def drafts(self) -> bool:
        """Whether the next step may draft (False: plain steps until ``plain`` says so)."""
        return True

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.inner.begin(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return self.inner.propose(context, k)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        return self.inner.propose_tree(context, k, budget)

    def observe(self, num_accepted: int) -> None:
        self.inner.observe(num_accepted)

    def end(self, tokens: Sequence[int]) -> None:
        self.inner.end(tokens)

    def plain(self, context: Sequence[int]) -> None:
        """Plain decoding emitted ``context[-1]`` while the policy did not draft."""

    def took(self, step: StepTime) -> None:
        self.last = step

    def describe(self) -> dict[str, Any]:
        """What the policy knows now, for a trace (``decode.trace``)."""
        return {"paused": not self.drafts}


def as_policy(drafter: Drafter | DecodePolicy | None) -> DecodePolicy:
    """A request's policy: a bare drafter drafts the depth asked (``DecodePolicy``)."""
    if isinstance(drafter, DecodePolicy):
        return drafter
    return DecodePolicy(drafter if drafter is not None else NoDrafter())
