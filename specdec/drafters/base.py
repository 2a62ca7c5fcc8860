"""The drafter contract: one base class and the ``Proposal`` it returns.

A drafter guesses the next tokens; the target model has the final word, so a drafter can
only change speed, never output. The engine drives every drafter the same way, per
request:

1. ``begin(prompt_ids)`` — always, once, before the first proposal (inside the prefill
   phase, so a draft model's prompt pass counts as prefill). Per-request state is reset
   or carried over *here*, never guessed from the context later.
2. ``propose(context, k) -> Proposal`` — at every step. ``context`` is the prompt plus
   every emitted token; within a request it only grows, so a drafter may index just
   ``context[len(seen):]``. At most ``k`` tokens; an empty proposal means "no guess"
   and the engine runs a plain one-token step.
3. ``observe(num_accepted)`` — after each verify of a non-empty proposal: how many of its
   tokens the target accepted (0..len; for a tree, the length of the accepted root path).

``propose_tree(context, k, budget) -> Proposal`` is the tree form of step 2: at most
``budget`` nodes, no root path longer than ``k``, nodes in the order the drafter chose
them, siblings best first (see ``trie``). The default is the linear proposal (a
one-branch tree) of ``min(k, budget)`` tokens; ``propose`` is unchanged for every drafter.

``constrain(grammar)`` hands every drafter the request's grammar before ``begin`` (the
``grammar`` drafter drafts what it forces; wrappers pass it on).

The base class gives no-op ``begin``/``observe``/``constrain``, so wrappers (chain, gate, adaptive k)
call them unconditionally. ``draft_cost`` (None unless ``spec.build_drafter`` measured it:
``{"fixed": s, "per_token": s}``, see ``measure.draft_cost_for``) is what one proposal
costs, for the engine's tree shaper.

The ``Proposal`` type lives in ``core.proposal`` (every layer reads it).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..core.proposal import EMPTY, Proposal

__all__ = ["EMPTY", "Drafter", "NoDrafter", "Proposal"]


class Drafter:
    """Base class of every drafter (see module doc). Subclasses set ``name`` and
    implement ``propose``; ``begin`` and ``observe`` default to doing nothing."""

    name = "drafter"
    draft_cost: dict[str, float] | None = None  # seconds per proposal (module doc)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Start a request whose prompt is ``prompt_ids``."""

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        raise NotImplementedError

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """A token tree of at most ``budget`` nodes and depth ``k`` (module doc); by
        default the linear proposal, which is a one-branch tree."""
        return self.propose(context, min(k, budget))

    def observe(self, num_accepted: int) -> None:
        """The target accepted ``num_accepted`` tokens of the last proposal."""

    def constrain(self, grammar: Any) -> None:
        """The request's ``core.grammar.Grammar`` (None: unconstrained), given before
        ``begin``; the ``grammar`` drafter drafts what it forces, wrappers pass it on."""


class NoDrafter(Drafter):
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY
