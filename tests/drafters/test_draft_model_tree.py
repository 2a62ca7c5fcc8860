"""The draft model's token trees (top-b branching at its first depths): greedy parity
through the engine with alternatives accepted and rejected inside trees, the tree's
best-first order against a brute-force recomputation from the draft's own softmax, the
budget, and the draft-cache bookkeeping after an alternative is accepted. Tiny random
models (fp32, CPU)."""

import math

import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, Passthrough, assert_speculated, cached_tiny
from drafters.test_draft_model import assert_bookkeeping, near_draft, plain, prompt_of, run

from specdec.drafters import DraftResources, DraftSpec, build_drafter
from specdec.drafters.draft_model import DraftModelDrafter, branch_tree
from specdec.core.trees import first_branch, prune_tree
from specdec.policy.tree_shape import node_hits


class Recording(Passthrough):
    """Passes everything through to ``inner`` and keeps each tree with its context length,
    so a test can tell which nodes the target accepted."""

    def __init__(self, inner):
        super().__init__(inner)
        self.trees = []

    def propose_tree(self, context, k, budget):
        p = self.inner.propose_tree(context, k, budget)
        self.trees.append((len(context), p))
        return p


def accepted_alternatives(trees, prompt, out):
    """How many steps accepted a node off the chain (the tree's first branch)."""
    full, n = list(prompt) + list(out), 0
    for ctx_len, p in trees:
        if p.is_linear or not p:
            continue
        on_chain, node = set(), -1  # the first branch: each first child in turn
        for j, par in enumerate(p.parents):
            if par == node:
                on_chain.add(j)
                node = j
        hits = node_hits(p.tokens, p.parents, full[ctx_len:])
        n += any(h and j not in on_chain for j, h in enumerate(hits))
    return n


# ---- greedy parity through the engine -------------------------------------------------
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_tree_drafts_keep_greedy_parity_and_accept_alternatives(arch):
    target, alternatives, logs = cached_tiny(arch), 0, []
    for seed in range(3):
        prompt, log = prompt_of(20 + seed), []
        drafter = Recording(DraftModelDrafter(near_draft(arch, 0.08)))
        out = run(target, prompt, drafter, num_draft_tokens=4, tree_budget=7, step_log=log)
        assert out == plain(arch, prompt)
        assert_bookkeeping(drafter.inner)
        assert any(not p.is_linear for _, p in drafter.trees), "no tree was proposed"
        alternatives += accepted_alternatives(drafter.trees, prompt, out)
        logs.append(log)
    assert_speculated(*logs, what=f"{arch} draft-model trees")
    # the branches pay at least once: the target took a draft alternative over the chain
    assert alternatives > 0


def test_spec_built_draft_model_trees_match_plain():
    # the DraftSpec path: build_drafter with a loaded (tiny) draft, a far draft (seed 7):
    # nearly every tree is rejected at its root, alternatives included
    spec = DraftSpec("model", draft_model="tiny", num_draft_tokens=3, draft_tree_budget=5, gate=False)
    from conftest import tiny_model

    drafter = build_drafter(spec, DraftResources(draft=(tiny_model("llama", seed=7), None)))
    prompt, log = prompt_of(30), []
    out = run(cached_tiny("llama"), prompt, drafter, num_draft_tokens=3, tree_budget=5,
              step_log=log)
    assert out == plain("llama", prompt)
    assert sum(n - 1 for n, _ in log) > 0 and any(n - 1 > 3 for n, _ in log), \
        "no step verified a branching tree"


# ---- the tree's order against brute force ---------------------------------------------
def softmax_rows(model, ids):
    """The draft's full-vocabulary softmax after ``ids`` (plain forward, no cache)."""
    logits = model(mx.array(ids)[None])[0, -1].astype(mx.float32)
    return mx.softmax(logits).tolist()


