"""Tree proposals: trie merge, ngram and suffix trees, and the wrappers' forwarding,
against brute-force oracles (pure Python, no model)."""

import numpy as np
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.drafters import Drafter, NgramDrafter, Proposal, prompt_lookup
from specdec.policy.adaptive import AdaptiveK
from specdec.drafters.chain import ChainDrafter
from specdec.policy.gate import CostGate
from specdec.drafters.ngram import all_match_continuations
from specdec.drafters.suffix import SuffixDrafter
from specdec.drafters.suffix_tree import suffix_tree_proposal
from specdec.drafters.trie import (best_path, children, merge_paths, merge_trees, root_paths,
                                   shared_nodes, walk)

tok_st = st.integers(0, 3)  # a small alphabet: many shared prefixes and repeats
paths_st = st.lists(st.lists(tok_st, max_size=6), max_size=6)
tokens_st = st.lists(tok_st, max_size=40)
docs_st = st.lists(st.lists(tok_st, max_size=15), max_size=3)
eos_st = st.sets(tok_st, max_size=1)


# ---- oracles ----

def oracle_insert(paths, budget):
    """Root paths of the trie, in creation order: each prefix of each path in turn, new
    ones only while fewer than ``budget`` exist; the first that does not fit ends it."""
    made = []
    for path in paths:
        for i in range(1, len(path) + 1):
            if tuple(path[:i]) in made:
                continue
            if len(made) >= budget:
                return made
            made.append(tuple(path[:i]))
    return made


def node_paths(p):
    return [tuple(p.path(i)) for i in range(len(p))]


def check_tree_shape(p, budget, depth):
    """Budget, depth, distinct siblings, and parents=None exactly for chains."""
    assert len(p) <= budget and p.depth <= depth
    for kids in children(p).values():
        toks = [p.tokens[c] for c in kids]
        assert len(toks) == len(set(toks)), "two siblings share a token"
    chain = all(q == i - 1 for i, q in enumerate(p.parents or range(-1, len(p) - 1)))
    assert (p.parents is None) == chain
    assert p.q is None


def random_tree(paths, budget=12, depth=6):
    return merge_paths(paths, budget, depth)


# ---- trie ----

def test_docstring_examples():
    p = merge_paths([[1, 2, 3, 4], [1, 2, 3], [1, 5], [6, 7, 8]], budget=5, max_depth=3)
    assert p.tokens == (1, 2, 3, 5, 6) and p.parents == (-1, 0, 1, 0, -1)
    assert best_path(p) == [1, 2, 3]
    a, b = Proposal([1, 2]), Proposal([1, 3, 4], parents=(-1, 0, -1))
    m = merge_trees([a, b], 4)
    assert m.tokens == (1, 2, 3, 4) and m.parents == (-1, 0, 0, -1)
    assert merge_trees([a, b], 3).tokens == (1, 2, 3)
    assert all_match_continuations([5, 6, 7, 5, 6, 9, 5, 6], 1, 2, 2) == [[9, 5], [7, 5]]
    s = suffix_tree_proposal([1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2], 4, 5, alpha=2)
    assert s.tokens == (3, 1, 2, 4, 4) and s.parents == (-1, 0, 1, 2, -1)


@settings(max_examples=examples(300), deadline=None)
@given(paths_st, st.integers(0, 12), st.integers(0, 5))
def test_merge_paths_vs_oracle(paths, budget, depth):
    p = merge_paths(paths, budget, depth)
    cut = [path[:depth] for path in paths]
    # same nodes, created in the same order: siblings (and everything) best first
    assert node_paths(p) == oracle_insert(cut, budget)
    check_tree_shape(p, budget, depth)
    nodes = set(node_paths(p))
    for path in cut:  # every path, cut to what fits, is a root path; a cut ends the merge
        fit = [i for i in range(len(path) + 1) if all(tuple(path[:j]) in nodes for j in range(1, i + 1))]
        if max(fit) < len(path):
            assert len(p) == budget
            break
    # the best path starts with the first path (a later path may extend it)
    first = next((c for c in cut if c), [])[:budget]
    assert best_path(p)[: len(first)] == first
    for m in range(len(p) + 1):  # prefix closed: any first m nodes are a tree
        assert all(q < m for q in (p.parents or range(-1, len(p) - 1))[:m])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(paths_st, max_size=4), st.integers(0, 14))
