"""``specdec.policy.block``: expected tokens, the block length by brute force over
every L, and the cost curve's interpolation (pure Python)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.policy.block import choose_block, curve_cost, expected_tokens, unknown_cost


@given(st.integers(0, 8), st.floats(0, 1))
def test_expected_tokens_is_the_sum_over_accepted_prefixes(drafted, alpha):
    # P(at least j drafts accepted) = alpha^j; plus the target's own token
    assert expected_tokens(drafted, alpha) == pytest.approx(1 + sum(alpha**j for j in range(1, drafted + 1)))


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.data(),
       st.floats(0.0, 2.0), st.floats(0.01, 1.0))
def test_choose_block_is_the_shortest_best_rate(drafts, data, slope, base):
    alphas = data.draw(st.lists(st.floats(0, 1), min_size=len(drafts), max_size=len(drafts)))

    def cost(n):
        return base + slope * n

    def rate(L):
        return sum(expected_tokens(min(L - 1, d), a) for d, a in zip(drafts, alphas)) / cost(len(drafts) * L)

    L = choose_block(drafts, alphas, cost)
    rates = [rate(x) for x in range(1, max(drafts) + 2)]
    assert 1 <= L <= max(drafts) + 1 and rate(L) == max(rates)
    assert rates.index(max(rates)) == L - 1  # ties go to the shorter block


def test_no_draft_means_plain_steps():
    assert choose_block([0, 0], [0.9, 0.9], lambda n: 1.0) == 1


def test_curve_cost_interpolates_between_and_extends_beyond_measured_lengths():
    cost = curve_cost({4: 2.0, 1: 1.0, 2: 1.5})  # any order
    assert [cost(n) for n in (1, 2, 3, 4)] == [1.0, 1.5, 1.75, 2.0]
    assert cost(8) == 3.0 and cost(0) == 0.5  # the last / first segment, extended
    assert unknown_cost(7) == 7.0


def test_a_curve_needs_two_lengths():
    with pytest.raises(ValueError, match="at least two lengths"):
        curve_cost({1: 1.0})


def test_choose_block_prefers_speculation_only_where_it_pays():
    rates = [0.9, 0.9, 0.9, 0.9]
    flat_then_steep = curve_cost({1: 1.0, 8: 1.0, 16: 2.0, 64: 8.0})
    assert choose_block([4] * 4, rates, flat_then_steep) == 2  # 4 rows x 2 = 8 tokens, still flat
    assert choose_block([0] * 4, rates, flat_then_steep) == 1  # nothing drafted: plain
    assert choose_block([4], [0.0], lambda n: 1.0 + n) == 1
