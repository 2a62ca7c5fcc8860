"""``specdec.policy.adaptive``: expected tokens and the best k against exact enumeration,
and the adaptive drafter learning its k from what is accepted (pure Python, no model)."""

import random

import pytest

from specdec.policy.adaptive import AdaptiveK, best_k, expected_tokens

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
    good = AdaptiveK(Fixed("f", list(range(8))), cost, k_max=8)
    for _ in range(30):
        good.propose([0], 8)
        good.observe(8)
    assert good.chosen[-1] == 8
    bad = AdaptiveK(Fixed("f", list(range(8))), cost, k_max=8)
    for _ in range(30):
        bad.propose([0], 8)
        bad.observe(0)
    assert bad.chosen[-1] == 0
    with pytest.raises(ValueError, match="cost curve lacks"):
        AdaptiveK(Fixed("f", []), {1: 1.0}, k_max=4)


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
    ad = AdaptiveK(inner, cost, k_max=4)
    sizes = [len(ad.propose([0], 4)) for _ in range(16)]
    assert ad.chosen == [0] * 16
    assert sizes == [0] * 7 + [1] + [0] * 7 + [1]
    ad.observe(1)  # only the probe's observation reaches the inner drafter
    assert inner.seen == [1] and ad.name == "f+adaptive-k"


def test_a_curve_timed_under_load_is_priced_as_its_robust_line():
    """A curve scattered by a loaded machine is priced as the robust line through it: a
    linear curve is kept, and outliers (the shared CPU's 3.7x at L = 2) do not move it;
    lengths past k_max + 1 are priced on the same line."""
    from specdec.policy.adaptive import robust_line

    rng = random.Random(0)
    for _ in range(100):
        base, slope = rng.uniform(0.01, 1.0), rng.uniform(0.0, 0.2)
        line = {L: base + slope * (L - 1) for L in range(1, 10)}
        assert robust_line(line, 9) == pytest.approx(line)
        noisy = dict(line)
        for L in rng.sample(range(2, 10), 2):  # points hit by other processes
            noisy[L] *= rng.uniform(2.0, 6.0)
        fitted = robust_line({**noisy, 24: 99.0}, 9)
        assert fitted[2] - fitted[1] <= 1.5 * slope + 0.25 * base  # the outliers barely tilt it
        assert fitted[24] == pytest.approx(fitted[1] + 23 * (fitted[2] - fitted[1]))
    shared_cpu = {1: 0.177, 2: 0.649, 3: 1.232, 4: 0.284, 5: 1.242, 6: 1.275, 7: 0.403,
                  8: 0.400, 9: 0.730}  # as measured beside five other jobs (lab/gate-trace)
    priced = AdaptiveK(Fixed("f", [5] * 4), shared_cpu, 8)
    assert priced.cost[2] / priced.cost[1] < 1.1 and priced.cost[9] / priced.cost[1] < 1.6
