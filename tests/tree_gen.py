"""Random token trees for hypothesis tests, and their root paths by brute force
(shared by tests/core/test_trees.py and tests/decode/test_tree_attention.py)."""

from __future__ import annotations

from conftest import TINY_VOCAB
from hypothesis import strategies as st


@st.composite
def trees(draw, max_nodes=10, vocab=TINY_VOCAB):
    n = draw(st.integers(1, max_nodes))
    # half the nodes extend the previous one, so deep branches (past gemma's window) occur
    parents = [draw(st.just(j - 1) | st.integers(-1, j - 1)) for j in range(n)]
    tokens = [draw(st.integers(0, vocab - 1)) for _ in range(n)]
    return tokens, parents


def root_path(tokens, parents, node):
    out = []
    while node >= 0:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


def path_nodes(parents, node):
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]
