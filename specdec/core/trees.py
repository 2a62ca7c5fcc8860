"""Token trees as pure functions: a tree is ``(tokens, parents)`` in topological order
(``parents[j] < j``, ``-1`` = the root, the last context token); the verify block is
``[last] + tokens`` (block index ``j + 1`` is node ``j``).

Contract: ``tree_positions`` (depths), ``ancestor_mask`` (the block's visibility),
``first_branch``/``prune_tree``/``cut`` (shaping), ``greedy_tree_accept`` (the child equal to
the target's argmax, row by row), ``tree_kids`` (each row's children, best first).
Tests: tests/core/test_trees.py, tests/decode/test_tree_attention.py. Details:
docs/trees.md#tree-structure."""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from .proposal import Proposal


def tree_positions(parents: Sequence[int]) -> list[int]:
    """Depth of each node (1 for children of the root).

    >>> tree_positions([-1, 0, 0, -1, 3])
    [1, 2, 2, 1, 2]
    """
    depth: list[int] = []
    for j, p in enumerate(parents):
        if not -1 <= p < j:
            raise ValueError(f"node {j}: parent {p} is not an earlier node or -1 (topological order)")
        depth.append(1 + (depth[p] if p >= 0 else 0))
    return depth


def ancestor_mask(parents: Sequence[int]) -> list[list[bool]]:
    """Visibility within the block ``[last] + nodes``: row r sees the root, its ancestors
    and itself.

    >>> [''.join('x' if v else '.' for v in row) for row in ancestor_mask([-1, 0, -1])]
    ['x...', 'xx..', 'xxx.', 'x..x']
    """
    tree_positions(parents)  # validates the order
    rows = [[True]]
    for j, p in enumerate(parents):
        parent = rows[p + 1]  # the parent's row (root = block row 0) sees our ancestors
        rows.append(parent + [False] * (j + 1 - len(parent)) + [True])
    n = len(rows)
    return [r + [False] * (n - len(r)) for r in rows]


def first_branch(proposal: Proposal) -> Proposal:
    """The tree's first-child path (drafters order children best first), as a linear
    proposal with its q rows.

    >>> first_branch(Proposal([5, 6, 7, 8], parents=(-1, -1, 0, 2))).tokens
    (5, 7, 8)
    """
    if proposal.is_linear or proposal.parents is None:  # None is linear; said for the checker
        return proposal
    path: list[int] = []
    node = -1
    for j, p in enumerate(proposal.parents):
        if p == node:
            path.append(j)
            node = j
    q = None if proposal.q is None else proposal.q[mx.array(path)] if path else None
    return Proposal([proposal.tokens[j] for j in path], q)


def prune_tree(proposal: Proposal, max_depth: int, max_nodes: int) -> Proposal:
    """The nodes at depth <= max_depth whose ancestors are all kept, the first
    ``max_nodes`` of them in topological order (so every kept node's parent is kept).

    >>> p = prune_tree(Proposal([1, 2, 3, 4], parents=(-1, 0, 1, -1)), 2, 3)
    >>> p.tokens, p.parents
    ((1, 2, 4), (-1, 0, -1))
    """
    parents = proposal.parents
    if proposal.is_linear or parents is None:
        return proposal.truncated(min(max_depth, max_nodes))
    depth = tree_positions(parents)
    new_index: dict[int, int] = {-1: -1}
    kept: list[int] = []
    for j, p in enumerate(parents):
        if len(kept) < max_nodes and depth[j] <= max_depth and p in new_index:
            new_index[j] = len(kept)
            kept.append(j)
    if len(kept) == len(proposal.tokens):
        return proposal
    q = None if proposal.q is None or not kept else proposal.q[mx.array(kept)]
    return Proposal([proposal.tokens[j] for j in kept], q,
                    parents=[new_index[parents[j]] for j in kept])


def greedy_tree_accept(tokens: Sequence[int], parents: Sequence[int],
                       fix: Sequence[int]) -> tuple[list[int], list[int]]:
    """(accepted node indices in path order, emitted tokens). ``fix[r]`` is the target's
    argmax at block row r (row 0 follows the root, row j+1 follows node j). The emitted
    tokens are the accepted nodes' tokens plus the target's token after the last one.

    >>> greedy_tree_accept([5, 6, 7, 9], [-1, -1, 1, 2], fix=[6, 0, 7, 9, 9])
    ([1, 2, 3], [6, 7, 9, 9])
    >>> greedy_tree_accept([5, 6], [-1, -1], fix=[4, 0, 0])
    ([], [4])
    """
    children: dict[int, list[int]] = {}
    for j, p in enumerate(parents):
        children.setdefault(p, []).append(j)
    path: list[int] = []
    node = -1
    while True:
        want = fix[node + 1]
        nxt = next((c for c in children.get(node, ()) if tokens[c] == want), None)
        if nxt is None:
            return path, [tokens[j] for j in path] + [want]
        path.append(nxt)
        node = nxt


def tree_kids(tokens: Sequence[int], parents: Sequence[int]) -> list[list[int]]:
    """Each block row's child nodes in the order they are tried (topological = best
    first); a child repeating an earlier sibling's token is left out (a trie has none,
    and a repeat could never be accepted after its twin was rejected).

    >>> tree_kids([5, 6, 5, 7], [-1, -1, -1, 0])
    [[0, 1], [3], [], [], []]
    """
    kids: list[list[int]] = [[] for _ in range(len(tokens) + 1)]
    for j, p in enumerate(parents):
        if all(tokens[c] != tokens[j] for c in kids[p + 1]):
            kids[p + 1].append(j)
    return kids


def cut(proposal: Proposal, max_depth: int, max_nodes: int) -> Proposal:
    """The first ``max_nodes`` nodes of a (best-first) proposal, at most ``max_depth`` deep."""
    if proposal.is_linear:
        return proposal.truncated(min(max_depth, max_nodes))
    return prune_tree(proposal, max_depth, max_nodes)
