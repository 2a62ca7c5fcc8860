"""A verify cost curve robust to a loaded machine (issue #46): the floor of interleaved timings
against a true curve plus non-negative noise on an injected clock (hypothesis), dips timed
again then capped, a cached dipping curve measured again, and a real tiny model's curve timed
while a competing thread loads the CPU. No timing assertions: structure and oracles only."""

from __future__ import annotations

import threading

import pytest
from conftest import cached_tiny, examples, seed_cost_curve
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import measure
from specdec.calibrate import Calibration
from specdec.measure_floor import SLACK, Floors, dips, lower_envelope, timed_floors

LENGTHS = [1, 2, 3, 4, 5]


def true_curve(slopes):
    cost, t = {}, 0.05
    for L, s in zip(LENGTHS, slopes):
        t += s
        cost[L] = t
    return cost


class LoadedClock:
    """A clock that ``once(L)`` advances by ``true[L]`` plus the next of ``noise`` (seconds
    other work took from this forward; cycled): what a forward reads on a loaded machine."""

    def __init__(self, true, noise):
        self.true, self.noise, self.now, self.calls = true, noise, 0.0, 0

    def __call__(self) -> float:
        return self.now

    def once(self, L: int) -> None:
        self.now += self.true[L] + self.noise[self.calls % len(self.noise)]
        self.calls += 1


slopes_st = st.lists(st.floats(0.0, 0.05), min_size=5, max_size=5)
noise_st = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40)


@settings(max_examples=examples(200), deadline=None)
@given(slopes_st, noise_st, st.integers(1, 6), st.integers(1, 6))
def test_noise_never_puts_the_floor_below_the_true_cost_and_repeats_only_lower_it(
        slopes, noise, few, more):
    true = true_curve(slopes)
    got = {}
    for repeats in (few, few + more):
        clock = LoadedClock(true, noise)
        got[repeats] = timed_floors(LENGTHS, repeats, clock.once, clock=clock).curve
        for L in LENGTHS:  # oracle: the timings' own noise, warm-up pass skipped
            seen = [noise[(len(LENGTHS) * (1 + r) + i) % len(noise)]
                    for r in range(repeats) for i in [LENGTHS.index(L)]]
            assert got[repeats][L] == pytest.approx(true[L] + min(seen))
            assert got[repeats][L] >= true[L] - 1e-12
    # more timings never raise an estimate, and one quiet timing per length makes it exact
    assert all(got[few + more][L] <= got[few][L] + 1e-12 for L in LENGTHS)
    # a quiet moment as long as one pass (5 timings in a row, one per length) in every cycle
    # of the load: once the timings span a cycle, every floor is the true cost
    cycle = [*noise, *[0.0] * len(LENGTHS)]
    quiet = LoadedClock(true, cycle)
    exact = timed_floors(LENGTHS, len(cycle) // len(LENGTHS) + 2, quiet.once, clock=quiet).curve
    assert exact == pytest.approx(true, abs=1e-12)


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.integers(1, 40), st.floats(0.001, 10.0), min_size=1, max_size=12))
def test_the_lower_envelope_rises_and_never_raises_a_cost(curve):
    env = lower_envelope(curve)
    assert list(env) == sorted(curve) and not dips(env, slack=0.0)
    assert all(env[L] <= curve[L] for L in curve)
    # where the curve already rises the envelope is the curve itself
    assert env != curve or not dips(curve, slack=0.0)


def test_a_dip_is_timed_again_and_a_lasting_one_is_capped():
    true = {1: 0.06, 2: 0.08, 3: 0.084, 4: 0.094, 5: 0.1}
    # round 1: a competing job takes 1 s from every timing of L=3 (cost(3) 1.05 s, issue #46's
    # reading); round 2: quiet. The dip at L=4 sends it to a second round, which is the truth.
    burst = LoadedClock(true, [0.0])
    spiked = {"on": True}

    def once(L):
        burst.once(L)
        if L == 3 and spiked["on"] and burst.calls > len(LENGTHS):
            burst.now += 1.0
        if burst.calls == len(LENGTHS) * 4:  # warm-up + 3 repeats: the burst ends
            spiked["on"] = False

    got = timed_floors(LENGTHS, 3, once, clock=burst, rounds=3, rising=True)
    assert got.rounds == 2 and got.capped == () and got.curve == pytest.approx(true)
    # a burst that never ends: 3 rounds, then L=3 capped by L=4's floor (still >= its cost)
    stuck = LoadedClock(true, [0.0])
    got = timed_floors(LENGTHS, 2, lambda L: (stuck.once(L), L == 3 and setattr(
        stuck, "now", stuck.now + 1.0)), clock=stuck, rounds=3, rising=True)
    assert got.rounds == 3 and got.capped == (4, 5)
    assert got.curve[3] == pytest.approx(true[4]) and got.curve[3] >= true[3]
    assert not dips(got.curve, slack=0.0)


