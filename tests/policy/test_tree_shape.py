"""The tree-size cost model against brute force: which nodes lie on the emitted path,
and the budget that maximises expected tokens per unit of verify cost."""

import pytest
from conftest import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.drafters.base import Proposal
from specdec.drafters.trie import walk
from specdec.core.trees import prune_tree
from specdec.policy.tree_shape import (TreeShaper, best_budget, best_cut, chain_length, cost_at, node_hits,
                                node_slots)


@st.composite
def trees(draw, max_nodes=10):
    n = draw(st.integers(0, max_nodes))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    tokens = [draw(st.integers(0, 2)) for _ in range(n)]
    return tokens, parents


@settings(max_examples=examples(300))
@given(trees(), st.lists(st.integers(0, 2), max_size=6))
def test_node_hits_against_each_nodes_root_path(tree, emitted):
    tokens, parents = tree
    prop = Proposal(tokens, parents=parents)
    got = node_hits(tokens, parents, emitted)
    for i, hit in enumerate(got):
        path = prop.path(i)
        m = min(len(path), len(emitted))
        if path[:m] != list(emitted[:m]):
            assert hit is False
        elif len(path) <= len(emitted):
            assert hit is True
        else:
            assert hit is None


@settings(max_examples=examples(300))
@given(trees(), st.lists(st.integers(0, 2), max_size=6))
def test_best_cut_is_the_fewest_leading_nodes_that_accept_as_much(tree, emitted):
    tokens, parents = tree
    assume(len(set(zip(parents, tokens))) == len(tokens))  # a drafter's siblings differ
    prop = Proposal(tokens, parents=parents)
    whole = walk(prop, emitted)
    fewest = next(n for n in range(len(tokens) + 1)
                  if walk(prune_tree(prop, len(tokens), n), emitted) == whole)
    assert best_cut(tokens, parents, emitted) == fewest


@settings(max_examples=examples(200))
@given(st.lists(st.floats(0, 1), max_size=12), st.lists(st.floats(0, 0.5), min_size=1, max_size=14),
       st.floats(1.0, 2.0), st.integers(0, 12))
def test_best_budget_is_the_brute_force_argmax(rates, steps, overhead, chain):
    """Linear cost up to the chain's length, the (dearer) tree cost past it."""
    cost = {1: 1.0}
    for i, s in enumerate(steps):  # a rising curve with arbitrary slopes
        cost[i + 2] = cost[i + 1] + s
    tree = {L: cost_at(cost, L) * overhead for L in range(2, len(rates) + 3)}

    def c(n: int) -> float:
        return cost_at(cost if n <= chain else tree, n + 1)

    value = [(1 + sum(rates[:n])) / c(n) for n in range(len(rates) + 1)]
    n = best_budget(rates, cost, tree, chain)
    assert value[n] == pytest.approx(max(value))
    assert all(v < value[n] + 1e-9 for v in value[:n])  # the smallest best N


@settings(max_examples=examples(150))
@given(st.lists(st.tuples(trees(max_nodes=8), st.lists(st.integers(0, 2), max_size=6)), max_size=6),
       trees(max_nodes=8))
def test_shaper_rates_are_per_slot_conditional_frequencies(steps, probe):
    """Brute force: a node's slot is (its depth, how many earlier nodes share its parent,
    whether no other node does);
    c(slot) counts the nodes of that slot whose parent lies on the emitted path and whose
    own fate is known; a node's rate is the product of c over its root path."""
    w, prior, max_nodes = 2.0, 0.3, 8
    shaper = TreeShaper({1: 1.0, 2: 1.5}, max_nodes, prior=prior, weight=w)
    hits: dict = {}
    seen: dict = {}
    for (tokens, parents), emitted in steps:
        shaper.update(tokens, parents, emitted)
        prop = Proposal(tokens, parents=parents)
        for i, p in enumerate(parents):
            slot = (len(prop.path(i)), sum(q == p for q in parents[:i]), parents.count(p) == 1)
            on = [prop.path(j) == list(emitted[: len(prop.path(j))]) for j in range(len(tokens))]
            known = len(prop.path(i)) <= len(emitted)
            if (p < 0 or on[p]) and known:
                seen[slot] = seen.get(slot, 0) + 1
                hits[slot] = hits.get(slot, 0) + on[i]

    def c(slot):
        p = (prior if slot[0] == 1 else (slot[0] - 1) / slot[0]) / (slot[1] + 1)
        return (hits.get(slot, 0) + w * p) / (seen.get(slot, 0) + w)

    _, parents = probe
    slots = node_slots(parents, len(parents))
    expect = []
    for i in range(len(parents)):
        a = 1.0
        for j in range(i + 1):
            if _is_ancestor(parents, j, i):  # j on i's root path, i itself included
                a *= c(slots[j])
        expect.append(a)
    assert shaper.rates(parents) == pytest.approx(expect)
    for slot in set(seen) | {(1, 0, True), (1, 0, False), (3, 2, False)}:
        assert shaper.rate(slot) == pytest.approx(c(slot))


def _is_ancestor(parents, j, i):
    while i >= 0:
        if i == j:
            return True
        i = parents[i]
    return False


def test_a_long_chain_is_judged_by_chains_not_by_branches_at_its_index():
    """Two kinds of step alternate: a 4-long chain that is always right, and a right node
    with three wrong siblings. By node index, nodes 1-3 would hit half the time (the
    chain's right, the siblings wrong) and a steep curve would cut the chain to 1 node;
    by slot, a chain's depths 2-4 are always right given their parent, so the shaper
    verifies the whole chain, and of the siblings only the first node."""
    steep = {L: 1 + 0.5 * (L - 1) for L in range(1, 18)}
    shaper = TreeShaper(steep, 4)
    for _ in range(20):
        shaper.update([1, 2, 3, 4], None, [1, 2, 3, 4, 5])
        shaper.update([5, 7, 8, 9], [-1, -1, -1, -1], [5, 6])
    chain = [shaper.rate((d, 0, True)) for d in (1, 2, 3, 4)]
    assert shaper.rates(None) == pytest.approx([chain[0], chain[0] * chain[1], chain[0] * chain[1] * chain[2],
                                                chain[0] * chain[1] * chain[2] * chain[3]])
    assert min(chain) > 0.9 and shaper.rate((1, 1, False)) < 0.1
    assert shaper.budget(None) == 4 and shaper.budget([-1, -1, -1, -1]) == 1


def test_an_only_child_is_judged_apart_from_the_first_of_several():
    """Two kinds of step alternate: a chain (every node its parent's only child) that is
    always right, and four alternatives at the root that are all wrong. Pooled, the first
    node would be right half the time and a steep curve would verify neither; apart, the
    chain is verified whole and the alternatives not at all."""
    steep = {L: 1 + 0.5 * (L - 1) for L in range(1, 18)}
    shaper = TreeShaper(steep, 4)
    for _ in range(20):
        shaper.update([1, 2, 3, 4], None, [1, 2, 3, 4, 5])
        shaper.update([7, 8, 9, 10], [-1, -1, -1, -1], [5, 6])
    assert shaper.rate((1, 0, True)) > 0.9 and shaper.rate((1, 0, False)) < 0.1
    assert shaper.budget(None) == 4 and shaper.budget([-1, -1, -1, -1]) == 0
    pooled = (shaper.hits[(1, 0, True)] + shaper.hits[(1, 0, False)]) / (
        shaper.seen[(1, 0, True)] + shaper.seen[(1, 0, False)])
    rates, a = [], 1.0
    for c in [pooled] + [shaper.rate((d, 0, True)) for d in (2, 3, 4)]:
        a *= c
        rates.append(a)
    assert best_budget(rates, steep) == 0  # what one pooled depth-1 rate would verify


@given(trees(max_nodes=12), st.integers(0, 14))
def test_chain_length_is_the_longest_leading_chain(tree, n):
    _, parents = tree
    m = chain_length(parents, n)
    assert m <= min(n, len(parents))
    assert all(parents[i] == i - 1 for i in range(m))  # a chain from the root...
    assert m == min(n, len(parents)) or parents[m] != m - 1  # ...that stops where it breaks


def test_shaper_keeps_to_the_chain_when_a_branch_does_not_pay_its_overhead():
    """Every node hits often; a linear block is cheap and a tree block costs twice as
    much: the budget stops where the proposal's first branch starts. Priced at the
    linear curve (no tree curve), it takes the branch too."""
    linear = {L: 1 + 0.05 * (L - 1) for L in range(1, 18)}
    tree = {L: 2 * c for L, c in linear.items() if L >= 3}
    parents = [-1, 0, 1, 0, 3, 4]  # 1 -> 2 -> 3, then a second branch 1 -> 7 -> 8 -> 9
    tokens = [1, 2, 3, 7, 8, 9]
    dear, plain = TreeShaper(linear, 6, tree), TreeShaper(linear, 6)
    for shaper in (dear, plain):
        for i in range(20):  # the two branches take turns being right
            shaper.update(tokens, parents, [1, 2, 3, 4] if i % 2 else [1, 7, 8, 9])
    assert dear.budget(parents) == 3
    assert plain.budget(parents) == 6
    assert dear.budget(None) == plain.budget(None)  # a linear proposal is a chain throughout


def test_shaper_grows_trees_when_deep_nodes_hit_and_shrinks_them_when_they_miss():
    rising = {L: 1 + 0.08 * (L - 1) for L in range(1, 18)}
    tokens, parents = [1, 2, 3, 4, 5, 6], [-1, 0, 1, 2, 3, 4]
    good, bad = TreeShaper(rising, 6), TreeShaper(rising, 6)
    for _ in range(20):
        good.update(tokens, parents, [1, 2, 3, 4, 5, 6, 7])
        bad.update(tokens, parents, [9])
    assert good.budget() == 6 and bad.budget() == 0
    flat = TreeShaper({1: 1.0, 64: 1.0}, 6)
    for _ in range(20):
        flat.update(tokens, parents, [1, 2, 9])
    assert flat.budget() == 6  # on a flat curve any chance of a hit pays: verify them all


def test_a_new_request_starts_with_a_small_tree_unless_the_curve_is_flat():
    """Before any step is seen, later best-first nodes are assumed less likely (prior /
    (i + 1)): on a rising curve a fresh shaper verifies a few nodes, not its whole budget;
    on a flat curve every node is still worth verifying."""
    rising = {L: 1 + 0.08 * (L - 1) for L in range(1, 34)}
    assert 1 <= TreeShaper(rising, 32).budget() <= 4
    assert TreeShaper({1: 1.0, 64: 1.0}, 32).budget() == 32
