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
``grammar`` drafter drafts what it forces; wrappers pass it on). ``forced(context, k)`` is
``propose`` restricted to the tokens the request's grammar forces (EMPTY by default; the
``grammar`` drafter and a chain holding it answer): drafts that are all but certain, which
the cost gate submits without pricing them, paused or not.

Pausing (the cost gate, ``gate.CostGate``): ``paused`` (bool, default False) says the
drafter proposes nothing for now, so a single stream may decode plain and pipelined (as
fast as plain decoding) instead of one verify step per token; while it does, the engine
calls ``watch(context)`` after every emitted token (the gate scores shadow guesses there)
until ``paused`` turns False. ``step_time(block, seconds)`` tells the drafter how long a
single stream's step took: a verify step of ``block`` tokens (drafting included), or
``block == 0`` for one pipelined plain token (the gate learns the real cost of each from it).

``Drafter`` is an abstract base class: ``propose`` is abstract; ``begin``/``observe``/
``constrain`` are no-ops, so wrappers (chain, gate, adaptive k) call them unconditionally.

Capabilities are declared, never probed (no ``hasattr``/``getattr`` on a drafter):

- ``name`` (str): what stats, logs and the bench call it.
- ``branches`` (bool, default False): ``propose_tree`` can return real branches. False
  means it returns the linear proposal (the default ``propose_tree``), so a tree budget
  buys nothing but a shorter cut. True for ngram, suffix, the greedy draft model (its
  top-k alternatives; not when it samples or is built with ``branch_width < 2``) and a
  chain of two or more drafters (its members' proposals merge into one trie).
- ``draft_cost`` (``{"fixed": s, "per_token": s}`` or None, default None): what one
  proposal costs, a k-token proposal about fixed + per_token * k seconds, for the tree
  shaper and adaptive k; ``spec.build_drafter`` sets it from ``DraftResources``
  (measured by ``measure.draft_cost_for``), a caller may set it on its own drafter.

Wrappers state what they wrap: the gate and adaptive k forward ``branches`` and
``draft_cost`` of their inner drafter; a chain branches (see above) and costs the sum of
its members' costs when every member has one (an upper bound: it stops at the first
member that proposes).

The ``Proposal`` type lives in ``core.proposal`` (every layer reads it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, Sequence, runtime_checkable

from ..core.proposal import EMPTY, Proposal

__all__ = ["EMPTY", "Constrainable", "Drafter", "NoDrafter", "Pausable", "Proposal", "Proposer",
           "TreeProposing"]


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

    def constrain(self, grammar: Any) -> None: ...
    def forced(self, context: Sequence[int], k: int) -> Proposal: ...


@runtime_checkable
class TreeProposing(Protocol):
    """A drafter whose ``propose_tree`` may branch (``branches``), with a known cost."""

    branches: bool
    draft_cost: dict[str, float] | None

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal: ...


class Drafter(ABC):
    """Base class of every drafter (see module doc). Subclasses set ``name``, implement
    ``propose`` and declare their capabilities (``branches``, ``draft_cost``); ``begin``,
    ``observe`` and ``constrain`` default to doing nothing."""

    name: str = "drafter"
    branches: bool = False  # propose_tree can return real branches (module doc)
    draft_cost: dict[str, float] | None = None  # seconds per proposal (module doc)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Start a request whose prompt is ``prompt_ids``."""

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        """Up to ``k`` tokens the request's grammar forces next (module doc); none here."""
        return EMPTY

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """At most ``k`` next tokens after ``context`` (empty: no guess)."""

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """A token tree of at most ``budget`` nodes and depth ``k`` (module doc); by
        default the linear proposal, which is a one-branch tree."""
        return self.propose(context, min(k, budget))

    def observe(self, num_accepted: int) -> None:
        """The target accepted ``num_accepted`` tokens of the last proposal."""

    def constrain(self, grammar: Any) -> None:
        """The request's ``core.grammar.Grammar`` (None: unconstrained), given before
        ``begin``; the ``grammar`` drafter drafts what it forces, wrappers pass it on."""

    @property
    def paused(self) -> bool:
        """True while the drafter would propose nothing (module doc: pausing)."""
        return False

    def watch(self, context: Sequence[int]) -> None:
        """One token was emitted by plain decoding while ``paused``."""

    def step_time(self, block: int, seconds: float) -> None:
        """A single stream's step took ``seconds``: a verify step of ``block`` tokens, or
        (``block == 0``) one pipelined plain token."""


class NoDrafter(Drafter):
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY
