"""EAGLE-2's dynamic token tree from an EAGLE-3 head (``EagleDrafter.propose_tree``).

Construction (``tree_draft``): the newly verified rows join the head's real cache as in
``Eagle3Head.draft``; then the tree grows level by level on scratch arrays: depth 1 is the
root's ``topk`` most likely children; at each depth the ``topk`` best nodes by cumulative
log-probability (the greedy node always among them, an EOS never) run through the head as
one batch, one row per node over its own keys (the real cache's prefix and its ancestors'
entries: each row is a plain causal sequence, so no mask, every row at the same rope
position), and each gives its ``topk`` most likely children. Every node made is a candidate;
the tree is the greedy chain first (``propose``'s draft), then the other candidates by
cumulative log-probability (ties: shallower, then the better sibling) up to ``budget`` nodes.
A child's score never exceeds its parent's, so the pick is ancestor-closed. One host sync.

Invariants: parents precede children, depth <= k, size <= budget, siblings best first, the
first-child path is the greedy chain, nothing below an EOS; the head's real cache gains the
fed rows only (the tree's entries are never written to it). ``accepted_path`` reads which
nodes a verify step accepted from the tokens it emitted. Tests: tests/eagle/test_tree.py.
Details: docs/eagle.md#token-trees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, cast

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask

from ..core.proposal import Proposal
from ..drafters.trie import make_proposal


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2's knob: ``topk`` children per expanded node and nodes expanded per depth."""

    topk: int = 4

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise ValueError(f"tree topk must be >= 1, got {self.topk}")


class _PathCache:
    """A KV cache stand-in for one head step of B nodes of one depth: row b attends to
    ``keys[b]`` (the prefix and b's ancestors) and itself; the step's own entries are kept
    aside (``new``) for the nodes' children, never written to the real cache."""

    def __init__(self, keys: mx.array, values: mx.array, offset: int):
        self.keys, self.values, self.offset = keys, values, offset
        self.new: tuple[mx.array, mx.array] | None = None

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.new = (keys, values)
        return (mx.concatenate([self.keys, keys], axis=2),
                mx.concatenate([self.values, values], axis=2))


@dataclass
class _Level:
    """One depth's candidates on the device: ``tokens``/``scores`` (B, topk), row b the
    children of frontier node b of the depth above; ``chosen`` (flat indices) the ones
    expanded next, greedy first."""

    tokens: mx.array
    scores: mx.array
    chosen: mx.array


def _children(head: Any, hidden: mx.array, topk: int) -> tuple[mx.array, mx.array]:
    """(B, topk) target ids and log-probs of each row's most likely next tokens, best first."""
    logp = nn.log_softmax(head.logits(hidden)[:, -1].astype(mx.float32), axis=-1)
    ids = mx.argsort(-logp, axis=-1)[:, :topk]
    return head.to_target(ids), mx.take_along_axis(logp, ids, axis=-1)


def _expand(tokens: mx.array, scores: mx.array, topk: int, eos: mx.array | None) -> mx.array:
    """Flat indices of the next frontier: the greedy candidate (index 0), then the best
    ``topk - 1`` others that are not EOS."""
    flat = scores.reshape(-1)
    if eos is not None:
        flat = mx.where(mx.any(tokens.reshape(-1, 1) == eos[None], axis=-1), -mx.inf, flat)
    flat = mx.concatenate([mx.array([mx.inf]), flat[1:]])
    return mx.argsort(-flat)[:min(topk, flat.shape[0])]


def _grow(head: Any, cache: Any, root: mx.array, k: int, topk: int,
          eos: mx.array | None) -> list[_Level]:
    """The candidate levels of depths 1..k, built on the device (no sync)."""
    tokens, scores = _children(head, root, topk)
    levels = [_Level(tokens, scores, _expand(tokens, scores, topk, eos))]
    n = cache.offset  # the fed rows: at least one (``tree_draft``)
    prefix_k, prefix_v = cache.keys[..., :n, :], cache.values[..., :n, :]
    front, score = tokens[0][levels[0].chosen], scores[0][levels[0].chosen]
    hidden = mx.broadcast_to(root, (front.shape[0], *root.shape[1:]))
    path: tuple[mx.array, mx.array] | None = None  # each frontier row's ancestors' K, V
    for d in range(1, k):
        b = front.shape[0]
        keys, values = _rows(prefix_k, b), _rows(prefix_v, b)
        if path is not None:
            keys, values = mx.concatenate([keys, path[0]], axis=2), mx.concatenate([values, path[1]], axis=2)
        scratch = _PathCache(keys, values, cache.offset + d - 1)
        out = head.step(front[:, None], hidden, None, scratch)
        tokens, lps = _children(head, out, topk)
        scores = score[:, None] + lps
        chosen = _expand(tokens, scores, topk, eos)
        levels.append(_Level(tokens, scores, chosen))
        row = chosen // tokens.shape[1]  # topk, or a smaller draft vocabulary
        assert scratch.new is not None  # the head's step wrote its entries
        new_k, new_v = scratch.new[0][row], scratch.new[1][row]
        path = (new_k, new_v) if path is None else (
            mx.concatenate([path[0][row], new_k], axis=2), mx.concatenate([path[1][row], new_v], axis=2))
        front, score, hidden = tokens.reshape(-1)[chosen], scores.reshape(-1)[chosen], out[row]
    return levels


def _rows(a: mx.array, b: int) -> mx.array:
    return mx.broadcast_to(a, (b, *a.shape[1:]))


@dataclass(frozen=True)
class _Node:
    token: int
    score: float
    depth: int
    parent: int  # candidate index, -1 = the root


def _candidates(levels: list[_Level]) -> tuple[list[_Node], list[int]]:
    """Every candidate on the host, level by level, and the greedy chain's indices."""
    nodes: list[_Node] = []
    front = [-1]  # candidate index of each frontier row (the root's one row)
    chain: list[int] = []
    for depth, lv in enumerate(levels, start=1):
        toks = cast("list[list[int]]", lv.tokens.tolist())
        scores = cast("list[list[float]]", lv.scores.tolist())
        chosen = cast("list[int]", lv.chosen.tolist())
        base = len(nodes)
        for r, (row_t, row_s) in enumerate(zip(toks, scores)):
            nodes += [_Node(int(t), float(s), depth, front[r]) for t, s in zip(row_t, row_s)]
        chain.append(base)  # the greedy node's greedy child: row 0, best first
        front = [base + c for c in chosen]
    return nodes, chain


def _pick(nodes: Sequence[_Node], chain: Sequence[int], budget: int,
         eos: frozenset = frozenset()) -> Proposal:
    """The tree of at most ``budget`` candidates: the greedy chain (to its first EOS), then
    the best by score, each only below a placed, non-EOS parent."""
    order: list[int] = []
    for c in chain:
        order.append(c)
        if nodes[c].token in eos:
            break
    order = order[:budget]
    placed = {c: i for i, c in enumerate(order)}
    rest = sorted((c for c in range(len(nodes)) if c not in placed),
                  key=lambda c: (-nodes[c].score, nodes[c].depth, c))
    for c in rest:
        if len(order) >= budget:
            break
        p = nodes[c].parent
        if p == -1 or (p in placed and nodes[p].token not in eos):
            placed[c] = len(order)
            order.append(c)
    return make_proposal([nodes[c].token for c in order],
                         [placed.get(nodes[c].parent, -1) for c in order])


def tree_draft(head: Any, cache: list, features: mx.array, tokens: mx.array, k: int,
               budget: int, shape: TreeShape = TreeShape(), eos: frozenset = frozenset()) -> Proposal:
    """Feed the verified rows (``features`` (1, n, 3Ht), ``tokens`` (1, n): as
    ``Eagle3Head.draft``) into ``cache`` and return the dynamic tree (module doc)."""
    if features.shape[1] != tokens.shape[1] or features.shape[1] < 1:
        raise ValueError(f"features {features.shape} and tokens {tokens.shape} must cover the "
                         "same n >= 1 positions.")
    if k < 1 or budget < 1:
        raise ValueError(f"a tree needs k >= 1 and budget >= 1 (got k={k}, budget={budget})")
    hidden = head.fuse(features)
    root = head.step(tokens, hidden, create_attention_mask(hidden, cache[0]), cache[0])[:, -1:]
    eos_ids = mx.array(sorted(eos)) if eos else None
    levels = _grow(head, cache[0], root, k, shape.topk, eos_ids)
    mx.eval([(lv.tokens, lv.scores, lv.chosen) for lv in levels])
    nodes, chain = _candidates(levels)
    return _pick(nodes, chain, budget, eos)


def accepted_path(tree: Proposal, after: Sequence[int]) -> list[int]:
    """The nodes a verify step accepted, root first, given the tokens it emitted (``after``):
    at each node the first child holding the next token, as verification tries them.

    >>> accepted_path(Proposal([5, 6, 7, 6], parents=(-1, -1, 1, 1)), [6, 6, 9])
    [1, 3]
    """
    kids: dict[int, list[int]] = {}
    for j, p in enumerate(tree.parent_ids):
        kids.setdefault(p, []).append(j)
    path: list[int] = []
    node = -1
    for t in after:
        node = next((c for c in kids.get(node, ()) if tree.tokens[c] == t), -2)
        if node == -2:
            break
        path.append(node)
    return path
