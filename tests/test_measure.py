"""The drafter's own cost in the cost model: adaptive k and the tree shaper against
brute-force argmaxes, the measured and disk-cached ``measure.draft_cost_for`` on tiny real
models, its wiring into DraftResources / AdaptiveK / the auto tree budget, and
the bench's drafter-cost bound. No timing assertions beyond positivity."""

import pytest
from conftest import cached_tiny, examples, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import measure
from specdec.bench import analysis
from specdec.drafters import DraftSpec, NgramDrafter, build_drafter
from specdec.resources import prepare_resources
from specdec.policy.build import build_policy
from specdec.policy.adaptive import AdaptiveK, best_k, draft_seconds
from specdec.measure import resolve_tree_budget
from specdec.policy.tree_shape import TreeShaper, best_budget, cost_at

rate_st = st.floats(0.0, 1.0)
slope_st = st.floats(0.0, 0.5)
draft_st = st.fixed_dictionaries({"fixed": st.floats(0.0, 2.0), "per_token": st.floats(0.0, 2.0)})


def rising_curve(steps):
    cost = {1: 1.0}
    for i, s in enumerate(steps):
        cost[i + 2] = cost[i + 1] + s
    return cost


# ---- adaptive k ---------------------------------------------------------------------------
@settings(max_examples=examples(200), deadline=None)
@given(st.lists(rate_st, min_size=6, max_size=6), st.lists(slope_st, min_size=6, max_size=6),
       draft_st, st.integers(0, 6))
def test_best_k_with_draft_cost_is_the_brute_force_argmax(accept, slopes, dc, k_max):
    cost = rising_curve(slopes)

    def value(k):  # E[tokens | k] / (cost(k + 1) + fixed + per_token k), nothing drafted at 0
        expected, run = 1.0, 1.0
        for a in accept[:k]:
            run *= a
            expected += run
        return expected / (cost[k + 1] + (dc["fixed"] + dc["per_token"] * k if k else 0.0))

    values = [value(k) for k in range(k_max + 1)]
    k = best_k(accept, cost, k_max, dc)
    assert values[k] == pytest.approx(max(values))
    assert all(v < values[k] + 1e-9 for v in values[:k])  # the smallest best k


def test_adaptive_k_drafts_less_when_drafting_costs():
    ctx = [1, 2, 3, 4, 5] * 8  # every draft slot keeps being accepted
    cost = {L: 1.0 + 0.05 * (L - 1) for L in range(1, 10)}
    free = AdaptiveK(NgramDrafter(1, 3), cost, 8)
    dear = AdaptiveK(NgramDrafter(1, 3), cost, 8, draft_cost={"fixed": 0.0, "per_token": 0.6})
    for d in (free, dear):
        d.begin(ctx)
        for _ in range(12):
            p = d.propose(ctx, 8)
            d.observe(len(p))
    assert free.chosen[-1] == 8 and 0 < dear.chosen[-1] < 8


# ---- the tree shaper ----------------------------------------------------------------------
@settings(max_examples=examples(200), deadline=None)
@given(st.lists(rate_st, min_size=1, max_size=8), st.lists(slope_st, min_size=9, max_size=9),
       st.floats(1.0, 2.0), st.integers(0, 8), st.floats(0.0, 5.0))
def test_best_budget_with_propose_cost_is_the_brute_force_argmax(rates, slopes, overhead,
                                                                chain, p):
    cost = rising_curve(slopes)
    tree = {L: cost_at(cost, L) * overhead for L in range(1, len(rates) + 3)}
    rates = sorted(rates, reverse=True)  # a best-first drafter's nodes

    def value(n):
        c = cost_at(cost if n <= chain else tree, n + 1)
        return (1 + sum(rates[:n])) / ((c + p) / cost[1])

    values = [value(n) for n in range(len(rates) + 1)]
    n = best_budget(rates, cost, tree, chain, p)
    assert values[n] == pytest.approx(max(values))
    assert all(v < values[n] + 1e-9 for v in values[:n])
    # the proposal is paid whatever N is: a dearer proposal never verifies less of it
    # (on one rising curve; n is compared by value, so exact ties cannot flip it)
    m, more = best_budget(rates, cost, None, None, p), best_budget(rates, cost, None, None, p + 1.0)
    assert more >= m or (1 + sum(rates[:more])) == pytest.approx(1 + sum(rates[:m]))


def test_tree_shaper_counts_the_proposal_cost():
    rising = {L: 1 + 0.1 * (L - 1) for L in range(1, 9)}
    plain, dear = TreeShaper(rising, 4), TreeShaper(rising, 4, propose_cost=0.5)
    for s in (plain, dear):
        # a chain's depths 1-4 right 9, 9, 5, 5 times in 10 given their parent
        s.hits = {(d, 0, True): h for d, h in zip((1, 2, 3, 4), (9.0, 9.0, 5.0, 5.0))}
        s.seen = {(d, 0, True): 10.0 for d in (1, 2, 3, 4)}
    rates = plain.rates()
    assert plain.budget() == best_budget(rates, rising) and dear.budget() == best_budget(
        rates, rising, propose_cost=0.5)
    assert dear.budget() > plain.budget()
    with pytest.raises(ValueError, match="propose_cost"):
        TreeShaper(rising, 4, propose_cost=-1.0)


def test_auto_tree_budget_hands_the_proposal_cost_to_the_shaper(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    n, shaper = resolve_tree_budget(cached_tiny("llama"), "auto", propose_cost=0.25)
    assert n > 0 and shaper.propose_cost == 0.25
    assert resolve_tree_budget(cached_tiny("llama"), 5, propose_cost=0.25) == (5, None)


# ---- measured, cached drafter cost --------------------------------------------------------
def test_draft_cost_for_measures_a_draft_model_once_and_caches_it(tmp_path, monkeypatch):
    calls = []
    real = measure.draft_model_cost

    def counted(draft, **kw):
        calls.append(draft)
        return real(draft, **kw)

    monkeypatch.setattr(measure, "draft_model_cost", counted)
    target, draft = cached_tiny("llama"), tiny_model("llama", seed=7, hidden=128)
    first = measure.draft_cost_for("model", target, draft, cache_dir=tmp_path)
    assert first["per_token"] > 0 and first["fixed"] >= 0
    assert measure.draft_cost_for("model", target, draft, cache_dir=tmp_path) == first
    assert len(calls) == 1  # the second call read the file
    assert len(list((tmp_path / "cost").glob("draft-model-*.json"))) == 1
    # a chain is the sum of its members, each member's own beside it; the model part comes
    # from the cache
    ngram = measure.draft_cost_for("ngram", target, cache_dir=tmp_path)
    assert ngram["fixed"] > 0 and ngram["per_token"] == 0.0
    chain = measure.draft_cost_for("ngram,model", target, draft, cache_dir=tmp_path)
    assert chain.pop("members") == {"ngram": ngram, "model": first}
    assert chain == pytest.approx({k: first[k] + ngram[k] for k in first}) and len(calls) == 1
    # another draft model is another pair: measured anew
    measure.draft_cost_for("model", target, cached_tiny("llama"), cache_dir=tmp_path)
    assert len(calls) == 2
    with pytest.raises(ValueError, match="draft model"):
        measure.draft_cost_for("model", target, cache_dir=tmp_path)


def test_prepare_resources_measures_the_drafter_cost_for_adaptive_k(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    spec = DraftSpec("suffix", num_draft_tokens=3, adaptive_k=True, gate=False)
    res = prepare_resources(spec, model, None)
    assert res.draft_cost["fixed"] > 0 and res.draft_cost["per_token"] == 0.0
    drafter = build_policy(spec, res)
    assert isinstance(drafter, AdaptiveK) and drafter.draft_cost == res.draft_cost
    assert prepare_resources(DraftSpec("suffix", gate=False), model, None).draft_cost is None
    assert build_drafter(DraftSpec("suffix", gate=False)).draft_cost is None
    # the cost gate (the default) is priced the same way: the curve and the drafter's cost
    gated = prepare_resources(DraftSpec("suffix", num_draft_tokens=3), model, None)
    assert sorted(gated.cost) == [1, 2, 3, 4] and gated.draft_cost == res.draft_cost
    assert build_policy(DraftSpec("suffix", num_draft_tokens=3), gated).draft_cost == res.draft_cost


def test_draft_seconds_is_zero_for_no_draft():
    dc = {"fixed": 0.2, "per_token": 0.1}
    assert draft_seconds(dc, 0) == 0.0 and draft_seconds(None, 5) == 0.0
    assert draft_seconds(dc, 3) == pytest.approx(0.5)


# ---- the bench's bound with the drafter's cost --------------------------------------------
@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 5)), min_size=1, max_size=10),
       st.lists(slope_st, min_size=6, max_size=6), draft_st)
def test_drafter_cost_bound_against_brute_force(steps, slopes, dc):
    cost = rising_curve(slopes)
    generated = sum(min(a, L - 1) + 1 for L, a in steps)
    units = sum(cost[L] + (dc["fixed"] + dc["per_token"] * (L - 1) if L > 1 else 0) for L, _ in steps)
    got = analysis.with_draft_cost(steps, generated, cost, dc)
    assert got == pytest.approx(generated / units)
    assert got <= analysis.zero_cost(steps, generated, cost) + 1e-12
    assert analysis.with_draft_cost(steps, generated, cost, None) == pytest.approx(
        analysis.zero_cost(steps, generated, cost))


def test_summary_reports_the_drafter_cost_bound_per_config():
    from bench.test_analysis import _rec

    recs = [_rec("plain", r, [1] * 4) for r in (1, 2)]
    recs += [_rec(c, r, [1] * 4, verify_steps=2, steps=[(3, 1), (3, 1)]) for r in (1, 2)
             for c in ("model k=2", "ngram k=2")]
    rows = {r["config"]: r for r in analysis.summarize(
        recs, {1: 1.0, 3: 1.2}, {"model k=2": {"fixed": 0.1, "per_token": 0.4}})}
    # 8 tokens over 4 steps, each 1.2 + 0.1 + 0.8 = 2.1 plain-step costs
    assert rows["model k=2"]["draft_bound"] == pytest.approx(8 / 8.4)
    assert rows["model k=2"]["zero_cost"] == pytest.approx(8 / 4.8)
    assert rows["ngram k=2"]["draft_bound"] is None and rows["plain"]["draft_bound"] is None
    classes = {c["config"]: c for c in analysis.class_summary(list(rows.values()))}
    assert classes["model k=2"]["draft_bound"] == pytest.approx(8 / 8.4)
