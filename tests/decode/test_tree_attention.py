"""Token-tree verification (``specdec.decode.step.verify_forward`` under ``decode.tree_attention``): one forward over ``[last] + tree`` on
unmodified mlx-lm models, greedy tree acceptance and cache compaction, against brute force.

- Each node's logits equal a plain cache-less forward of context + its root path
  (llama, qwen2, gemma3 with an 8-token window crossed by the context).
- After compacting a random accepted path, the cache equals a fresh prefill of context +
  path (offset, keys, values) and the next step's logits match; KVCache, WindowKVCache
  and QuantizedKVCache.
- The host-side tree functions (``core.trees``) are tested in tests/core/test_trees.py.
- Through the engine, a drafter that proposes trees (the plain output as one branch at a
  random rank, random siblings and subtrees, sometimes no true branch at all) gives
  output token-identical to plain decoding, on tiny models and real SmolLM2 / Gemma 3
  (past its 512-token window), and the runs prove trees were verified, non-first branches
  accepted and branches rejected.
"""

from __future__ import annotations

import json
import os
import random

import mlx.core as mx
import pytest
from conftest import (TINY_VOCAB, Passthrough, assert_stats_speculated, cache_auto_costs, cached_tiny, examples,
                      plain_reference, real_model, requires_model)
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_gen import path_nodes, root_path, trees

from specdec.drafters.base import Drafter, Proposal
from specdec.engine import generate, token_stream
from specdec.cache.rollback import RollbackError, WindowKVCache, compact, make_cache
from specdec.core.sampling import SamplingParams
from specdec.cache.rollback import prefill
from specdec.policy.tree_shape import cost_at
from specdec.core.trees import first_branch
from specdec.decode.step import verify_forward


def tree_forward(model, cache, last, tokens, parents):
    """Logits (n+1, V) of one tree block through the engine's one verify forward."""
    return verify_forward(model, cache, [[last, *tokens]], parents)[0]

ARCHS = ["llama", "qwen2", "gemma3"]


@pytest.fixture(autouse=True, scope="module")
def _cpu():
    # exactness tests in fp32 on the CPU; SPECDEC_TEST_DEVICE=gpu runs them on Metal or
    # CUDA instead (the token-tree check on a lent GPU: lab/verify-cost-curves/h100)
    old = mx.default_device()
    mx.set_default_device(mx.gpu if os.environ.get("SPECDEC_TEST_DEVICE") == "gpu" else mx.cpu)
    yield
    mx.set_default_device(old)


# ---- one forward over a tree --------------------------------------------------------------
def prefilled(model, context, **kw):
    cache = make_cache(model, max_trim=8, **kw)
    prefill(model, cache, context[:-1])
    return cache


@settings(max_examples=examples(30))
@given(st.sampled_from(ARCHS), trees(max_nodes=12), st.integers(2, 24), st.randoms(use_true_random=False))
def test_each_node_sees_exactly_its_root_path(arch, tree, n_ctx, rnd):
    tokens, parents = tree
    model = cached_tiny(arch)  # gemma3: window 8, so a long context has wrapped it
    context = [rnd.randrange(TINY_VOCAB) for _ in range(n_ctx)]
    cache = prefilled(model, context)
    logits = tree_forward(model, cache, context[-1], tokens, parents)
    rows = [context] + [context + root_path(tokens, parents, j) for j in range(len(tokens))]
    for r, seq in enumerate(rows):
        ref = model(mx.array(seq)[None])[0, -1]
        assert mx.allclose(logits[r], ref, atol=1e-4).item(), (arch, r, seq)
    assert all(c.offset == n_ctx + len(tokens) for c in cache)


def test_a_branch_deeper_than_the_window_sees_only_the_window():
    """gemma3 (window 8): a 12-deep branch beside a short one; deep nodes must stop seeing
    their own early ancestors, as a plain forward of their root path does."""
    model, context = cached_tiny("gemma3"), tiny_prompt(7, 12)
    parents = [-1] + list(range(11)) + [-1, 12]
    tokens = tiny_prompt(8, len(parents))
    logits = tree_forward(model, prefilled(model, context), context[-1], tokens, parents)
    for r in range(1, len(parents) + 1):
        ref = model(mx.array(context + root_path(tokens, parents, r - 1))[None])[0, -1]
        assert mx.allclose(logits[r], ref, atol=1e-4).item(), r


def layer_positions(c):
    """{absolute position: (key, value)} rows a layer holds."""
    if isinstance(c, WindowKVCache):
        k, v = c.state
        first = c.start
    else:
        k, v = c.keys[..., : c.offset, :], c.values[..., : c.offset, :]
        first = 0
    return first, k, v


CACHES = [("llama", {}), ("qwen2", {}), ("gemma3", {})]  # a quantized cache never speculates


# derandomized: the same examples every run, so a failure here is a change of the code, not of
# the draw (an 8-bit cache once rounded a value to a neighbouring step here: quantized caches
# no longer speculate, errors.refuse_quantized_speculation)
@settings(max_examples=examples(30), derandomize=True, database=None)
@given(st.sampled_from(CACHES), trees(), st.integers(2, 24), st.randoms(use_true_random=False),
       st.integers(0, 63))
def test_compacted_cache_equals_fresh_prefill_of_accepted_path(case, tree, n_ctx, rnd, nxt):
    arch, kw = case
    model = cached_tiny(arch)
    tokens, parents = tree
    context = [rnd.randrange(TINY_VOCAB) for _ in range(n_ctx)]
    cache = prefilled(model, context, **kw)
    tree_forward(model, cache, context[-1], tokens, parents)
    end = rnd.randrange(-1, len(tokens))  # the accepted path ends at a random node (or root)
    path = path_nodes(parents, end)
    compact(cache, n_ctx - 1, [0] + [j + 1 for j in path])
    accepted = [tokens[j] for j in path]
    fresh = make_cache(model, max_trim=8, **kw)
    prefill(model, fresh, context + accepted)
    for c, f in zip(cache, fresh):
        assert c.offset == f.offset == n_ctx + len(path)
        (c0, ck, cv), (f0, fk, fv) = layer_positions(c), layer_positions(f)
        lo = max(c0, f0)
        if isinstance(c, WindowKVCache):  # both hold at least the window before the offset
            assert c.offset - lo >= min(c.offset, c.window - 1)
        for a, b in ((ck, fk), (cv, fv)):
            assert mx.allclose(a[..., lo - c0 :, :], b[..., lo - f0 :, :], atol=1e-4).item()
    step = [model(mx.array([[nxt]]), cache=x)[0, -1] for x in (cache, fresh)]
    err = mx.max(mx.abs(step[0] - step[1])).item()
    assert err <= 1e-4  # logits spread ~3: a misplaced row shows


def test_compact_refuses_what_it_cannot_do():
    model = cached_tiny("llama")
    context = list(range(10))
    cache = prefilled(model, context)
    tree_forward(model, cache, context[-1], [1, 2, 3], [-1, 0, -1])
    for bad in ([1, 2], [0, 2, 1], [0, 4], []):
        with pytest.raises(RollbackError):
            compact(cache, 9, bad)
    assert all(c.offset == 13 for c in cache)  # refused before touching any layer
    from mlx_lm.models.cache import RotatingKVCache

    with pytest.raises(RollbackError, match="RotatingKVCache"):
        compact([RotatingKVCache(8)], 0, [0])


