"""The drafter contract: one base class (``Drafter``); its ``Proposal`` lives in
``core.proposal``.

A drafter only changes speed, never output. Per request: ``begin(prompt_ids)`` once before any
proposal (state is reset here, never guessed later); ``propose(context, k) -> Proposal`` each
step (empty = a plain step); ``observe(num_accepted)`` after each verify of a non-empty one;
``propose_tree(context, k, budget)`` the tree form (default: the linear proposal). Optional:
``constrain``/``forced`` (grammars), ``paused``/``watch``/``step_time`` (the cost gate),
``tail`` (tokens riding after the verify block: WeDLM's masks). Capabilities are declared
attributes, never probed: ``name``, ``branches``, ``draft_cost``, ``tails``, ``guesses_paused``.
Tests: tests/drafters/test_base.py, tests/decode/test_step.py, tests/drafters/test_trie.py.
The contract in full:
docs/design-notes.md."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

from ..core.proposal import EMPTY, Proposal, Tail

if TYPE_CHECKING:  # core.grammar imports mlx: for annotations only
    from ..core.grammar import Grammar

__all__ = ["EMPTY", "Constrainable", "Drafter", "NoDrafter", "Pausable", "Proposal", "Proposer",
           "Tail", "Tailing", "TreeProposing"]


# The seams, as Protocols: what the loop asks of every drafter (``Proposer``) and of the
# capabilities some have. ``Drafter`` implements all four with defaults that do nothing,
# so the loop calls them unconditionally (capabilities are declared, never probed).
@runtime_checkable
class Proposer(Protocol):
    """The core of every drafter: a request starts, proposals, what was accepted."""

    name: str

    def begin(self, prompt_ids: Sequence[int]) -> None: ...
    def propose(self, context: Sequence[int], k: int) -> Proposal: ...
    def observe(self, num_accepted: int) -> None: ...


@runtime_checkable
class Pausable(Protocol):
    """A drafter that may pause (the cost gate): the stream decodes plain meanwhile."""

    @property
    def paused(self) -> bool: ...
    def watch(self, context: Sequence[int]) -> None: ...
    def step_time(self, block: int, seconds: float) -> None: ...


@runtime_checkable
class Constrainable(Protocol):
    """A drafter told the request's grammar, which may draft what it forces."""

    def constrain(self, grammar: Grammar | None) -> None: ...
    def forced(self, context: Sequence[int], k: int) -> Proposal: ...


@runtime_checkable
class TreeProposing(Protocol):
    """A drafter whose ``propose_tree`` may branch (``branches``), with a known cost."""

    branches: bool
    draft_cost: dict[str, float] | None

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal: ...


@runtime_checkable
class Tailing(Protocol):
    """A drafter whose next proposal comes from the verify forward itself (``tails``): its
    ``tail`` rides after the block, and it cannot guess while paused (``guesses_paused``)."""

    tails: bool
    guesses_paused: bool

    def tail(self, context: Sequence[int], drafts: Sequence[int]) -> Tail | None: ...


class Drafter(ABC):
    """Base class of every drafter (docs/design-notes.md). Subclasses set ``name``, implement
    ``propose`` and declare their capabilities (``branches``, ``draft_cost``); ``begin``,
    ``observe`` and ``constrain`` default to doing nothing."""

    name: str = "drafter"
    branches: bool = False  # propose_tree can return real branches (docs/design-notes.md)
    draft_cost: dict[str, float] | None = None  # seconds per proposal (docs/design-notes.md)
    tails: bool = False  # drafts from its tail's predictions: every verify step needs its tail
    guesses_paused: bool = True  # proposes without a verify step of its own (the gate's shadow)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Start a request whose prompt is ``prompt_ids``."""

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        """Up to ``k`` tokens the request's grammar forces next (docs/design-notes.md); none
        here."""
        return EMPTY

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """At most ``k`` next tokens after ``context`` (empty: no guess)."""

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """A token tree of at most ``budget`` nodes and depth ``k`` (docs/design-notes.md); by
        default the linear proposal, which is a one-branch tree."""
        return self.propose(context, min(k, budget))

    def observe(self, num_accepted: int) -> None:
        """The target accepted ``num_accepted`` tokens of the last proposal."""

    def constrain(self, grammar: Grammar | None) -> None:
        """The request's ``core.grammar.Grammar`` (None: unconstrained), given before
        ``begin``; the ``grammar`` drafter drafts what it forces, wrappers pass it on."""

    @property
    def paused(self) -> bool:
        """True while the drafter would propose nothing (docs/design-notes.md: pausing)."""
        return False

    def watch(self, context: Sequence[int]) -> None:
        """One token was emitted by plain decoding while ``paused``."""

    def tail(self, context: Sequence[int], drafts: Sequence[int]) -> Tail | None:
        """Tokens to ride after this step's block ``[context[-1], *drafts]`` (None: none)."""
        return None

    def step_time(self, block: int, seconds: float) -> None:
        """A single stream's step took ``seconds``: a verify step of ``block`` tokens, or
        (``block == 0``) one pipelined plain token."""


class NoDrafter(Drafter):
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY
