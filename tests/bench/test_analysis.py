"""``specdec.bench.analysis``: the zero-cost bound's worked example, n-by-n parity,
speedups against the same engine's plain runs, per-position acceptance, the geomean."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings, strategies as st

from specdec.bench import analysis


def test_zero_cost_bound_worked_example():
    assert analysis.zero_cost([(5, 4), (5, 1)], 7, {1: 1.0, 5: 1.4}) == pytest.approx(2.5)
    assert analysis.zero_cost([(1, 0)] * 9, 9, {1: 0.1, 2: 0.12}) == pytest.approx(1.0)


def _rec(config, run, tokens, source="specdec", decode_s=1.0, workload="w", turn=0, **kw):
    base = dict(model="m", workload=workload, cls="code_edit", length=None, prompt_tokens=10,
                config=config, source=source, run=run, turn=turn, k=4, tokens=tokens,
                prefill_s=0.1, decode_s=decode_s, generated=len(tokens), drafted=0,
                accepted=0, verify_steps=len(tokens), fed_tokens=len(tokens),
                drafted_by_position=[], accepted_by_position=[],
                steps=[(1, 0)] * len(tokens))
    return {**base, **kw}


def test_parity_is_n_by_n_and_finds_one_bad_run():
    recs = [_rec("plain", r, [1, 2, 3]) for r in (0, 1, 2, 3)]
    recs += [_rec("ngram k=4", r, [1, 2, 3]) for r in (1, 2)]
    recs += [_rec("ngram k=4", 3, [1, 9, 3])]
    recs += [_rec("ngram k=4", 0, [7, 7, 7])]  # the warm-up is not compared
    rows = {r["config"]: r for r in analysis.parity(recs)}
    assert rows["plain"]["comparisons"] == 9 and rows["plain"]["mismatches"] == 0
    assert rows["ngram k=4"]["comparisons"] == 9
    assert rows["ngram k=4"]["mismatches"] == 3 and rows["ngram k=4"]["first_divergence"] == 1


def test_summary_speedup_is_against_the_same_engines_plain_runs():
    recs = [_rec("plain", r, [1] * 10, decode_s=d) for r, d in ((1, 1.0), (2, 2.0), (3, 1.25))]
    recs += [_rec("ngram k=4", r, [1] * 10, decode_s=0.5) for r in (1, 2, 3)]
    recs += [_rec("peer: plain", r, [1] * 10, source="peer", decode_s=0.25) for r in (1, 2, 3)]
    recs += [_rec("peer: pld k=4", r, [1] * 10, source="peer", decode_s=0.125) for r in (1, 2, 3)]
    rows = {r["config"]: r for r in analysis.summarize(recs, {1: 1.0, 2: 1.0})}
    assert rows["plain"]["tok_s"] == pytest.approx(8.0)  # median of 10, 5, 8
    assert rows["ngram k=4"]["speedup"] == pytest.approx(20 / 8)
    assert rows["peer: pld k=4"]["speedup"] == pytest.approx(2.0)
    assert rows["plain"]["tok_s_min"] == 5.0 and rows["plain"]["tok_s_max"] == 10.0


def test_per_position_acceptance_sums_over_runs():
    recs = [_rec("c", 1, [1], drafted_by_position=[2, 2, 1], accepted_by_position=[2, 1, 0]),
            _rec("c", 2, [1], drafted_by_position=[2, 1], accepted_by_position=[1, 1])]
    assert analysis.per_position(recs)["c"] == pytest.approx([0.75, 2 / 3, 0.0])


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.floats(0.1, 10), min_size=1, max_size=6))
def test_geomean_matches_the_definition(xs):
    import math

    assert analysis.geomean(xs) == pytest.approx(math.prod(xs) ** (1 / len(xs)))
