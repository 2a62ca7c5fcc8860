"""The drafter contract: one base class (``Drafter``); its ``Proposal`` and ``Wants`` live in
``core.proposal``.

A drafter only changes speed, never output. Four verbs per request: ``begin(prompt_ids)`` once
before any proposal (state is reset here, never guessed later); ``propose(context, k) ->
Proposal`` each step (empty = a plain step); ``observe(num_accepted)`` after each verify of a
non-empty one; ``end(tokens)`` once the request is over (a drafter with a memory keeps its
text). Optional capabilities are declared as data, and the loop calls their verbs
unconditionally (the defaults do nothing): ``branches`` (``propose_tree`` may return a token
tree), ``outputs`` (``wants``/``tree_wants``: what it needs from a linear/tree block's verify
forward, e.g. WeDLM's tail, a head's hidden states; ``feed_wants``: from a prefill chunk's or
a plain step's forward); ``constrain``/``forced`` carry a request's grammar. ``draft_cost``
(seconds per proposal; ``proposer_cost``/``lead_cost``: what the last proposal/an ask cost,
a chain's by member, ``proposer`` saying which) and ``guesses_paused`` (it can guess without
a verify step of its own) inform the decode policy (``policy.drafting``), which decides how
deep a row drafts: a drafter never pauses itself. Tests: tests/drafters/test_base.py,
tests/decode/test_step.py, tests/drafters/test_trie.py. The contract in full: docs/drafters.md#the-contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Sequence

from ..core.proposal import EMPTY, Proposal, Returned, Wants

if TYPE_CHECKING:  # core.grammar imports mlx: for annotations only
    from ..core.grammar import Grammar

__all__ = ["EMPTY", "Drafter", "NoDrafter", "Proposal", "Returned", "Wants"]


class Drafter(ABC):
    """Base class of every drafter (docs/drafters.md#the-contract). Subclasses set ``name``, implement
    ``propose`` and declare their capabilities; every other verb defaults to doing nothing."""

    name: str = "drafter"
    branches: bool = False  # propose_tree can return real branches (docs/drafters.md#the-contract)
    outputs: bool = False  # wants something from the verify forward (``wants``)
    draft_cost: dict[str, float] | None = None  # seconds per proposal (docs/drafters.md#the-contract)
    guesses_paused: bool = True  # proposes without a verify step of its own (the gate's shadow)
    # a chain member's own draft cap: a chain asks it for at most min(k, max_k) tokens (None:
    # the chain's k). Why: a head accepted only at its first positions beside suffix's 8
    max_k: int | None = None

    @property
    def proposer(self) -> Drafter | None:
        """The drafter whose proposal was returned last: this one (a chain: the member that made
        it; None: none did). The cost gate keeps each proposer's offers apart (docs/gate.md)."""
        return self

    @property
    def proposer_cost(self) -> dict[str, float] | None:
        """What the last proposal cost to make: ``draft_cost`` (a chain: its proposer's)."""
        return self.draft_cost

    @property
    def lead_cost(self) -> dict[str, float] | None:
        """What an ask for an offer costs: ``draft_cost`` (a chain: its first member's)."""
        return self.draft_cost

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Start a request whose prompt is ``prompt_ids``."""

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """At most ``k`` next tokens after ``context`` (empty: no guess)."""

    def observe(self, num_accepted: int) -> None:
        """The target accepted ``num_accepted`` tokens of the last proposal."""

    def end(self, tokens: Sequence[int]) -> None:
        """The request is over: ``tokens`` is its prompt and every token it emitted (a drafter
        that writes a memory writes the rest of them; the next proposal, if any, follows a
        new ``begin``)."""

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """A token tree of at most ``budget`` nodes and depth ``k`` (docs/drafters.md#the-contract); by
        default the linear proposal, which is a one-branch tree."""
        return self.propose(context, min(k, budget))

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants | None:
        """What this step's block ``[context[-1], *drafts]`` should return to it (None: nothing)."""
        return None

    def tree_wants(self, context: Sequence[int], tree: Proposal) -> Wants | None:
        """``wants`` for a token tree's block ``[context[-1], *tree.tokens]`` (hidden states
        only: no tail rides after a tree; None: nothing)."""
        return None

    def feed_wants(self, start: int, n: int) -> Wants | None:
        """What a forward that feeds ``n`` tokens at positions ``start..`` and verifies nothing
        (a prefill chunk, a plain step) should return to it (hidden states only; None: nothing)."""
        return None

    def constrain(self, grammar: Grammar | None) -> None:
        """The request's ``core.grammar.Grammar`` (None: unconstrained), given before
        ``begin``; the ``grammar`` drafter drafts what it forces, a chain passes it on."""

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        """Up to ``k`` tokens the request's grammar forces next (docs/drafters.md#the-contract); none
        here."""
        return EMPTY


class NoDrafter(Drafter):
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY
