"""``specdec.drafters.suffix_tree``: the brute-force reference and the automaton's tree
agree, hold the linear draft, and place the most probable continuations best first,
against oracles over random histories (pure Python, no model)."""

import math

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.drafters.suffix import SuffixIndex
from specdec.drafters.suffix_match import suffix_proposal
from specdec.drafters.suffix_tree import index_tree, suffix_tree_proposal
from specdec.drafters.trie import best_path, children

from .test_trie import check_tree_shape, docs_st, eos_st, node_paths, tokens_st


def substring_count(docs, pat):
    n = len(pat)
    return sum(list(d[s : s + n]) == list(pat) for d in docs for s in range(len(d) - n + 1))


def suffix_index(history, context, cap):
    idx = SuffixIndex(10_000, cap)
    for doc in history:
        idx.extend(doc)
        idx.new_request()
    idx.extend(context)
    return idx


def oracle_source(history, context):
    """(docs, matched suffix) of the winning match, by brute force."""
    L = len(context)

    def longest(docs):
        return max((n for n in range(1, L + 1) for doc in docs for e in range(n - 1, len(doc) - 1)
                    if doc[e - n + 1 : e + 1] == context[L - n :]), default=0)

    live, hist = longest([context]), longest(history)
    docs, m = (history, hist) if hist > live else ([context], live)
    return docs, context[L - m :] if m else []


def path_prob(docs, pattern, path, cap):
    prob = 1.0
    for i, tok in enumerate(path):
        p = list(pattern) + list(path[:i])
        w = {c: min(substring_count(docs, p + [c]), cap) for c in range(4)}
        if not sum(w.values()):
            return 0.0  # nothing follows: not a candidate
        prob = prob * w[tok] / sum(w.values())
    return prob


@settings(max_examples=examples(200), deadline=None)
@given(docs_st, tokens_st, st.integers(1, 6), st.integers(1, 12), st.sampled_from([0.5, 1.0, 2.0]),
       eos_st, st.sampled_from([1, 2, 64]), st.booleans())
def test_suffix_tree_vs_reference_and_oracles(history, context, k, budget, alpha, eos, cap, linear_first):
    kw = dict(alpha=alpha, eos=eos, count_cap=cap)
    tree = suffix_tree_proposal(context, k, budget, history=history, linear_first=linear_first, **kw)
    idx = suffix_index(history, context, cap)
    assert index_tree(idx, k, budget, alpha, eos, linear_first) == tree  # automaton == reference
    docs, pattern = oracle_source(history, context)
    depth = min(k, max(1, math.ceil(alpha * len(pattern)))) if pattern else 0
    check_tree_shape(tree, budget, depth)
    linear = suffix_proposal(context, k, history=history, **kw)
    if linear_first:
        assert best_path(tree) == linear[:budget]
    else:
        assert best_path(tree) == linear[: len(best_path(tree))]
    for path in node_paths(tree):  # each root path occurs after the matched suffix
        assert substring_count(docs, pattern + list(path)) > 0
        assert not any(t in eos for t in path[:-1])
    probs = {q: path_prob(docs, pattern, q, cap) for q in node_paths(tree)}
    for node, kids in children(tree).items():  # siblings best first
        ps = [probs[node_paths(tree)[c]] for c in kids]
        assert ps == sorted(ps, reverse=True)
    if not linear_first and len(tree) == budget:  # best first: no left-out candidate beats a node
        frontier = [q + (c,) for q in [()] + list(probs) if len(q) < depth and not (q and q[-1] in eos)
                    for c in range(4) if q + (c,) not in probs]
        left = [path_prob(docs, pattern, f, cap) for f in frontier]
        assert max(left, default=0.0) <= min(probs.values()) + 1e-12