def path_prob(model, ctx, path):
    return math.prod(softmax_rows(model, ctx + path[:j])[path[j]] for j in range(len(path)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_is_best_first_topological_against_brute_force(seed):
    model, k, width, depths = near_draft("qwen2", 0.08), 4, 3, 2
    ctx = prompt_of(40 + seed)
    d = DraftModelDrafter(model, branch_width=width, branch_depths=depths)
    d.begin(ctx)
    full = d.propose_tree(ctx, k, 100)
    assert d.cached_tokens == ctx + list(first_branch(full).tokens)[:-1]
    assert_bookkeeping(d)
    # brute force: the greedy chain, then the top-`width` tokens at the first depths
    chain, probs = [], []
    for _ in range(k):
        probs.append(softmax_rows(model, ctx + chain))
        chain.append(max(range(TINY_VOCAB), key=lambda t: probs[-1][t]))
    want = {tuple(chain[: i + 1]) for i in range(k)}
    for dd in range(depths):
        best = sorted(range(TINY_VOCAB), key=lambda t: -probs[dd][t])[:width]
        want |= {tuple(chain[:dd] + [t]) for t in best}
    paths = [tuple(full.path(i)) for i in range(len(full))]
    assert len(paths) == len(set(paths)) and set(paths) == want
    assert all(p < i for i, p in enumerate(full.parents))  # topological
    scores = [path_prob(model, ctx, list(p)) for p in paths]
    assert all(a >= b * (1 - 1e-4) for a, b in zip(scores, scores[1:])), scores
    # every budget: at most that many nodes, and exactly the full tree's first N nodes
    for n in range(1, len(full) + 1):
        p = d.propose_tree(ctx, k, n)
        cut = prune_tree(full, k, n)
        assert len(p) <= n and p.tokens == cut.tokens and p.is_linear == cut.is_linear
        assert p.is_linear or p.parents == cut.parents
        assert_bookkeeping(d)


def test_branch_tree_orders_ties_chain_first_and_respects_width():
    lp = math.log
    # chain 1 -> 2 (probabilities .5, 1.0); depth-1 alternatives 8 (.5 tie with the chain
    # node) and 9 (.2); width 2 keeps only the best alternative
    t = branch_tree([1, 2], [lp(.5), 0.0], [[(8, lp(.5)), (1, lp(.5)), (9, lp(.2))]], 2, 9)
    assert t.tokens == (1, 2, 8) and t.parents == (-1, 0, -1)
    t = branch_tree([1, 2], [lp(.5), 0.0], [[(8, lp(.5)), (1, lp(.5)), (9, lp(.2))]], 3, 3)
    assert t.tokens == (1, 2, 8)
    assert branch_tree([1, 2], [lp(.5), 0.0], [], 3, 1).parents is None


# ---- bookkeeping after an alternative is accepted ---------------------------------------
def test_accepting_an_alternative_rolls_the_draft_cache_back():
    model = near_draft("llama", 0.08)
    ctx = prompt_of(50)
    d = DraftModelDrafter(model)
    d.begin(ctx)
    tree = d.propose_tree(ctx, 4, 9)
    chain = list(first_branch(tree).tokens)
    # an alternative below chain node 0 (depth 2), accepted with a bonus token after it
    alt = next(j for j, p in enumerate(tree.parents) if p == 0 and tree.tokens[j] != chain[1])
    d.observe(2)
    ctx2 = ctx + [chain[0], tree.tokens[alt], 5]
    draft = list(d.propose(ctx2, 3).tokens)
    assert d.cached_tokens == ctx2 + draft[:-1] and d.stats["rebuilds"] == 1
    assert_bookkeeping(d)
    fresh = DraftModelDrafter(model)
    fresh.begin(ctx2)
    assert draft == list(fresh.propose(ctx2, 3).tokens)  # the rolled-back cache is exact
    d.propose_tree(ctx2, 3, 6)
    d.observe(3)  # up to the tree's depth
    with pytest.raises(ValueError, match="accepted 4 of a 3-token proposal"):
        d.observe(4)


def test_sampling_or_no_branching_proposes_linear_drafts():
    model = cached_tiny("llama")
    ctx = prompt_of(51)
    p = DraftModelDrafter(model, temperature=0.7, seed=0).propose_tree(ctx, 4, 3)
    assert p.is_linear and len(p) == 3 and p.q is not None and p.q.shape == (3, TINY_VOCAB)
    p = DraftModelDrafter(model, branch_depths=0).propose_tree(ctx, 4, 9)
    assert p.is_linear and len(p) == 4 and p.q is None
    assert not DraftModelDrafter(model).propose_tree(ctx, 4, 0)
    with pytest.raises(ValueError, match="branch_width >= 1"):
        DraftModelDrafter(model, branch_width=0)