# ---- through the engine -------------------------------------------------------------------
class TruthTreeDrafter(Drafter):
    """Proposes trees around the plain output ``truth`` (the continuation after the
    prompt): the true branch runs to a random depth (sometimes 0: no true branch at all)
    at a random child rank, among random siblings that may carry random subtrees. Records
    what the engine did with them (``observe`` is told how far the true path got)."""

    name = "truth-tree"
    branches = True

    def __init__(self, truth, vocab, seed=0, p_miss=0.3):
        self.truth, self.vocab, self.rng, self.p_miss = list(truth), vocab, random.Random(seed), p_miss
        self.trees = self.non_first = self.misses = 0
        self.miss_at: list[int] = []  # context lengths of the steps that rejected branches
        self._ranks, self._depth, self._at = [], 0, 0

    def begin(self, prompt_ids):
        self.n_prompt = len(prompt_ids)

    def propose(self, context, k):  # the linear fallback: the true prefix
        pos = len(context) - self.n_prompt
        return Proposal(self.truth[pos : pos + k])

    def _wrong(self, avoid):
        return self.rng.choice([t for t in range(min(self.vocab, 4096)) if t not in avoid])

    def propose_tree(self, context, k, budget):
        pos, rng = len(context) - self.n_prompt, self.rng
        self._at = len(context)
        true = self.truth[pos : pos + k]
        t = len(true) if rng.random() > self.p_miss else rng.randint(0, len(true))
        tokens, parents, ranks, node = [], [], [], -1
        for d in range(min(k, t + 1)):
            used = {true[d]} if d < len(true) else set()
            n_sib, rank = rng.randint(0, 2), None
            order = list(range(n_sib + (d < t)))
            rank = rng.randrange(len(order)) if d < t else None
            nxt = None
            for i in order:
                if len(tokens) >= budget:
                    break
                if i == rank:
                    tokens.append(true[d]); parents.append(node); nxt = len(tokens) - 1
                    continue
                tok = self._wrong(used); used.add(tok)
                tokens.append(tok); parents.append(node)
                sib = len(tokens) - 1
                for _ in range(rng.randint(0, min(2, k - d - 1))):  # a random subtree below it
                    if len(tokens) >= budget:
                        break
                    tokens.append(self._wrong(set())); parents.append(sib); sib = len(tokens) - 1
            if nxt is None:
                break
            ranks.append(rank)
            node = nxt
        self._ranks = ranks
        self._depth = Proposal(tokens, parents=parents).depth if tokens else 0
        p = Proposal(tokens, parents=parents)
        self.trees += not p.is_linear
        return p

    def observe(self, num_accepted):
        assert num_accepted <= len(self._ranks), "accepted past the true branch: output changed"
        self.non_first += any(r > 0 for r in self._ranks[:num_accepted])
        self.misses += num_accepted < self._depth
        if num_accepted < self._depth:
            self.miss_at.append(self._at)


def assert_trees_exercised(d, what):
    assert d.trees > 0 and d.non_first > 0 and d.misses > 0, (
        f"{what}: {d.trees} trees, {d.non_first} steps accepted a non-first branch, "
        f"{d.misses} steps rejected branches: parity here would not exercise tree verification")


def tiny_prompt(seed, length=30):
    rng = random.Random(seed)
    return [rng.randrange(TINY_VOCAB) for _ in range(length)]


def run(model, prompt, **kw):
    return [e.token for e in token_stream(model, prompt, **kw)]


@pytest.mark.parametrize("arch,kw", [("llama", {}), ("qwen2", {}), ("gemma3", {})])
@pytest.mark.parametrize("k,budget", [(4, 6), (6, 16)])
def test_tree_parity_tiny(arch, kw, k, budget):
    model = cached_tiny(arch)
    drafters = []
    for seed in (0, 1):
        prompt = tiny_prompt(seed)
        ref = run(model, prompt, max_tokens=40, **kw)
        d = TruthTreeDrafter(ref, TINY_VOCAB, seed=seed)
        out = run(model, prompt, drafter=d, max_tokens=40, num_draft_tokens=k, tree_budget=budget, **kw)
        assert out == ref
        drafters.append(d)
    total = TruthTreeDrafter([], 1)
    for d in drafters:
        total.trees += d.trees; total.non_first += d.non_first; total.misses += d.misses
    assert_trees_exercised(total, f"{arch} {kw}")


