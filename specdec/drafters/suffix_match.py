"""Suffix matching as pure functions over token lists: where the current context's suffix
occurs in the documents (the request and earlier ones), what followed it most often, and
how long a draft that match earns.

Contract: ``occurrences(docs, pattern)`` lists every (doc, end) where ``pattern`` ends;
``longest_history_match`` / ``longest_suffix_match`` find the longest suffix of the context
that occurred before; ``most_frequent_continuation`` counts what followed it;
``draft_length(m, k, alpha)`` caps a draft by the match length; ``suffix_proposal`` puts
them together (the reference the automata in ``suffix`` are tested against).
Tests: tests/drafters/test_suffix_match.py, tests/drafters/test_suffix.py.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


DEFAULT_COUNT_CAP = 64
DEFAULT_ALPHA = 1.0


def draft_length(match_len: int, k: int, alpha: float = DEFAULT_ALPHA) -> int:
    """Tokens a match of ``match_len`` may draft: ``min(k, max(1, ceil(alpha * m)))``, 0 if
    there is no match or ``k <= 0``."""
    if match_len <= 0 or k <= 0:
        return 0
    return min(k, max(1, math.ceil(alpha * match_len)))


def occurrences(docs: Sequence[Sequence[int]], pattern: Sequence[int]) -> list[tuple[int, int]]:
    """(doc, end) of every occurrence of ``pattern`` that has a token after it in its doc,
    in (doc, end) order."""
    m, pat = len(pattern), list(pattern)
    return [
        (d, e)
        for d, doc in enumerate(docs)
        for e in range(m - 1, len(doc) - 1)
        if list(doc[e - m + 1 : e + 1]) == pat
    ]


def longest_history_match(
    docs: Sequence[Sequence[int]], context: Sequence[int]
) -> tuple[int, list[tuple[int, int]]]:
    """Longest suffix of ``context`` occurring inside one of ``docs`` with a follower there.

    Returns ``(length, [(doc, end), ...])``, or ``(0, [])``. Example: docs [[1, 2], [3, 4]]
    and context [2, 3] give (1, [(1, 0)]): [2, 3] spans the boundary, so it does not count.
    """
    best: tuple[int, list[tuple[int, int]]] = (0, [])
    for m in range(1, len(context) + 1):
        hits = occurrences(docs, context[len(context) - m :])
        if not hits:
            break  # every longer suffix contains this one, so none of them occurs either
        best = (m, hits)
    return best


def longest_suffix_match(tokens: Sequence[int]) -> tuple[int, list[int]]:
    """Longest suffix of ``tokens`` that also ends earlier: ``(length, ascending ends)``.

    Worked example (positions 0..10)::

        tokens = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]
        [4, 1, 2] never occurred before; [1, 2] ends earlier at 1, 4 and 7  -> (2, [1, 4, 7])

    An earlier occurrence is one with a token after it, so this is the history match with
    the context as the only document.
    """
    m, hits = longest_history_match([tokens], tokens)
    return m, [e for _, e in hits]


def most_frequent_continuation(
    docs: Sequence[Sequence[int]],
    pattern: Sequence[int],
    n: int,
    eos: Iterable[int] = (),
    count_cap: int = DEFAULT_COUNT_CAP,
) -> list[int]:
    """Follow the most frequent next token after ``pattern``, ``n`` times at most.

    Worked example, continuing ``longest_suffix_match``'s (docs = [tokens], pattern [1, 2])::

        [1, 2] is followed by 3 (twice, first at 2) and 4 (once)        -> 3
        [1, 2, 3] by 1, 1                                                -> 1
        [1, 2, 3, 1] by 2, 2                                             -> 2
        [1, 2, 3, 1, 2] by 3 (ending at 5) and 4 (at 8): a count tie,
        the later first occurrence wins                                  -> 4

    so n=2 gives [3, 1], n=4 gives [3, 1, 2, 4], and eos={1} gives [3, 1]. Note the
    contrast with n-gram lookup, which would follow the most recent [1, 2] and draft 4.
    """
    eos, pat = set(eos), list(pattern)
    out: list[int] = []
    while len(out) < n:
        follow: dict[int, list] = {}  # token -> [count, first (doc, end) of pattern + token]
        for d, e in occurrences(docs, pat):
            entry = follow.setdefault(docs[d][e + 1], [0, (d, e + 1)])
            entry[0] += 1
        if not follow:
            break
        tok = max(follow, key=lambda t: (min(follow[t][0], count_cap), follow[t][1]))
        out.append(tok)
        pat.append(tok)
        if tok in eos:
            break  # an accepted EOS ends generation; nothing after it matters
    return out


def match_source(context: list[int], history: Sequence[Sequence[int]]) -> tuple[list[list[int]], int]:
    """(documents to draft from, match length): the history wins only with a strictly
    longer match than the live context's own suffix match (the reference rule)."""
    live_len, _ = longest_suffix_match(context)
    hist_len, _ = longest_history_match(history, context)
    if hist_len > live_len:
        return [list(d) for d in history], hist_len
    return [context], live_len


def suffix_proposal(
    context: Sequence[int],
    k: int,
    *,
    history: Sequence[Sequence[int]] = (),
    alpha: float = DEFAULT_ALPHA,
    eos: Iterable[int] = (),
    count_cap: int = DEFAULT_COUNT_CAP,
) -> list[int]:
    """The draft the module contract specifies, by brute force (the reference).

    With the context of the worked examples and k=4: alpha=1 gives [3, 1] (match length
    2), alpha=2 gives [3, 1, 2, 4]. With history=[[7, 4, 1, 2, 5, 0]] the history match
    [4, 1, 2] (length 3) beats the live one and the draft is [5, 0]: the document ends there.
    """
    context = list(context)
    docs, m = match_source(context, history)
    n = draft_length(m, k, alpha)
    if n == 0:
        return []
    return most_frequent_continuation(docs, context[len(context) - m :], n, eos, count_cap)
