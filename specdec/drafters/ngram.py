"""Prompt-lookup (n-gram) drafting.

Contract: the draft is what followed the most recent earlier occurrence of the longest
suffix n-gram (n_max down to n_min), cut to ``k`` and after the first EOS; ``prompt_lookup``
states it purely, ``NgramIndex`` computes it incrementally (O(n_max - n_min + k) per
proposal), ``NgramDrafter`` wraps it. ``propose_tree`` merges every earlier match's
continuation best first (``all_match_continuations``); its best path starts with the linear
draft. Tests: tests/drafters/test_ngram.py, tests/drafters/test_trie.py,
tests/drafters/test_grammar.py. Details: docs/drafters.md#n-gram-prompt-lookup."""

from __future__ import annotations

from typing import Iterable, Sequence

from .base import EMPTY, Drafter, Proposal
from .trie import merge_paths

DEFAULT_MAX_MATCHES = 64  # continuations a tree proposal scans at most


def _cut_at_eos(draft: list[int], eos: Iterable[int]) -> list[int]:
    eos = set(eos)
    for i, t in enumerate(draft):
        if t in eos:
            return draft[: i + 1]  # an accepted EOS ends generation; nothing after it matters
    return draft


def prompt_lookup(
    tokens: Sequence[int], k: int, n_min: int = 1, n_max: int = 3, eos: Iterable[int] = ()
) -> list[int]:
    """Continuation of the most recent earlier match of the longest suffix n-gram.

    Worked example (k=3, n_min=1, n_max=2)::

        tokens = [5, 6, 7, 8, 5, 6, 9, 5, 6]
        suffix 2-gram (5, 6) occurs earlier ending at index 5 and at index 1;
        the most recent is index 5, followed by [9, 5, 6]        -> [9, 5, 6]

    With eos={9} the draft is cut after the EOS -> [9]. If no 2-gram matched, the 1-gram
    (6,) would be tried next. The suffix occurrence itself (ending at the last index) never
    counts, but a match may overlap it, which is what makes periodic text draft well.
    """
    L = len(tokens)
    if k <= 0:
        return []
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = list(tokens[L - n :])
        # earlier occurrences end at j <= L - 2 so that at least one token follows them
        for end in range(L - 2, n - 2, -1):
            if tokens[end] == suffix[-1] and list(tokens[end - n + 1 : end + 1]) == suffix:
                return _cut_at_eos(list(tokens[end + 1 : end + 1 + k]), eos)
    return []


def all_match_continuations(
    context: Sequence[int], n_min: int, n_max: int, k: int, eos: Iterable[int] = ()
) -> list[list[int]]:
    """Continuations of every distinct earlier match of a suffix n-gram, best first.

    Order: n from ``n_max`` down to ``n_min``; within one n, the most recent match first;
    an end position already listed for a longer n is skipped. Each continuation is cut to
    ``k`` tokens and after the first EOS. The first one is ``prompt_lookup``'s draft.

    Worked example (k=2, n_min=1, n_max=2)::

        context = [5, 6, 7, 5, 6, 9, 5, 6]     (positions 0..7)
        n=2: (5, 6) ends earlier at 4 and 1    -> [9, 5], [7, 5]
        n=1: (6,) ends at 4 and 1, both taken  -> nothing new
        -> [[9, 5], [7, 5]]
    """
    L = len(context)
    out: list[list[int]] = []
    used: set[int] = set()
    if k <= 0:
        return out
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = list(context[L - n :])
        for end in range(L - 2, n - 2, -1):
            if end not in used and list(context[end - n + 1 : end + 1]) == suffix:
                used.add(end)
                out.append(_cut_at_eos(list(context[end + 1 : end + 1 + k]), eos))
    return out


class NgramIndex:
    """Incremental index answering ``prompt_lookup`` queries in O(n_max - n_min + k).

    For each n it maps an n-gram to the ascending list of indices it ended at, but only
    n-grams that end at or before the second-to-last token are inserted, so a query with
    the current suffix finds the most recent *earlier* occurrence last in its list
    (``lookup``), and every earlier one before it (``continuations``). Appending a token
    costs O(n_max - n_min + 1) dict lookups and list appends.
    """

    def __init__(self, n_min: int = 1, n_max: int = 3):
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {n_min}, {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self._maps: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(n_min, n_max + 1)}

    def extend(self, new_tokens: Iterable[int]) -> None:
        toks = self.tokens
        for t in new_tokens:
            end = len(toks) - 1  # the n-grams ending here now have a follower: index them
            for n, table in self._maps.items():
                if end - n + 1 >= 0:
                    table.setdefault(tuple(toks[end - n + 1 : end + 1]), []).append(end)
            toks.append(t)

    def lookup(self, k: int, eos: Iterable[int] = ()) -> list[int]:
        toks, L = self.tokens, len(self.tokens)
        if k <= 0:
            return []
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            ends = self._maps[n].get(tuple(toks[L - n :]))
            if ends:
                return _cut_at_eos(toks[ends[-1] + 1 : ends[-1] + 1 + k], eos)
        return []

    def continuations(self, k: int, eos: Iterable[int] = (), max_matches: int = DEFAULT_MAX_MATCHES):
        """``all_match_continuations`` of the indexed tokens, lazily, at most ``max_matches``."""
        toks, L, used, given = self.tokens, len(self.tokens), set(), 0
        if k <= 0:
            return
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            for end in reversed(self._maps[n].get(tuple(toks[L - n :]), ())):
                if given >= max_matches:
                    return
                if end not in used:
                    used.add(end)
                    given += 1
                    yield _cut_at_eos(toks[end + 1 : end + 1 + k], eos)


class NgramDrafter(Drafter):
    """Prompt lookup over prompt + generated tokens (see ``base.Drafter``)."""

    name = "ngram"
    branches = True  # the continuations of distinct matches (one path when max_matches = 1)

    def __init__(self, n_min: int = 1, n_max: int = 3, eos: Iterable[int] = (),
                 max_matches: int = DEFAULT_MAX_MATCHES):
        if max_matches < 1:
            raise ValueError(f"max_matches must be >= 1, got {max_matches}")
        self.n_min, self.n_max, self.max_matches = n_min, n_max, max_matches
        self.branches = max_matches > 1
        self.eos = frozenset(eos)
        self._index = NgramIndex(n_min, n_max)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._index = NgramIndex(self.n_min, self.n_max)
        self._index.extend(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._index.extend(context[len(self._index.tokens) :])  # the context only grows
        return Proposal(self._index.lookup(k, self.eos))

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """The continuations of every distinct earlier match, merged into one trie
        (docs/drafters.md#n-gram-prompt-lookup)."""
        self._index.extend(context[len(self._index.tokens) :])
        if k <= 0 or budget <= 0:
            return EMPTY
        return merge_paths(self._index.continuations(k, self.eos, self.max_matches), budget, k)
