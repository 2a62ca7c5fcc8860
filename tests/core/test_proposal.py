"""``specdec.core.proposal.Proposal``: shape checks at construction, paths, depth,
linearity and truncation (pure Python, no model)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specdec.core.proposal import EMPTY, Proposal


def test_proposal_checks_its_shape():
    assert not Proposal() and len(Proposal([1, 2])) == 2
    with pytest.raises(ValueError, match="parent"):
        Proposal([1, 2], parents=(-1, 1))  # a node cannot hang below itself
    with pytest.raises(ValueError, match="parent indices"):
        Proposal([1, 2], parents=(-1,))
    tree = Proposal([1, 2, 3, 4], parents=(-1, 0, 0, 2))
    assert [tree.path(i) for i in range(4)] == [[1], [1, 2], [1, 3], [1, 3, 4]]
    assert tree.depth == 3 and not tree.is_linear
    assert Proposal([1, 2, 3], parents=(-1, 0, 1)).is_linear


def test_q_needs_one_row_per_token():
    Proposal([1, 2], q=mx.zeros((2, 5)))
    with pytest.raises(ValueError, match="one row per token: 2 tokens, q shape"):
        Proposal([1, 2], q=mx.zeros((3, 5)))
    with pytest.raises(ValueError, match="one row per token"):
        Proposal([1, 2], q=mx.zeros((2,)))


def test_truncated_cuts_tokens_and_q_rows_alike_and_refuses_trees():
    q = mx.arange(15, dtype=mx.float32).reshape(3, 5)
    p = Proposal([7, 8, 9], q=q)
    cut = p.truncated(2)
    assert cut.tokens == (7, 8) and cut.q.tolist() == q[:2].tolist()
    assert p.truncated(3) is p and p.truncated(9) is p
    assert Proposal([7, 8, 9], parents=(-1, 0, 1)).truncated(1).tokens == (7,)  # a chain is linear
    with pytest.raises(ValueError, match="truncating a tree proposal"):
        Proposal([7, 8], parents=(-1, -1)).truncated(1)


def test_a_linear_proposal_paths_are_prefixes_and_tokens_become_ints():
    p = Proposal(mx.array([4, 5, 6]).tolist())
    assert p.tokens == (4, 5, 6) and all(type(t) is int for t in p.tokens)
    assert p.is_linear and p.depth == 3 and [p.path(i) for i in range(3)] == [[4], [4, 5], [4, 5, 6]]
    assert not EMPTY and EMPTY.depth == 0 and EMPTY.is_linear
    assert Proposal([1, 2], parents=[-1, 0]) == Proposal([1, 2], parents=(-1, 0))
