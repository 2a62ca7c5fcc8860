"""``specdec.drafters.adaptive``: expected tokens and the best k against exact enumeration,
and the adaptive drafter learning its k from what is accepted (pure Python, no model)."""

import random

import pytest

from specdec.drafters.adaptive import AdaptiveKDrafter, best_k, expected_tokens

from .test_chain import Fixed


def test_expected_tokens_and_best_k_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        acc = [rng.random() for _ in range(6)]
        cost = {L: 1.0 + rng.random() * (L - 1) * 0.3 for L in range(1, 8)}
        # brute force over sampled outcomes is noisy; use the exact enumeration instead
        for k in range(7):
            exp = 1.0
            for j in range(1, k + 1):
                p = 1.0
                for i in range(j):
                    p *= acc[i]
                exp += p
            assert abs(expected_tokens(acc, k) - exp) < 1e-12
        k = best_k(acc, cost, 6)
        assert all(expected_tokens(acc, k) / cost[k + 1] >= expected_tokens(acc, j) / cost[j + 1] - 1e-12 for j in range(7))


def test_adaptive_k_learns_to_draft_long_when_drafts_are_accepted():
    cost = {L: 1.0 + 0.1 * (L - 1) for L in range(1, 10)}
    good = AdaptiveKDrafter(Fixed("f", list(range(8))), cost, k_max=8)
    for _ in range(30):
        good.propose([0], 8)
        good.observe(8)
    assert good.chosen[-1] == 8
    bad = AdaptiveKDrafter(Fixed("f", list(range(8))), cost, k_max=8)
    for _ in range(30):
        bad.propose([0], 8)
        bad.observe(0)
    assert bad.chosen[-1] == 0
    with pytest.raises(ValueError, match="cost curve lacks"):
        AdaptiveKDrafter(Fixed("f", []), {1: 1.0}, k_max=4)


def test_best_k_counts_the_drafters_own_cost_and_the_hit_rate_by_brute_force():
    rng = random.Random(1)
    for _ in range(200):
        acc = [rng.random() for _ in range(5)]
        cost = {L: 1.0 + rng.random() * (L - 1) * 0.3 for L in range(1, 7)}
        dc = {"fixed": rng.random() * 0.3, "per_token": rng.random() * 0.5}
        scale, hit = 1.0 + rng.random(), rng.random()

        def rate(k):
            if k == 0:
                return 1.0 / (cost[1] * scale)
            gain = hit * expected_tokens(acc, k) + 1.0 - hit
            verify = scale * (hit * cost[k + 1] + (1 - hit) * cost[1])
            return gain / (verify + dc["fixed"] + dc["per_token"] * k)

        rates = [rate(k) for k in range(6)]
        want = min(k for k in range(6) if rates[k] == max(rates))  # ties: the smaller k
        assert best_k(acc, cost, 5, dc, scale=scale, hit=hit) == want


def test_a_k_of_zero_still_probes_one_token_every_eighth_step():
    cost = {L: 1.0 + 0.5 * (L - 1) for L in range(1, 6)}  # drafting never pays at the prior
    inner = Fixed("f", [1, 2, 3, 4])
    ad = AdaptiveKDrafter(inner, cost, k_max=4)
    sizes = [len(ad.propose([0], 4)) for _ in range(16)]
    assert ad.chosen == [0] * 16
    assert sizes == [0] * 7 + [1] + [0] * 7 + [1]
    ad.observe(1)  # only the probe's observation reaches the inner drafter
    assert inner.seen == [1] and ad.name == "f+adaptive-k"


def test_a_curve_timed_under_load_is_priced_monotone():
    """A dip in a measured curve (noise on a loaded machine) is averaged with what it
    undercuts: no k looks cheaper than a shorter one; a monotone curve is kept as it is."""
    from specdec.drafters.adaptive import monotone

    rng = random.Random(0)
    for _ in range(200):
        curve = {L: rng.uniform(1.0, 3.0) for L in range(1, 10)}
        out = monotone(curve)
        assert list(out) == list(curve)
        assert all(out[L] <= out[L + 1] + 1e-12 for L in range(1, 9))
        assert abs(sum(out.values()) - sum(curve.values())) < 1e-9  # pooled, not raised
        rising = dict(zip(curve, sorted(curve.values())))
        assert monotone(rising) == rising
    priced = AdaptiveKDrafter(Fixed("f", [5] * 4), {1: 1.0, 2: 1.3, 3: 1.1, 4: 1.2, 5: 1.5}, 4)
    assert priced.cost[2] == priced.cost[3] == pytest.approx(1.2)