def test_a_cached_curve_that_dips_is_measured_again_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    loaded = {1: 0.2, 2: 0.62, 3: 1.05, 4: 0.57, 5: 0.03}  # a curve timed under load (issue #46)
    measure.store_cost_curve(model, loaded)
    assert measure.cached_cost_curve(model, [1, 2, 3, 4]) is None  # a server calibrates
    calls = []
    rising = {L: 0.01 * L for L in range(1, 5)}
    monkeypatch.setattr(measure, "verify_cost_floors",
                        lambda m, n, extra=(): calls.append(n) or Floors(rising, 1))
    for _ in range(2):  # L=5 (0.03 s) would dip under the new curve: dropped, not merged
        assert measure.cost_curve_for(model, 4) == rising
    assert calls == [4]  # measured once, then the rising curve is reused
    assert measure.cached_cost_curve(model, [1, 2, 3, 4]) == rising


def test_two_callers_with_different_lengths_share_one_curve_without_measuring_again(tmp_path, monkeypatch):
    """A bench's tree lengths and a CLI's ``auto`` lengths, measured in different runs, disagree
    (L=4 read above L=5): the merge caps L=4 by L=5's floor and keeps every length, so each
    caller's next use reads the cache (dropping the old lengths re-measured at every use)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    readings = {5: {1: 0.1, 2: 0.11, 3: 0.12, 5: 0.20}, 4: {1: 0.1, 2: 0.11, 3: 0.12, 4: 0.22}}
    calls = []
    monkeypatch.setattr(measure, "verify_cost_floors", lambda m, n, extra=(): calls.append(extra)
                        or Floors(readings[extra[0]], 1))
    for _ in range(2):
        for extra in ((5,), (4,)):
            curve = measure.cost_curve_for(model, 3, extra=extra)
            assert not dips(curve, slack=0.0) and extra[0] in curve
    assert calls == [(5,), (4,)]  # each measured once
    assert measure.cached_cost_curve(model, [1, 2, 3, 4, 5]) == {1: 0.1, 2: 0.11, 3: 0.12, 4: 0.20, 5: 0.20}


def test_a_capped_loaded_curve_gives_way_to_lower_readings(tmp_path, monkeypatch):
    """A curve timed under load and capped is cached (an upper bound), then each length takes
    the lower reading: a calibration's quieter curve lowers it, a noisier one does not raise it,
    and a later loaded measurement of more lengths keeps the quiet ones (floors: lower is truer)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    capped = {1: 0.2, 2: 0.3, 3: 0.3, 4: 0.3}  # L=1..3 capped by L=4's floor under load
    loaded = {**capped, 5: 0.32, 6: 0.34}
    readings = iter([Floors(capped, 3, (1, 2, 3)), Floors(loaded, 3, (1, 2, 3))])
    monkeypatch.setattr(measure, "verify_cost_floors", lambda m, n, extra=(): next(readings))
    assert measure.cost_curve_for(model, 4) == capped
    quiet = {L: 0.05 + 0.01 * L for L in range(1, 5)}
    measure.store_cost_curve(model, quiet)  # a server's calibration, later and quieter
    assert measure.cached_cost_curve(model, [1, 2, 3, 4]) == quiet
    measure.store_cost_curve(model, {L: 2 * t for L, t in quiet.items()})  # a noisier one
    assert measure.cached_cost_curve(model, [1, 2, 3, 4]) == quiet
    assert measure.cost_curve_for(model, 6) == {**quiet, 5: 0.32, 6: 0.34}  # more lengths, loaded
    assert measure.cost_curve_for(model, 6) == measure.cached_cost_curve(model, list(range(1, 7)))


def test_a_seeded_curve_is_the_cached_one_or_refused(tmp_path):
    """A test seeds a verify curve (``conftest.seed_cost_curve``) only into a cache holding none
    for the model: over a cached curve each length keeps its lower reading, so a higher seed
    would silently leave the old floor priced; it raises instead and the cached curve stays."""
    model = cached_tiny("llama")
    low = {L: 0.01 * L for L in range(1, 5)}
    seed_cost_curve(model, low, tmp_path)
    assert measure.cached_cost_curve(model, list(low), tmp_path) == low
    with pytest.raises(ValueError, match="already holds a verify cost curve"):
        seed_cost_curve(model, {L: 2 * t for L, t in low.items()}, tmp_path)
    assert measure.cached_cost_curve(model, list(low), tmp_path) == low


def test_a_curve_timed_beside_a_competing_thread_rises(tmp_path):
    """A real forward timed while another thread keeps the CPU busy: the curve rises within
    ``SLACK`` (dips timed again, then capped) and a server's calibration settles the same way."""
    model = cached_tiny("llama")
    stop = threading.Event()

    def compete():
        x = 0
        while not stop.is_set():
            x = (x * 31 + 7) % 1000003

    worker = threading.Thread(target=compete, daemon=True)
    worker.start()
    try:
        curve = measure.verify_cost_curve(model, 4, context=16, repeats=2)
        cal = Calibration(model, LENGTHS, repeats=2, context=16)
        while not cal.step():
            pass
    finally:
        stop.set()
        worker.join()
    for c in (curve, cal.curve):
        assert not dips(c, SLACK) and all(t > 0 for t in c.values())
