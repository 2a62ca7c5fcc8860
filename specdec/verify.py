"""Verification: which drafted tokens the target model keeps.

Contract of ``greedy_accept(draft, targets)``: ``targets[i]`` is the target's argmax after
seeing ``[last] + draft[:i]`` (one forward pass over the block gives all k+1 of them). The
accepted prefix is the longest run with ``draft[i] == targets[i]``; the step emits it plus
``targets[a]`` — the correction at the first mismatch, or the bonus token when all k
matched — so every step emits at least one token, and exactly the tokens plain greedy
decoding would have produced.

(Rejection sampling for temperature > 0 lives beside it once sampling lands.)
"""

from __future__ import annotations

from typing import Sequence


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
