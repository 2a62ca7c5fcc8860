"""Tree proposals of the suffix drafter: its most likely continuations, best first.

Contract (``suffix_tree_proposal`` by brute force; ``index_tree`` over a ``SuffixIndex``):
match and depth as the linear drafter; a path's probability is the product of its
followers' capped-count shares (SuffixDecoding's estimate); with ``linear_first`` the
linear draft is placed first, then the most probable candidates up to ``budget``. Siblings
best first, nodes in the order placed. Tests: tests/drafters/test_suffix_tree.py,
tests/drafters/test_trie.py.
Details: docs/trees.md#suffix-trees."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable, Hashable, Iterable, Sequence

from .base import EMPTY, Proposal
from .suffix_match import DEFAULT_ALPHA, DEFAULT_COUNT_CAP, draft_length, match_source, occurrences
from .trie import make_proposal

# followers(key) -> [(token, weight, linear sort key, child key)] of the real followers
Followers = Callable[[Hashable], list[tuple[int, int, tuple, Hashable]]]


def best_first_tree(followers: Followers, root: Hashable, depth: int, budget: int,
                    eos: Iterable[int] = (), linear_first: bool = True) -> Proposal:
    """Expand the most probable continuations below ``root`` (docs/trees.md#suffix-trees, steps 2-3)."""
    if depth <= 0 or budget <= 0:
        return EMPTY
    eos = frozenset(eos)
    tokens: list[int] = []
    parents: list[int] = []
    placed: set[tuple[int, int]] = set()  # (parent, token) of every node
    heap: list[tuple] = []  # candidates: (-prob, depth, seq, parent node, token, key)
    seq = itertools.count()  # push order: the better sibling first on equal probability

    def offer(node: int, key: Hashable, prob: float, d: int) -> list:
        """Push the followers of a node at depth ``d`` as candidates, best sibling first."""
        if d >= depth or (node >= 0 and tokens[node] in eos):
            return []
        fl = sorted(followers(key), key=lambda f: f[2], reverse=True)
        total = sum(f[1] for f in fl)
        for tok, w, _, ck in fl:
            heapq.heappush(heap, (-(prob * w / total), d + 1, next(seq), node, tok, ck))
        return fl

    def place(parent: int, tok: int, key: Hashable, prob: float, d: int) -> list:
        tokens.append(tok)
        parents.append(parent)
        placed.add((parent, tok))
        return offer(len(tokens) - 1, key, prob, d)

    fl = offer(-1, root, 1.0, 0)
    if linear_first:  # the best sibling at every step: the linear continuation
        node, prob, total = -1, 1.0, sum(f[1] for f in fl)
        while fl and len(tokens) < budget:
            tok, w, _, ck = fl[0]
            prob = prob * w / total
            fl = place(node, tok, ck, prob, len(tokens) + 1)
            node, total = len(tokens) - 1, sum(f[1] for f in fl)
    while heap and len(tokens) < budget:
        negp, d, _, parent, tok, ck = heapq.heappop(heap)
        if (parent, tok) not in placed:  # linear nodes were placed already
            place(parent, tok, ck, -negp, d)
    return make_proposal(tokens, parents)


def automaton_followers(automaton) -> Followers:
    """Followers of an automaton state, keyed as ``SuffixAutomaton.continuation`` picks."""
    nxt, count, first = automaton.next, automaton.count, automaton.first

    def followers(state):
        return [(tok, count[t], (count[t], first[t]), t) for tok, t in nxt[state].items() if tok >= 0]

    return followers


def docs_followers(docs: Sequence[Sequence[int]], count_cap: int) -> Followers:
    """Brute-force followers of a pattern in ``docs`` (the reference for the automaton)."""

    def followers(pattern: Hashable) -> list[tuple[int, int, tuple, Hashable]]:
        if not isinstance(pattern, tuple):  # this one's states are the patterns themselves
            raise TypeError(f"a docs_followers state is a tuple of token ids, got {pattern!r}")
        follow: dict[int, list] = {}  # token -> [count, first (doc, end) of pattern + token]
        for d, e in occurrences(docs, pattern):
            entry = follow.setdefault(docs[d][e + 1], [0, (d, e + 1)])
            entry[0] += 1
        return [(t, min(c, count_cap), (min(c, count_cap), f), pattern + (t,))
                for t, (c, f) in follow.items()]

    return followers


def suffix_tree_proposal(
    context: Sequence[int], k: int, budget: int, *, history: Sequence[Sequence[int]] = (),
    alpha: float = DEFAULT_ALPHA, eos: Iterable[int] = (), count_cap: int = DEFAULT_COUNT_CAP,
    linear_first: bool = True,
) -> Proposal:
    """The tree the module contract specifies, by brute force (the reference).

    Worked example (the ``suffix`` module's context, k=4, alpha=2)::

        context = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]; the match is [1, 2] (length 2)
        [1, 2] is followed by 3 (twice) and 4 (once): probabilities 2/3 and 1/3
        linear draft [3, 1, 2, 4] (probability 2/3 x 1 x 1 x 1/2 = 1/3 at its end)

    budget 5 adds the best other candidate, [4] (1/3; [3, 1, 2, 3] also has 1/3 but is
    deeper): tokens (3, 1, 2, 4, 4), parents (-1, 0, 1, 2, -1). Its best path is the
    linear draft.
    """
    context = list(context)
    docs, m = match_source(context, history)
    depth = draft_length(m, k, alpha)
    root = tuple(context[len(context) - m :])
    return best_first_tree(docs_followers(docs, count_cap), root, depth, budget, eos, linear_first)


def index_tree(index: Any, k: int, budget: int, alpha: float = DEFAULT_ALPHA,
               eos: Iterable[int] = (), linear_first: bool = True) -> Proposal:
    """``suffix_tree_proposal`` over an index's automata (``SuffixIndex.lookup``'s tree)."""
    m, automaton, state = index.match()
    depth = draft_length(m, k, alpha)
    return best_first_tree(automaton_followers(automaton), state, depth, budget, eos, linear_first)