def test_tree_parity_with_a_repetition_penalty():
    """Each tree row is penalised for the context plus its own root path: greedy output
    with a repetition penalty equals plain decoding with the same penalty."""
    model, prompt = cached_tiny("llama"), tiny_prompt(5)
    params = SamplingParams(repetition_penalty=1.5, repetition_context_size=6)
    ref = run(model, prompt, max_tokens=40, sampling=params)
    assert ref != run(model, prompt, max_tokens=40)  # the penalty changes this output
    d = TruthTreeDrafter(ref, TINY_VOCAB, seed=4)
    assert run(model, prompt, drafter=d, max_tokens=40, num_draft_tokens=4, tree_budget=8,
               sampling=params) == ref
    assert_trees_exercised(d, "repetition penalty")


class FirstBranch(Passthrough):
    """The same drafter, reduced to its trees' first-child branches (linear)."""

    def __init__(self, inner, budget):
        super().__init__(inner)
        self.budget = budget

    def propose(self, context, k):
        return first_branch(self.inner.propose_tree(context, k, self.budget))

    def observe(self, n):
        pass  # the inner drafter's records describe whole trees


class WithQ(Passthrough):
    """The same drafter's trees, carrying one-hot draft distributions (q) for their nodes."""

    def propose_tree(self, context, k, budget):
        p = self.inner.propose_tree(context, k, budget)
        q = mx.eye(TINY_VOCAB)[mx.array(p.tokens)] if p.tokens else None
        return Proposal(p.tokens, q, parents=p.parents)


def test_a_sampled_tree_with_draft_distributions_verifies_its_first_branch():
    """A tree carrying q at temperature > 0 is verified as its first branch: the output
    equals the same drafter's first branches drafted linearly (one-hot q is a point
    mass), under the same key chain."""
    model, prompt = cached_tiny("qwen2"), tiny_prompt(3)
    ref = run(model, prompt, max_tokens=30)
    params = SamplingParams(temperature=0.8, seed=5)
    tree = run(model, prompt, drafter=WithQ(TruthTreeDrafter(ref, TINY_VOCAB, seed=2)), max_tokens=30,
               sampling=params, tree_budget=8)
    lin = run(model, prompt, drafter=FirstBranch(TruthTreeDrafter(ref, TINY_VOCAB, seed=2), 8),
              max_tokens=30, sampling=params)
    assert tree == lin


def test_tree_needs_a_budget():
    model, prompt = cached_tiny("llama"), tiny_prompt(4)

    class TreeOnly(TruthTreeDrafter):
        def propose(self, context, k):
            return Proposal([1, 2], parents=(-1, -1))

    with pytest.raises(ValueError, match="tree budget"):
        run(model, prompt, drafter=TreeOnly([], TINY_VOCAB), max_tokens=4)


# ---- real weights -------------------------------------------------------------------------
@pytest.mark.slow
@requires_model("smollm2-135m")
def test_tree_parity_smollm():
    from specdec.prompts import parity_prompts

    from parity.test_parity_real import MAX_TOKENS

    prompt = parity_prompts()["code_textwrap_doc"]
    ref = plain_reference("smollm2-135m", prompt, MAX_TOKENS)  # shared with test_parity_real
    model, tok = real_model("smollm2-135m")
    d = TruthTreeDrafter(ref.tokens, model.args.vocab_size, seed=0)
    out = generate(model, tok, prompt, drafter=d, max_tokens=MAX_TOKENS, num_draft_tokens=6,
                   draft_tree_budget=12)
    assert out.tokens == ref.tokens
    assert_trees_exercised(d, "smollm2")


@pytest.mark.slow
@requires_model("gemma3-270m")
def test_tree_parity_gemma_across_the_window():
    from parity.test_parity_real import GEMMA_TOKENS, WINDOW, gemma_prompt

    prompt = gemma_prompt()
    ref = plain_reference("gemma3-270m", prompt, GEMMA_TOKENS)  # shared with test_parity_real
    assert len(ref.prompt_tokens) < WINDOW < len(ref.prompt_tokens) + len(ref.tokens)
    model, tok = real_model("gemma3-270m")
    d = TruthTreeDrafter(ref.tokens, model.args.vocab_size, seed=1)
    out = generate(model, tok, prompt, drafter=d, max_tokens=GEMMA_TOKENS, num_draft_tokens=4,
                   draft_tree_budget=10)
    assert out.tokens == ref.tokens
    assert_trees_exercised(d, "gemma3")
    assert max(d.miss_at) > WINDOW, d.miss_at  # branches rejected after the window wrapped


