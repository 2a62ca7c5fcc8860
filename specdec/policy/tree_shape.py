"""Token-tree size from cost: how many draft nodes to verify this step.

Contract: proposals are best-first topological, so their first N nodes are the best N-node
tree. ``node_hits``/``best_cut`` judge every node against the emitted tokens (no
exploration needed); ``node_slots`` names each node's (depth, rank, only child).
``TreeShaper`` keeps per-slot acceptance given the parent (Beta prior) and picks
N* = argmax (1 + a_0 + ... + a_{N-1}) / ((c(N + 1) + p) / c(1)), pricing branches with the
tree curve past the leading chain. Tests: tests/policy/test_tree_shape.py.
Measured slot rates and worked examples: docs/trees.md#the-tree-shaper."""

from __future__ import annotations

from typing import Mapping, Sequence


def node_hits(tokens: Sequence[int], parents: Sequence[int] | None,
              emitted: Sequence[int]) -> list[bool | None]:
    """Per node: on the emitted path, off it, or unknown (docs/trees.md#the-tree-shaper).

    >>> node_hits([5, 6, 8, 7], [-1, 0, 0, 1], [5, 8, 2])
    [True, False, True, False]
    >>> node_hits([5, 6, 7], None, [5, 6])   # node 2 is deeper than what was emitted
    [True, True, None]
    """
    parents = list(range(-1, len(tokens) - 1)) if parents is None else list(parents)
    depth: list[int] = []
    out: list[bool | None] = []
    for i, (t, p) in enumerate(zip(tokens, parents)):
        d = depth[p] + 1 if p >= 0 else 1
        depth.append(d)
        parent_ok = out[p] if p >= 0 else True
        if parent_ok is False:
            out.append(False)
        elif parent_ok is None or d > len(emitted):
            out.append(None)
        else:
            out.append(emitted[d - 1] == t)
    return out


def best_cut(tokens: Sequence[int], parents: Sequence[int] | None,
             emitted: Sequence[int]) -> int:
    """The fewest leading nodes of a best-first proposal that hold all of it that greedy
    decoding accepts, given the tokens it went on to emit: the budget a clairvoyant
    shaper would pick, so the bound on any choice of how much of a drafter's tree to
    verify (``lab/trees-pay/tree_replay.py --shaped``).

    >>> best_cut([5, 6, 8, 7], [-1, 0, 0, 1], [5, 8, 2])   # the accepted path: nodes 0, 2
    3
    >>> best_cut([5, 6], None, [4])
    0
    """
    hits = node_hits(tokens, parents, emitted)
    return max((i + 1 for i, h in enumerate(hits) if h), default=0)


def cost_at(curve: Mapping[int, float], L: int) -> float:
    """cost(L) from a measured curve: exact where measured, linear between measured
    points, extended along the last segment past the largest one.

    >>> cost_at({1: 1.0, 2: 1.2, 4: 1.6}, 3)
    1.4
    >>> round(cost_at({1: 1.0, 2: 1.2, 4: 1.6}, 8), 6)
    2.4
    """
    if L in curve:
        return curve[L]
    xs = sorted(curve)
    lo = max((x for x in xs if x < L), default=xs[0])
    hi = min((x for x in xs if x > L), default=None)
    if hi is None:  # past the end: extend the last segment
        lo, hi = (xs[-2], xs[-1]) if len(xs) > 1 else (xs[-1], xs[-1])
    if hi == lo:
        return curve[lo]
    return curve[lo] + (curve[hi] - curve[lo]) * (L - lo) / (hi - lo)


def chain_length(parents: Sequence[int] | None, n: int) -> int:
    """How many of the first ``n`` nodes form one chain from the root (a linear block).

    >>> chain_length([-1, 0, 1, 0, 3], 5)   # 5 -> 6 -> 7, then a second branch
    3
    >>> chain_length(None, 4)
    4
    """
    if parents is None:
        return n
    m = 0
    while m < min(n, len(parents)) and parents[m] == m - 1:
        m += 1
    return m


