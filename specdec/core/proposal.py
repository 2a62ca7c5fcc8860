"""The drafter's output type, shared by every layer: a linear draft or a token tree.

A ``Proposal`` is a tree in topological order: ``tokens[i]`` hangs below ``parents[i]``
(``-1`` = the root, the last context token; ``parents=None`` = a linear chain); ``q`` is each
token's draft distribution, ``None`` for point masses; ``support``, where a drafter can say it,
the share of the evidence behind its first token (the suffix drafter's: of the match's earlier
occurrences, those the token followed), read by the cost gate (``policy.offers.grade``).
Tests: tests/core/test_proposal.py, tests/decode/test_step.py, tests/decode/test_tree_attention.py,
tests/drafters/test_suffix.py (``support``).

    >>> t = Proposal([5, 6, 8], parents=(-1, 0, 0))   # 5 -> 6 and 5 -> 8: two branches
    >>> t.is_linear, t.depth, t.path(2)
    (False, 2, [5, 8])"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # annotations only: this module stays importable without mlx
    import mlx.core as mx


@dataclass(frozen=True)
class Proposal:
    tokens: tuple[int, ...] = ()
    q: mx.array | None = None  # mx.array (len(tokens), V) for sampled drafts; None = point masses
    parents: tuple[int, ...] | None = None  # None = linear chain
    support: float | None = None  # 0..1: the evidence behind the first token (None: not said)

    def __init__(self, tokens: Sequence[int] = (), q: mx.array | None = None,
                 parents: Sequence[int] | None = None, support: float | None = None):
        object.__setattr__(self, "tokens", tuple(int(t) for t in tokens))
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "parents", None if parents is None else tuple(parents))
        object.__setattr__(self, "support", support)
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
    def parent_ids(self) -> tuple[int, ...]:
        """Each node's parent index, the chain's (``i - 1``) spelled out for a linear one."""
        if self.parents is None:
            return tuple(range(-1, len(self.tokens) - 1))
        return self.parents

    @property
    def depth(self) -> int:
        """Length of the longest root path (= len for a linear proposal)."""
        if self.is_linear:
            return len(self.tokens)
        depth: list[int] = []
        for p in self.parent_ids:  # topological order: a parent's depth is known
            depth.append(1 + (depth[p] if p >= 0 else 0))
        return max(depth, default=0)

    def path(self, node: int) -> list[int]:
        """The tokens from the root down to ``node`` (inclusive)."""
        if self.is_linear:
            return list(self.tokens[: node + 1])
        out = []
        parents = self.parent_ids
        while node >= 0:
            out.append(self.tokens[node])
            node = parents[node]
        return out[::-1]

    def truncated(self, k: int) -> "Proposal":
        """A linear proposal cut to its first ``k`` tokens (q rows cut alike)."""
        if not self.is_linear:
            raise ValueError("truncating a tree proposal is not defined; shape it in the drafter")
        if len(self.tokens) <= k:
            return self
        return Proposal(self.tokens[:k], None if self.q is None else self.q[:k])


EMPTY = Proposal()


@dataclass(frozen=True)
class Returned:
    """What one verify forward gave a row beyond its emitted tokens, as its ``Wants`` asked:
    ``tail_logits`` (len(tail), V) of the tail's rows, and ``hidden[i]`` (block, H) the input
    of decoder layer i (the hidden state after layer i - 1, pre-norm: EAGLE-3's features) at
    each of the block's rows ``[last, *drafts]`` — device arrays, evaluated by the step's sync."""

    tail_logits: Any = None
    hidden: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Wants:
    """What a drafter needs from a row's verify forward (``Drafter.wants``): ``tail`` tokens
    riding after the block (WeDLM's masks: never accepted, always rolled back, so the row's
    output and cache are as without them), the hidden states of ``layers`` at every block row.
    ``read`` takes the ``Returned`` before the step's one host sync and returns the device
    arrays to evaluate in that same sync (the drafter's next proposal reads them)."""

    read: Callable[[Returned], list[Any]]
    tail: tuple[int, ...] = ()
    layers: tuple[int, ...] = ()
