"""policy.pricing: the running average, size classes, and a batch block's learnt price."""

import pytest

from specdec.policy.pricing import EMA_WEIGHT, BlockPrice, ema, size_class


def test_ema_starts_at_the_first_observation_and_moves_by_its_weight():
    assert ema(None, 3.0) == 3.0
    assert ema(1.0, 2.0) == pytest.approx(1.0 + EMA_WEIGHT)
    assert ema(1.0, 2.0, weight=1.0) == 2.0


def test_size_classes_double():
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 2, 3, 3, 4, 4]


def test_no_curve_or_a_lone_row_drafts_as_alone():
    assert BlockPrice().block([3, 1], [0.9, 0.9]) == 4
    assert BlockPrice(lambda n: 1.0).block([5], [0.1]) == 6
    assert not BlockPrice().hopeless(4, 3) and not BlockPrice(lambda n: 1.0).hopeless(1, 0)


def test_observed_steps_scale_the_price_from_their_length_up():
    price = BlockPrice(lambda n: 0.01 * n)
    price.observe(4, 2, 0.16)  # twice what the curve says for 4 x 2 tokens
    assert price.cost(4)(4 * 2) == pytest.approx(0.16)
    assert price.cost(4)(4 * 5) == pytest.approx(0.01 * 20 * 2)  # nearest L <= 5 is 2
    assert price.cost(4)(4 * 1) == pytest.approx(0.04)  # shorter than any observed: as said
    assert price.cost(16)(16 * 2) == pytest.approx(0.32)  # another size class learnt nothing
    price.reprice(lambda n: 0.02 * n)
    assert price.ratio == {} and price.cost(4)(8) == pytest.approx(0.16)


def test_a_price_that_does_not_learn_keeps_the_curve():
    price = BlockPrice(lambda n: 0.01 * n, learn=False)
    price.observe(4, 2, 1.0)
    assert price.ratio == {}


def test_a_flat_curve_drafts_and_a_steep_one_is_hopeless():
    flat = BlockPrice(lambda n: 1.0)  # verifying more tokens costs nothing more
    assert flat.block([4, 4], [0.9, 0.9]) > 1 and not flat.hopeless(2, 4)
    steep = BlockPrice(lambda n: float(n) ** 2)  # every extra token costs more than it gives
    assert steep.block([4, 4], [0.9, 0.9]) == 1 and steep.hopeless(2, 4)
    assert flat.hopeless(2, 0)  # nothing to draft: no block can pay


def test_hopeless_follows_what_the_price_learns_and_a_new_curve():
    """``hopeless`` is remembered per (rows, k) between steps (a pipelined batch asks it
    every step): a step observed dearer, or a new curve, must change the answer."""
    price = BlockPrice(lambda n: 1.0 + 0.01 * n)  # nearly flat: a full block pays
    assert not price.hopeless(4, 4) and not price.hopeless(4, 4)
    for _ in range(20):  # 4 x 2 blocks (and so every longer one) take 50x what the curve says
        price.observe(4, 2, 50.0 * (1.0 + 0.01 * 8))
    assert price.hopeless(4, 4)
    price.reprice(lambda n: 1.0)
    assert not price.hopeless(4, 4)
    price.curve = lambda n: float(n) ** 2  # set directly (the worker's unknown_cost): asked anew
    assert price.hopeless(4, 4)


def test_priced_out_means_no_block_pays_at_full_depth_and_learnt_acceptance():
    """``priced_out``: some row drafts, yet L = 1 at the rows' full depths and estimates
    (between pays-somewhere and ``hopeless``); never for a lone row, no curve, or rows
    that draft nothing (their own policies stopped them, not the batch's price)."""
    price = BlockPrice(lambda n: 1.0 + n)
    assert price.priced_out([4, 4, 4], [0.5] * 3) and not price.hopeless(3, 4)
    assert not price.priced_out([4, 4, 4], [0.95] * 3)  # a block pays at high acceptance
    assert not price.priced_out([0, 0, 0], [0.5] * 3) and not price.priced_out([4], [0.1])
    assert not BlockPrice().priced_out([4, 4], [0.1, 0.1])
    # a row drafting nothing still takes its slot in every block of the batch
    assert price.priced_out([4, 4, 0], [0.9, 0.9, 0.5]) and not price.priced_out([4, 4], [0.9, 0.9])