def best_budget(rates: Sequence[float], cost: Mapping[int, float],
                tree_cost: Mapping[int, float] | None = None, chain: int | None = None,
                propose_cost: float = 0.0) -> int:
    """The N maximising (1 + Σ_{i<N} rates[i]) / ((c(N+1) + propose_cost)/c(1)) (see module
    doc); c is ``cost`` for N <= ``chain`` (default: every N) and ``tree_cost`` past it.

    >>> best_budget([0.9, 0.5, 0.2, 0.1], {L: 1 + 0.1 * (L - 1) for L in range(1, 6)})
    2
    >>> best_budget([0.9, 0.5, 0.2, 0.1], {1: 1.0, 5: 1.0})   # a flat curve: use them all
    4
    >>> best_budget([0.9, 0.5, 0.2, 0.1], {1: 1.0, 5: 1.0}, {1: 1.5, 5: 1.5}, chain=1)
    1
    >>> best_budget([0.9, 0.5, 0.2, 0.1], {L: 1 + 0.1 * (L - 1) for L in range(1, 6)},
    ...             propose_cost=0.5)
    3
    """
    c1 = cost[1]
    chain = len(rates) if chain is None or tree_cost is None else chain
    best, best_n, gain = c1 / (c1 + propose_cost), 0, 1.0
    for n, r in enumerate(rates, start=1):
        gain += r
        curve = tree_cost if tree_cost is not None and n > chain else cost
        value = gain / ((cost_at(curve, n + 1) + propose_cost) / c1)
        if value > best + 1e-12:
            best, best_n = value, n
    return best_n


def node_slots(parents: Sequence[int] | None, n: int) -> list[tuple[int, int, bool]]:
    """(depth, sibling rank, only child) of each of the first ``n`` nodes (``None``: a chain).

    >>> node_slots([-1, 0, 0, -1, 3], 5)   # 1 -> {2, 3}; then the root's second child 4 -> 5
    [(1, 0, False), (2, 0, False), (2, 1, False), (1, 1, False), (2, 0, True)]
    >>> node_slots(None, 2)
    [(1, 0, True), (2, 0, True)]
    """
    parents = list(range(-1, n - 1)) if parents is None else list(parents[:n])
    depth: list[int] = []
    kids: dict[int, int] = {}  # parent -> children placed so far
    out = []
    for p in parents:
        depth.append(depth[p] + 1 if p >= 0 else 1)
        out.append((depth[-1], kids.get(p, 0)))
        kids[p] = kids.get(p, 0) + 1
    return [(d, r, kids[p] == 1) for (d, r), p in zip(out, parents)]


class TreeShaper:
    """Per-request budget chooser (docs/trees.md#the-tree-shaper). ``budget()`` before a step,
    ``update(tokens, parents, emitted)`` after it, with the drafter's *whole* proposal."""

    def __init__(self, cost: Mapping[int, float], max_nodes: int,
                 tree_cost: Mapping[int, float] | None = None, prior: float = 0.3,
                 weight: float = 2.0, propose_cost: float = 0.0):
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
        if 1 not in cost:
            raise ValueError("the cost curve needs cost(1)")
        self.cost, self.max_nodes = dict(cost), max_nodes
        self.tree_cost = dict(tree_cost) if tree_cost else None
        if propose_cost < 0:
            raise ValueError(f"propose_cost must be >= 0 seconds, got {propose_cost}")
        self.prior, self.weight, self.propose_cost = prior, weight, propose_cost
        self.hits: dict[tuple[int, int, bool], float] = {}  # slot -> accepted, given the parent was
        self.seen: dict[tuple[int, int, bool], float] = {}  # slot -> judged with the parent accepted

    def rate(self, slot: tuple[int, int, bool]) -> float:
        """c(d, r, o): P(a node in this slot is accepted | its parent is), with the prior."""
        d, r, _ = slot
        w, p = self.weight, (self.prior if d == 1 else (d - 1) / d) / (r + 1)
        return (self.hits.get(slot, 0.0) + w * p) / (self.seen.get(slot, 0.0) + w)

    def rates(self, parents: Sequence[int] | None = None) -> list[float]:
        """a_i for the first ``max_nodes`` nodes of a proposal with these ``parents``."""
        out: list[float] = []
        parents = list(range(-1, self.max_nodes - 1)) if parents is None else parents
        for i, slot in enumerate(node_slots(parents, self.max_nodes)):
            out.append(self.rate(slot) * (out[parents[i]] if parents[i] >= 0 else 1.0))
        return out

    def budget(self, parents: Sequence[int] | None = None) -> int:
        """Nodes to verify of a proposal with these ``parents`` (None: linear)."""
        chain = chain_length(parents, self.max_nodes)
        return best_budget(self.rates(parents), self.cost, self.tree_cost, chain, self.propose_cost)

    def update(self, tokens: Sequence[int], parents: Sequence[int] | None,
               emitted: Sequence[int]) -> None:
        n = min(len(tokens), self.max_nodes)
        parents = list(range(-1, n - 1)) if parents is None else parents
        hits = node_hits(tokens[:n], parents[:n], emitted)
        for i, slot in enumerate(node_slots(parents, n)):
            parent_ok = hits[parents[i]] if parents[i] >= 0 else True
            hit = hits[i]
            if parent_ok and hit is not None:  # judged, and its parent was accepted
                self.seen[slot] = self.seen.get(slot, 0.0) + 1
                self.hits[slot] = self.hits.get(slot, 0.0) + hit
