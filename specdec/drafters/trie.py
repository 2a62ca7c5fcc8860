"""Token tries: the shape of a tree proposal, as pure functions over token lists.

Invariant of every tree built here: siblings best first (the first-child path is the
``best_path``) and prefix closed (the first ``m`` nodes are the drafter's tree for a budget
of ``m``). A one-chain tree comes back with ``parents=None`` (linear).
Tests: tests/drafters/test_trie.py, tests/policy/test_tree_shape.py."""

from __future__ import annotations

from typing import Iterable, Sequence

from .base import EMPTY, Proposal


class Trie:
    """A growing token trie with a node budget; nodes are numbered in insertion order."""

    def __init__(self, budget: int):
        self.budget = budget
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self._child: dict[tuple[int, int], int] = {}  # (parent, token) -> node

    @property
    def full(self) -> bool:
        return len(self.tokens) >= self.budget

    def child(self, parent: int, token: int) -> int | None:
        return self._child.get((parent, token))

    def add(self, parent: int, token: int) -> int | None:
        """The node for ``token`` below ``parent``: the existing one, else a new one, else
        None when the budget is spent."""
        node = self._child.get((parent, token))
        if node is not None or self.full:
            return node
        node = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self._child[(parent, token)] = node
        return node

    def insert(self, path: Iterable[int], parent: int = -1) -> bool:
        """Insert ``path`` below ``parent``, sharing existing prefixes; False when the
        budget cut it short."""
        for tok in path:
            node = self.add(parent, tok)
            if node is None:
                return False
            parent = node
        return True

    def proposal(self) -> Proposal:
        return make_proposal(self.tokens, self.parents)


def make_proposal(tokens: Sequence[int], parents: Sequence[int]) -> Proposal:
    """A point-mass ``Proposal``, with ``parents=None`` when the nodes form one chain."""
    if not tokens:
        return EMPTY
    linear = all(p == i - 1 for i, p in enumerate(parents))
    return Proposal(tokens, parents=None if linear else parents)


def _parents(p: Proposal) -> tuple[int, ...]:
    return tuple(range(-1, len(p) - 1)) if p.parents is None else p.parents


def merge_paths(paths: Iterable[Sequence[int]], budget: int, max_depth: int) -> Proposal:
    """Insert token paths, best first, into one trie of at most ``budget`` nodes.

    Each path is cut to ``max_depth`` tokens and shares any prefix already in the trie
    (so duplicates cost nothing); the first path that needs a node past the budget is
    cut there and nothing after it is inserted, so earlier paths always win the budget.

    Worked example (budget 5, max_depth 3)::

        paths  [1, 2, 3, 4]   cut to [1, 2, 3]      nodes 0:1  1:2  2:3
               [1, 2, 3]      all shared            (nothing new)
               [1, 5]         shares [1]            node  3:5 below 0
               [6, 7, 8]      budget left for [6]   node  4:6 below the root, then full

        -> tokens (1, 2, 3, 5, 6), parents (-1, 0, 1, 0, -1)

    ``best_path`` of the result is [1, 2, 3], the first path cut to ``max_depth``; in
    general it starts with the first path (a later path sharing it may extend it).
    """
    trie = Trie(budget)
    if max_depth > 0:
        for path in paths:
            if not trie.insert(list(path)[:max_depth]):
                break
    return trie.proposal()


def merge_trees(trees: Iterable[Proposal], budget: int) -> Proposal:
    """Merge tree proposals, best first, into one trie of at most ``budget`` nodes.

    Each tree's nodes are inserted in its own (priority) order below the merged node of
    their parent; a node already present is shared. The first node that needs room past
    the budget ends the merge, so earlier trees, and within a tree earlier nodes, win the
    budget. ``q`` is dropped: merge only point-mass trees.

    Worked example (budget 4)::

        A = [1, 2] parents (-1, 0)              1 -> 2
        B = [1, 3, 4] parents (-1, 0, -1)       1 -> 3, and 4
        -> tokens (1, 2, 3, 4), parents (-1, 0, 0, -1): 1 -> (2, 3), and 4

    With budget 3 the merge stops before B's node 4: tokens (1, 2, 3).
    """
    trie = Trie(budget)
    for tree in trees:
        where: list[int] = []  # tree node -> merged node
        for tok, parent in zip(tree.tokens, _parents(tree)):
            node = trie.add(-1 if parent < 0 else where[parent], tok)
            if node is None:
                return trie.proposal()
            where.append(node)
    return trie.proposal()


def shared_nodes(tree: Proposal, other: Proposal) -> int:
    """How many of ``tree``'s nodes ``other`` also holds (the same root path).

    >>> shared_nodes(Proposal([1, 2, 3], parents=(-1, 0, -1)), Proposal([1, 2, 4]))
    2
    """
    lookup = {(parent, tok): i for i, (tok, parent) in enumerate(zip(other.tokens, _parents(other)))}
    where: list[int | None] = []  # tree node -> other's node
    for tok, parent in zip(tree.tokens, _parents(tree)):
        up = -1 if parent < 0 else where[parent]
        where.append(None if up is None else lookup.get((up, tok)))
    return sum(w is not None for w in where)


def children(p: Proposal) -> dict[int, list[int]]:
    """Node -> its children in order (best first); key -1 is the root."""
    out: dict[int, list[int]] = {-1: []}
    for i, parent in enumerate(_parents(p)):
        out.setdefault(parent, []).append(i)
        out.setdefault(i, [])
    return out


def best_path(p: Proposal) -> list[int]:
    """The tokens along the first child of every node from the root (the best branch).

    >>> best_path(Proposal([1, 2, 3, 5, 6], parents=(-1, 0, 1, 0, -1)))
    [1, 2, 3]
    """
    kids, node, out = children(p), -1, []
    while kids[node]:
        node = kids[node][0]
        out.append(p.tokens[node])
    return out


def root_paths(p: Proposal) -> list[list[int]]:
    """The token path of every leaf, in node order.

    >>> root_paths(Proposal([1, 2, 3, 5, 6], parents=(-1, 0, 1, 0, -1)))
    [[1, 2, 3], [1, 5], [6]]
    """
    kids = children(p)
    return [p.path(i) for i in range(len(p)) if not kids[i]]


def walk(p: Proposal, truth: Sequence[int]) -> int:
    """How many tokens of ``truth`` the tree holds as a root path: the tokens a greedy
    verify accepts when ``truth`` is what the target would generate.

    >>> walk(Proposal([1, 2, 3, 5, 6], parents=(-1, 0, 1, 0, -1)), [1, 5, 9])
    2
    """
    lookup = {(parent, tok): i for i, (tok, parent) in enumerate(zip(p.tokens, _parents(p)))}
    node, n = -1, 0
    for tok in truth:
        child = lookup.get((node, tok))
        if child is None:
            break
        node, n = child, n + 1
    return n
