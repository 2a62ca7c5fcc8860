"""``specdec.core.trees``: depths, the ancestor mask, pruning, greedy acceptance and each
row's children, against brute force over random trees (pure Python, no model)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tree_gen import path_nodes, root_path, trees

from specdec.core.proposal import Proposal
from specdec.core.trees import (ancestor_mask, cut, first_branch, greedy_tree_accept, prune_tree,
                                tree_kids, tree_positions)


# ---- host-side structure ------------------------------------------------------------------
@given(trees())
def test_positions_and_mask_match_root_paths(tree):
    tokens, parents = tree
    depth, mask = tree_positions(parents), ancestor_mask(parents)
    for j in range(len(parents)):
        nodes = path_nodes(parents, j)
        assert depth[j] == len(nodes)
        assert [c for c in range(len(parents) + 1) if mask[j + 1][c]] == [0] + [i + 1 for i in nodes]
    assert mask[0] == [True] + [False] * len(parents)


def accept_oracle(tokens, parents, fix):
    """Brute force: a node is on the accepted path iff every node of its root path carries
    the target's token at its parent's row; the first (by index) deepest such node wins
    among siblings that tie, which is what walking first-matching children gives when
    sibling tokens are distinct."""
    ok = [all(tokens[i] == fix[parents[i] + 1] for i in path_nodes(parents, j)) for j in range(len(tokens))]
    best = max((j for j in range(len(tokens)) if ok[j]), key=lambda j: len(path_nodes(parents, j)),
               default=None)
    path = [] if best is None else path_nodes(parents, best)
    last = path[-1] + 1 if path else 0
    return path, [tokens[j] for j in path] + [fix[last]]


@given(trees(vocab=3), st.data())
def test_greedy_tree_accept_equals_brute_force(tree, data):
    tokens, parents = tree
    fix = data.draw(st.lists(st.integers(0, 2), min_size=len(tokens) + 1, max_size=len(tokens) + 1))
    path, emitted = greedy_tree_accept(tokens, parents, fix)
    # always: a valid root path whose end has no agreeing child
    assert all(tokens[j] == fix[parents[j] + 1] for j in path)
    assert path == path_nodes(parents, path[-1]) if path else True
    end = path[-1] if path else -1
    assert not any(p == end and tokens[j] == fix[end + 1] for j, p in enumerate(parents))
    assert emitted == [tokens[j] for j in path] + [fix[end + 1]]
    siblings = {}
    for j, p in enumerate(parents):
        siblings.setdefault(p, []).append(tokens[j])
    if all(len(v) == len(set(v)) for v in siblings.values()):  # distinct siblings: unique answer
        assert (path, emitted) == accept_oracle(tokens, parents, fix)


@given(trees(), st.integers(1, 5), st.integers(1, 10))
def test_prune_tree_keeps_closed_depth_limited_prefix(tree, max_depth, max_nodes):
    tokens, parents = tree
    p = prune_tree(Proposal(tokens, parents=parents), max_depth, max_nodes)
    assert len(p) <= max_nodes and p.depth <= max_depth
    # the kept nodes are the first max_nodes nodes within the depth (their parents come
    # earlier and are within it too), in order, with their root paths
    ok = [j for j in range(len(tokens)) if len(path_nodes(parents, j)) <= max_depth][:max_nodes]
    assert [p.path(j) for j in range(len(p))] == [root_path(tokens, parents, j) for j in ok]


def test_first_branch():
    assert first_branch(Proposal([1, 2, 3], parents=(-1, -1, 1))).tokens == (1,)


@pytest.mark.parametrize("parents", [[0], [-2], [-1, 1], [-1, 0, 3]])
def test_a_parent_that_is_not_an_earlier_node_is_refused_with_its_node(parents):
    bad = next(j for j, p in enumerate(parents) if not -1 <= p < j)
    with pytest.raises(ValueError, match=f"node {bad}: parent {parents[bad]} is not an earlier node"):
        tree_positions(parents)
    with pytest.raises(ValueError, match="topological order"):
        ancestor_mask(parents)


@given(trees(vocab=3))
def test_tree_kids_are_each_rows_children_in_order_without_repeated_tokens(tree):
    tokens, parents = tree
    kids = tree_kids(tokens, parents)
    assert len(kids) == len(tokens) + 1
    for row, got in enumerate(kids):
        want, seen = [], set()
        for j in range(len(tokens)):  # brute force: the row's children, first of each token
            if parents[j] == row - 1 and tokens[j] not in seen:
                want.append(j)
                seen.add(tokens[j])
        assert got == want


@given(trees(), st.integers(1, 5), st.integers(1, 10))
def test_cut_is_prune_tree_and_a_linear_cut_is_its_prefix(tree, max_depth, max_nodes):
    tokens, parents = tree
    p = Proposal(tokens, parents=parents)
    assert cut(p, max_depth, max_nodes) == prune_tree(p, max_depth, max_nodes)
    chain = Proposal(tokens)
    assert cut(chain, max_depth, max_nodes).tokens == tuple(tokens[: min(max_depth, max_nodes)])


@given(trees())
def test_first_branch_follows_each_nodes_first_child(tree):
    tokens, parents = tree
    path, node = [], -1
    while True:  # brute force: the lowest-index child of the current node
        child = next((j for j, p in enumerate(parents) if p == node), None)
        if child is None:
            break
        path.append(child)
        node = child
    branch = first_branch(Proposal(tokens, parents=parents))
    assert branch.tokens == tuple(tokens[j] for j in path) and branch.is_linear
