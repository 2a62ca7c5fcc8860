"""Verification: which drafted tokens the target model keeps.

Invariant: every step emits at least one token and each emitted token is what plain decoding
would give (greedy: the same token; sampling: the same distribution). ``greedy_accept`` keeps
the longest agreeing prefix plus the target's correction or bonus; ``rejection_sample``
accepts with min(1, p/q) and resamples the residual (Leviathan et al. 2023);
``tree_rejection_sample`` tries a row's children in turn (SpecInfer). Device arrays come
back for one host sync per step. Tests: tests/core/test_sampling.py, tests/core/test_verify.py.
The rules in full: docs/verify-and-rollback.md#verification-rules."""

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