def test_merge_trees_vs_oracle(tree_paths, budget):
    trees = [random_tree(ps) for ps in tree_paths]
    m = merge_trees(trees, budget)
    assert node_paths(m) == oracle_insert([path for t in trees for path in node_paths(t)], budget)
    check_tree_shape(m, budget, 6)
    first = next((t for t in trees if t), Proposal())
    if len(first) <= budget:
        assert best_path(m)[: len(best_path(first))] == best_path(first)
        assert shared_nodes(first, m) == len(first)


@settings(max_examples=examples(200), deadline=None)
@given(paths_st, st.lists(tok_st, max_size=8))
def test_walk_and_shared_nodes_vs_brute_force(paths, truth):
    p = random_tree(paths)
    assert walk(p, truth) == max([len(q) for q in node_paths(p) if list(q) == truth[: len(q)]], default=0)
    other = random_tree(paths[::-1], budget=7)
    assert shared_nodes(p, other) == len(set(node_paths(p)) & set(node_paths(other)))
    assert {tuple(r) for r in root_paths(p)} == {q for q in node_paths(p)
                                                 if not any(r[:-1] == q for r in node_paths(p))}


# ---- ngram ----

def oracle_matches(context, n_min, n_max):
    """Earlier ends of a suffix n-gram match, each with the longest n that matches there,
    ordered longest n first, then most recent first."""
    L, found = len(context), []
    for e in range(L - 1):
        ns = [n for n in range(n_min, n_max + 1)
              if n <= e + 1 and n < L and context[e - n + 1 : e + 1] == context[L - n :]]
        if ns:
            found.append((max(ns), e))
    return [e for _, e in sorted(found, key=lambda x: (-x[0], -x[1]))]


@settings(max_examples=examples(300), deadline=None)
@given(tokens_st, st.integers(0, 6), st.integers(1, 3), st.integers(0, 2), eos_st)
def test_all_match_continuations_vs_oracle(context, k, n_min, extra, eos):
    n_max = n_min + extra
    got = all_match_continuations(context, n_min, n_max, k, eos)
    want = []
    for e in oracle_matches(context, n_min, n_max) if k > 0 else []:
        cont = context[e + 1 : e + 1 + k]
        cut = next((i + 1 for i, t in enumerate(cont) if t in eos), len(cont))
        want.append(cont[:cut])
    assert got == want
    assert (got[0] if got else []) == prompt_lookup(context, k, n_min, n_max, eos)


@settings(max_examples=examples(200), deadline=None)
@given(tokens_st, st.lists(tokens_st, max_size=3), st.integers(1, 6), st.integers(1, 12),
       st.integers(1, 2), st.integers(0, 1), eos_st, st.sampled_from([2, 64]))
def test_ngram_tree_holds_linear_and_only_match_continuations(prompt, chunks, k, budget, n_min,
                                                               extra, eos, max_matches):
    n_max = n_min + extra
    d = NgramDrafter(n_min, n_max, eos=eos, max_matches=max_matches)
    d.begin(prompt)
    context = list(prompt)
    for chunk in [[]] + chunks:  # the context grows between proposals
        context += chunk
        tree = d.propose_tree(context, k, budget)
        conts = all_match_continuations(context, n_min, n_max, k, eos)
        assert tree == merge_paths(conts[:max_matches], budget, k)
        check_tree_shape(tree, budget, k)
        linear = d.propose(context, min(k, budget)).tokens
        assert tuple(best_path(tree))[: len(linear)] == linear  # the tree holds the linear draft
        assert linear == tuple(prompt_lookup(context, min(k, budget), n_min, n_max, eos))
        for path in root_paths(tree):  # every root path continues some earlier match
            assert any(context[e + 1 : e + 1 + len(path)] == path
                       for e in oracle_matches(context, n_min, n_max))
        assert len(root_paths(tree)) <= max_matches


# ---- suffix drafter (the tree itself: tests/drafters/test_suffix_tree.py) ----

def test_suffix_drafter_tree_follows_the_growing_context():
    d = SuffixDrafter(alpha=2.0)
    ctx = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]
    d.begin(ctx[:5])
    assert d.propose_tree(ctx[:5], 4, 8) == suffix_tree_proposal(ctx[:5], 4, 8, alpha=2.0)
    tree = d.propose_tree(ctx, 4, 8)
    assert tree == suffix_tree_proposal(ctx, 4, 8, alpha=2.0)
    assert best_path(tree) == list(d.propose(ctx, 4).tokens) and not tree.is_linear