# ---- the budget's way in: DraftSpec, CLI, server, bench ----------------------------------
def test_tree_budget_is_validated_and_threaded_everywhere():
    import argparse

    from specdec.bench.configs import parse_config
    from specdec.config import RunConfig, add_draft_flags
    from specdec.drafters.spec import DraftSpec
    from specdec.server.engine.speculative import SpeculativeOptions, merge_speculative

    assert DraftSpec("suffix", draft_tree_budget="auto").draft_tree_budget == "auto"
    for bad in (-1, "8", "many", True, 2.0):
        with pytest.raises(ValueError, match="--draft-tree-budget"):
            DraftSpec("suffix", draft_tree_budget=bad)
    p = argparse.ArgumentParser()
    add_draft_flags(p)
    for arg, want in (("auto", "auto"), ("12", 12)):
        cfg = RunConfig.from_args(p.parse_args(["--draft-tree-budget", arg]))
        assert cfg.spec.draft_tree_budget == want and cfg.engine_kwargs()["generation"].draft.draft_tree_budget == want
    with pytest.raises(SystemExit):
        p.parse_args(["--draft-tree-budget", "-3"])
    merged = merge_speculative(DraftSpec("suffix"), SpeculativeOptions(draft_tree_budget=8))
    assert merged.draft_tree_budget == 8
    assert SpeculativeOptions.model_validate({"draft_tree_budget": "auto"}).draft_tree_budget == "auto"
    for bad in ("8", -1, 1000):
        with pytest.raises(Exception):
            SpeculativeOptions.model_validate({"draft_tree_budget": bad})
    c = parse_config("suffix:k=8:tree=16")
    assert c.tree_budget == 16 and parse_config(c.text) == c
    assert parse_config("suffix:tree=auto").tree_budget == "auto"
    with pytest.raises(ValueError, match="tree=N"):
        parse_config("suffix:tree=x")


def test_auto_budget_resolves_from_the_measured_curve(tmp_path, monkeypatch):
    from specdec.measure import AUTO_TREE_CURVE, resolve_tree_budget

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model, prompt = cached_tiny("llama"), tiny_prompt(9)
    n, shaper = resolve_tree_budget(model, "auto")
    assert n == shaper.max_nodes and list(tmp_path.glob("cost/*.json"))
    assert {1, 17, 33} <= set(shaper.cost)
    over = list(tmp_path.glob("cost/*-tree-overhead.json"))
    assert set(shaper.tree_cost) == set(AUTO_TREE_CURVE) and len(over) == 1
    ratio = {int(L): r for L, r in json.loads(over[0].read_text()).items()}
    # a tree block is priced as the linear block of its length times its measured overhead
    assert shaper.tree_cost == pytest.approx({L: cost_at(shaper.cost, L) * ratio[L] for L in ratio})
    assert all(r > 0 for r in ratio.values())  # ratios of two timings (their size is machine noise)
    ref = run(model, prompt, max_tokens=20)
    out = run(model, prompt, drafter=TruthTreeDrafter(ref, TINY_VOCAB), max_tokens=20, tree_budget="auto")
    assert out == ref
    with pytest.raises(ValueError, match="'auto'"):
        resolve_tree_budget(model, -2)


