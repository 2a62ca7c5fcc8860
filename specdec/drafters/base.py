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

The base class gives no-op ``begin``/``observe``, so wrappers (chain, gate, adaptive k)
call them unconditionally. ``draft_cost`` (None unless ``spec.build_drafter`` measured it:
``{"fixed": s, "per_token": s}``, see ``measure.draft_cost_for``) is what one proposal
costs, for the engine's tree shaper.

A ``Proposal`` is a token tree in topological order: ``tokens[i]`` hangs below node
``parents[i]`` (``-1`` = the last context token, the root). ``parents=None`` is the
linear chain (``parents[i] = i - 1``), which is what every drafter returns today. ``q``
(an ``mx.array`` of shape ``(len(tokens), V)``) is the distribution each token was
sampled from, for exact rejection sampling; ``None`` means the tokens are deterministic
(point masses).

    >>> p = Proposal([5, 6, 7])
    >>> len(p), p.is_linear, p.depth
    (3, True, 3)
    >>> t = Proposal([5, 6, 8], parents=(-1, 0, 0))   # 5 -> 6 and 5 -> 8: two branches
    >>> t.is_linear, t.depth, t.path(2)
    (False, 2, [5, 8])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Proposal:
    tokens: tuple[int, ...] = ()
    q: Any = None  # mx.array (len(tokens), V) for sampled drafts; None = point masses
    parents: tuple[int, ...] | None = None  # None = linear chain

    def __init__(self, tokens: Sequence[int] = (), q: Any = None,
                 parents: Sequence[int] | None = None):
        object.__setattr__(self, "tokens", tuple(int(t) for t in tokens))
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "parents", None if parents is None else tuple(parents))
        self._check()

    def _check(self) -> None:
        n = len(self.tokens)
        if self.q is not None and (len(self.q.shape) != 2 or self.q.shape[0] != n):
            raise ValueError(f"q must have one row per token: {n} tokens, q shape {self.q.shape}")
        if self.parents is not None:
            if len(self.parents) != n:
                raise ValueError(f"{n} tokens but {len(self.parents)} parent indices")
            bad = [i for i, p in enumerate(self.parents) if not -1 <= p < i]
            if bad:
                raise ValueError(f"parents must point to an earlier node or -1 (root): node {bad[0]}")

    def __len__(self) -> int:
        return len(self.tokens)

    def __bool__(self) -> bool:
        return bool(self.tokens)

    @property
    def is_linear(self) -> bool:
        return self.parents is None or all(p == i - 1 for i, p in enumerate(self.parents))

    @property
    def depth(self) -> int:
        """Length of the longest root path (= len for a linear proposal)."""
        if self.is_linear:
            return len(self.tokens)
        depth: list[int] = []
        for p in self.parents:  # topological order: a parent's depth is known
            depth.append(1 + (depth[p] if p >= 0 else 0))
        return max(depth, default=0)

    def path(self, node: int) -> list[int]:
        """The tokens from the root down to ``node`` (inclusive)."""
        if self.is_linear:
            return list(self.tokens[: node + 1])
        out = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def truncated(self, k: int) -> "Proposal":
        """A linear proposal cut to its first ``k`` tokens (q rows cut alike)."""
        if not self.is_linear:
            raise ValueError("truncating a tree proposal is not defined; shape it in the drafter")
        if len(self.tokens) <= k:
            return self
        return Proposal(self.tokens[:k], None if self.q is None else self.q[:k])


EMPTY = Proposal()


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


class NoDrafter(Drafter):
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY
