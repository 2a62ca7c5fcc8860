"""Verification: which drafted tokens the target model keeps.

Contract of ``greedy_accept(draft, targets)``: ``targets[i]`` is the target's argmax after
seeing ``[last] + draft[:i]`` (one forward pass over the block gives all k+1 of them). The
accepted prefix is the longest run with ``draft[i] == targets[i]``; the step emits it plus
``targets[a]`` — the correction at the first mismatch, or the bonus token when all k
matched — so every step emits at least one token, and exactly the tokens plain greedy
decoding would have produced.

Contract of ``rejection_sample(draft, p, q, key)`` (temperature > 0): ``p[i]`` is the
target's processed distribution after ``[last] + draft[:i]``; ``q[i]`` the distribution the
drafter sampled ``draft[i]`` from, or ``None`` for a deterministic drafter (a point mass).
Draft token i is accepted with probability ``min(1, p_i(x)/q_i(x))`` (for a point mass:
``p_i(x)``); at the first rejection the step emits a sample of ``normalize(max(0, p_i -
q_i))`` (for a point mass: ``p_i`` with ``x`` removed); when all are accepted, a bonus
sample of ``p_k``. Each emitted token is then distributed exactly as under ``p`` (Leviathan
et al. 2023; Chen et al. 2023). It returns device arrays, one candidate per position, so
the engine resolves a step with one host sync (``resolve``).

Contract of ``tree_rejection_sample(p, children, key)`` (a token tree, temperature > 0,
deterministic drafts): ``p[r]`` is the target's processed distribution at block row r,
``children[r]`` the distinct tokens of row r's children in the order they are tried (best
first), ``-1`` padding. At each row the children are tried in turn (SpecInfer's recursive
rejection with point masses): child i is accepted with probability ``r_i(c_i)``, where
``r_i`` is ``p`` with children ``1..i-1`` removed and renormalised; when all are rejected
the row emits a sample of ``p`` with every child removed. P(emit c_i) = p(c_i) for every
child and p(x) for every other x, so a walk down the tree (``tree_resolve``) emits exactly
what plain sampling would. Every row is decided on the device from its own uniforms; the
host walks only the rows on the accepted path (one sync per step).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx


def greedy_accept(draft: Sequence[int], targets: Sequence[int]) -> tuple[int, list[int]]:
    """Returns (number of draft tokens accepted, tokens to emit).

    >>> greedy_accept([7, 8, 9], [7, 8, 4, 1])
    (2, [7, 8, 4])
    >>> greedy_accept([7, 8], [7, 8, 5])
    (2, [7, 8, 5])
    >>> greedy_accept([], [3])
    (0, [3])
    """
    if len(targets) != len(draft) + 1:
        raise ValueError(f"need len(draft)+1 targets, got {len(targets)} for {len(draft)} drafts")
    a = 0
    while a < len(draft) and draft[a] == targets[a]:
        a += 1
    return a, [*draft[:a], targets[a]]


def rejection_sample(
    draft: mx.array, p: mx.array, q: mx.array | None, key: mx.array
) -> tuple[mx.array, mx.array]:
    """Returns ``(accept, recovered)``: ``accept[i]`` (k,) whether draft token i passes its test,
    ``recovered[i]`` (k+1,) the token emitted if the first rejection is at i (``recovered[k]``: bonus)."""
    k = draft.shape[0]
    k_accept, k_recovered = mx.random.split(key)
    if k == 0:
        return mx.zeros((0,), mx.bool_), mx.random.categorical(mx.log(p), axis=-1, key=k_recovered)
    rows = mx.arange(k)
    p_x = p[rows, draft]
    if q is None:
        ratio = p_x
        residual = mx.where(mx.arange(p.shape[-1])[None] == draft[:, None], 0.0, p[:k])
    else:
        ratio = mx.minimum(p_x / q[rows, draft], 1.0)
        residual = mx.maximum(p[:k] - q, 0.0)
    accept = mx.random.uniform(shape=(k,), key=k_accept) < ratio
    # categorical normalises log-weights itself; rows never drawn from may be all zero.
    recovered = mx.random.categorical(mx.log(mx.concatenate([residual, p[k:]], axis=0)), axis=-1, key=k_recovered)
    return accept, recovered


def tree_rejection_sample(
    p: mx.array, children: mx.array, key: mx.array
) -> tuple[mx.array, mx.array]:
    """Returns ``(pick, recovered)``: ``pick[r]`` the slot of the child accepted at row r, or
    ``m`` (the slot count) when every child is rejected; ``recovered[r]`` the token emitted then.

    The acceptance of slot i is ``p(c_i) / rest_i`` with ``rest_i = left + sum_{j>=i}
    p(c_j)``, ``left`` the mass outside all children: computed this way the last child is
    accepted with probability exactly 1 when the children hold all the mass, so a row
    never has to sample an empty residual."""
    k_accept, k_recovered = mx.random.split(key)
    valid = children >= 0
    pc = mx.where(valid, mx.take_along_axis(p, mx.maximum(children, 0), axis=-1), 0.0)
    ids = mx.arange(p.shape[-1])[None]
    residual = p
    for i in range(children.shape[1]):
        residual = mx.where(ids == children[:, i : i + 1], 0.0, residual)
    left = residual.sum(axis=-1, keepdims=True)
    rest = left + mx.cumsum(pc, axis=-1, reverse=True)
    u = mx.random.uniform(shape=pc.shape, key=k_accept)
    accept = valid & (u * rest < pc)
    slots = mx.arange(children.shape[1])[None]
    pick = mx.min(mx.where(accept, slots, children.shape[1]), axis=-1)
    # categorical normalises log-weights itself; a row whose residual is empty never uses recovered
    recovered = mx.random.categorical(mx.log(residual), axis=-1, key=k_recovered)
    return pick, recovered


def tree_resolve(tokens: Sequence[int], kids: Sequence[Sequence[int]], pick: Sequence[int],
                recovered: Sequence[int]) -> tuple[list[int], list[int]]:
    """Host side of a sampled tree step: (accepted node indices in path order, emitted
    tokens). ``kids[r]`` lists row r's child nodes in slot order (row 0 is the root,
    row j + 1 follows node j).

    >>> tree_resolve([5, 6, 7], [[0, 1], [2], [], []], pick=[1, 1, 0, 0], recovered=[9, 8, 4, 3])
    ([1], [6, 4])
    """
    path, row = [], 0
    while pick[row] < len(kids[row]):
        path.append(kids[row][pick[row]])
        row = path[-1] + 1
    return path, [tokens[j] for j in path] + [recovered[row]]


def resolve(draft: Sequence[int], accept: Sequence[bool], recovered: Sequence[int]) -> tuple[int, list[int]]:
    """Host side of a step: accepted count and tokens to emit from per-position candidates.

    >>> resolve([4, 5, 6], [True, False, True], [9, 8, 7, 1])
    (1, [4, 8])
    """
    a = 0
    while a < len(draft) and accept[a]:
        a += 1
    return a, [*draft[:a], recovered[a]]