# ---- wrappers ----

class TreeFixed(Drafter):
    """Proposes a fixed tree (cut to the budget); records what it is told."""

    branches = True

    def __init__(self, name, tree):
        self.name, self.tree, self.seen = name, tree, []

    def propose(self, context, k):
        return Proposal(best_path(self.tree)[:k])

    def propose_tree(self, context, k, budget):
        if self.tree.q is not None:
            return self.tree
        return merge_paths(root_paths(self.tree), budget, k)

    def observe(self, n):
        self.seen.append(n)


def test_default_propose_tree_is_the_linear_proposal_within_the_budget():
    d = NgramDrafter(1, 2)
    ctx = [5, 6, 7, 5, 6, 9, 5, 6]
    d.begin(ctx)
    assert Drafter.propose_tree(d, ctx, 4, 2) == d.propose(ctx, 2) == Proposal([9, 5])


def test_chain_merges_trees_and_tells_each_member_its_own_accepted_tokens():
    a = TreeFixed("a", merge_paths([[1, 2], [1, 3]], 8, 4))
    b = TreeFixed("b", merge_paths([[1, 3, 5], [4]], 8, 4))
    empty = TreeFixed("e", Proposal())
    chain = ChainDrafter([empty, a, b])
    tree = chain.propose_tree([0], 4, 8)
    assert tree == merge_trees([a.tree, b.tree], 8)
    assert best_path(tree) == [1, 2]
    chain.observe(3)  # the target took 1 3 5, then emitted 7
    assert a.seen == b.seen == []  # not yet known which path it was
    chain.propose_tree([0, 1, 3, 5, 7], 4, 8)
    assert (a.seen, b.seen, empty.seen) == ([2], [3], [])
    assert chain.stats["a"] == {"won": 2, "drafted": 6, "accepted": 2}
    assert chain.stats["b"] == {"won": 0, "drafted": 8, "accepted": 3}
    small = ChainDrafter([a, b]).propose_tree([0], 4, 4)
    assert small == merge_trees([a.tree, b.tree], 4) and len(small) == 4


def test_chain_sends_a_sampled_tree_alone_or_leaves_it_out():
    q = np.zeros((2, 5))
    sampled = TreeFixed("s", Proposal([1, 2], q=q))
    a = TreeFixed("a", merge_paths([[3], [4]], 8, 4))
    first = ChainDrafter([sampled, a])
    assert first.propose_tree([0], 4, 8) is sampled.tree
    later = ChainDrafter([a, sampled])
    assert later.propose_tree([0], 4, 8) == a.tree
    later.observe(1)
    later.propose([0, 3, 9], 4)
    assert a.seen == [1] and sampled.seen == []


def test_gate_forwards_trees_and_rates_them_by_depth():
    bushy = merge_paths([[1, 2], [3, 4], [5, 6], [7, 8]], 8, 2)  # 8 nodes, depth 2
    cost = {L: 1.0 + 0.12 * (L - 1) for L in range(1, 6)}
    g = CostGate(TreeFixed("t", bushy), cost, k_max=4)
    g.begin([0])
    assert not g.propose_tree([0], 4, 8)  # paused until a shadow guess comes true
    g.watch([0, 1])
    for _ in range(6):  # the whole depth accepted: 100 %, though only 2 of 8 nodes
        assert g.propose_tree([0], 4, 8) == bushy
        g.observe(2)
    assert not g.paused
    for _ in range(6):
        if g.propose_tree([0], 4, 8):
            g.observe(0)
    assert g.paused and not g.propose_tree([0], 4, 8)


def test_adaptive_caps_the_tree_depth_at_its_k():
    deep = merge_paths([[1, 2, 3, 4], [5, 6, 7, 8]], 8, 4)
    cost = {L: 1.0 + 0.1 * (L - 1) for L in range(1, 6)}  # k* = 2 at the prior 0.5
    ad = AdaptiveK(TreeFixed("t", deep), cost, k_max=4)
    tree = ad.propose_tree([0], 4, 8)
    kk = ad.chosen[-1]
    assert 0 < kk < 4 and tree == merge_paths([[1, 2, 3, 4], [5, 6, 7, 8]], 8, kk)
    ad.observe(kk)
    acc = ad.acceptance()  # slots up to kk saw a hit; the rest lean on slot kk untested
    assert all(a > 0.5 for a in acc[:kk]) and acc[kk:] == [acc[kk - 1]] * (4 - kk)