def test_auto_budget_counts_the_drafters_own_cost(tmp_path, monkeypatch):
    """The engine hands ``drafter.draft_cost`` to the shaper. On a curve where every
    verified token costs as much as a plain step (c(L) = L c(1)) no draft pays for itself,
    so a free drafter is never verified; a proposal that costs far more than a step is
    paid whatever N is, so the shaper then verifies the whole proposal. Both are plain.
    Nothing is measured (a tree step's overhead read from the cache, not timed: a measured
    ratio under 1 once made a branch pay here, after heavier tests had loaded the machine)."""
    model, prompt = cached_tiny("llama"), tiny_prompt(11)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    cache_auto_costs(model, lambda L: 0.01 * L, tmp_path)
    cached = {p.name: p.read_text() for p in (tmp_path / "cost").iterdir()}
    ref = run(model, prompt, max_tokens=24)
    fed = {}
    for label, cost in (("free", None), ("costly", {"fixed": 10.0, "per_token": 0.0})):
        drafter = TruthTreeDrafter(ref, TINY_VOCAB, seed=3, p_miss=0.0)
        drafter.draft_cost = cost
        log: list[tuple[int, int]] = []
        assert run(model, prompt, drafter=drafter, max_tokens=24, num_draft_tokens=4,
                   tree_budget="auto", step_log=log) == ref
        fed[label] = [n for n, _ in log]
    assert {p.name: p.read_text() for p in (tmp_path / "cost").iterdir()} == cached
    assert set(fed["free"]) == {1}  # the last token alone: nothing drafted was verified
    assert max(fed["costly"]) > 4 and len(fed["costly"]) < len(fed["free"])


# ---- the real tree drafters on real weights -----------------------------------------------
@pytest.mark.slow
@requires_model("smollm2-135m")
# suffix alone with "auto" is not a case of its own: the chain builds the suffix drafter's
# tree every step and merges it with the trie's (drafters/chain.py propose_tree), under the
# same shaper; it cost 20 s of real decoding and showed nothing the chain does not
@pytest.mark.parametrize("draft_type,budget", [("ngram", 12), ("ngram,suffix", "auto")])
def test_real_tree_drafters_equal_plain_decoding_smollm(draft_type, budget, tmp_path, monkeypatch):
    """The ngram all-matches trie, the suffix best-first tree and their merged chain,
    with a fixed budget and with the per-step shaper: identical to plain decoding, and
    some steps verified a real tree (more nodes than depth). The shaper reads a flat cost
    curve written to the cost cache (as Metal/CUDA measure it), so whether it branches
    does not hang on this machine's timings."""
    from specdec.drafters.spec import DraftSpec
    from specdec.prompts import parity_prompts

    from parity.test_parity_real import MAX_TOKENS

    # demo_colorsys: the ngram trie takes a non-first branch at tokens 7, 9, 13, 27 and 37
    # (measured), so a compaction that never gathers rows fails within the shared 48-token
    # reference; code_textwrap_doc took its first only after token 48 (a 96-token reference
    # of its own and two 96-token runs: ~45 CPU s)
    prompt = parity_prompts()["demo_colorsys"]
    ref = plain_reference("smollm2-135m", prompt, MAX_TOKENS)  # shared with test_parity_real
    model, tok = real_model("smollm2-135m")
    if budget == "auto":
        monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
        cache_auto_costs(model, lambda L: 0.05, tmp_path)
    spec = DraftSpec(draft_type, num_draft_tokens=6, draft_tree_budget=budget)
    out = generate(model, tok, prompt, drafter=spec, max_tokens=MAX_TOKENS)
    assert out.tokens == ref.tokens
    assert_stats_speculated(out.stats, what=f"{draft_type} tree={budget}")
    assert out.stats.drafted > sum(out.stats.drafted_by_position)  # nodes > depths: trees


@pytest.mark.slow
@requires_model("qwen2.5-coder-0.5b")
def test_ngram_trees_equal_plain_decoding_qwen():
    from parity.test_parity_real import QWEN_PROMPT, QWEN_TOKENS

    ref = plain_reference("qwen2.5-coder-0.5b", QWEN_PROMPT, QWEN_TOKENS)  # shared with test_parity_real
    model, tok = real_model("qwen2.5-coder-0.5b")
    out = generate(model, tok, QWEN_PROMPT, drafter="ngram", max_tokens=QWEN_TOKENS, num_draft_tokens=4,
                   draft_tree_budget=10)
    assert out.tokens == ref.tokens
    assert out.stats.drafted > sum(out.stats.drafted_by_position)
