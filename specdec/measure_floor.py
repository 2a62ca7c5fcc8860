"""The floor of repeated timings: cost measurements robust to a loaded machine.

Contention (other processes, threads, the OS) only ever adds time to a forward, so the least of
several interleaved timings is the closest to what the forward costs on its own, and adding
timings never moves it away (a median moves with the load: issue #46 read cost(3) 1.05 s under
load against 0.084 s quiet). A verify cost curve of floors must rise with the block length
within ``SLACK``; a dip means a shorter length saw no quiet moment, so it is timed again
(``ROUNDS`` in all), then capped by the longer lengths' floors (``lower_envelope``: noise only
adds, so the cap is still no less than the true cost).

Contract: ``timed_floors(keys, repeats, once, clock=, rounds=, rising=)`` -> ``Floors``;
``settle(times, last)``; ``dips(curve)``; ``lower_envelope(curve)``. Pure Python (no mlx).
Tests: tests/test_measure_floor.py. Details: docs/gate.md#measuring-costs."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence, TypeVar, cast

log = logging.getLogger("specdec.measure")
K = TypeVar("K", bound=Hashable)  # what is timed: a block length, or a (length, tree) key

# a longer block may read this much cheaper than a shorter one and still count as rising
# (BLAS picks kernels per shape; the quiet SmolLM2 curve rises everywhere, issue #46)
SLACK = 0.05
# timing rounds (each ``repeats`` interleaved timings per length) before a dip is capped
ROUNDS = 3


@dataclass(frozen=True)
class Floors:
    """A measured curve {key: seconds}: the floor of each key's timings, ``rounds`` timing
    rounds taken, ``capped`` the lengths still dipping after the last (capped by longer ones)."""

    curve: dict
    rounds: int
    capped: tuple = ()


def dips(curve: dict[int, float], slack: float = SLACK) -> list[int]:
    """The lengths that cost less than (1 - ``slack``) x some shorter length's cost."""
    out, top = [], 0.0
    for L in sorted(curve):
        if curve[L] < (1.0 - slack) * top:
            out.append(L)
        top = max(top, curve[L])
    return out


def lower_envelope(curve: dict[int, float]) -> dict[int, float]:
    """Each length's cost capped by every longer length's: non-decreasing, and no value
    rises (a longer block costs at least as much; a floor is never below the true cost)."""
    out, low = {}, math.inf
    for L in sorted(curve, reverse=True):
        low = min(low, curve[L])
        out[L] = low
    return dict(sorted(out.items()))


def settle(times: dict[int, list[float]], last: bool, slack: float = SLACK) -> Floors | None:
    """The floors of ``times`` when they rise with the length (within ``slack``); on the
    ``last`` round the lower envelope of a dipping curve (logged); else None: time again."""
    curve = {L: min(v) for L, v in sorted(times.items())}
    bad = dips(curve, slack)
    if not bad:
        return Floors(curve, 0)
    if not last:
        return None
    log.warning("the verify cost curve still dips at L=%s after re-timing (a loaded machine?): "
                "capped by the longer blocks' costs; re-measure on a quieter machine by deleting "
                "the cached curve under $SPECDEC_CACHE_DIR/cost", bad)
    return Floors(lower_envelope(curve), 0, tuple(bad))


def timed_floors(keys: Sequence[K], repeats: int, once: Callable[[K], None], *,
                 clock: Callable[[], float] = time.perf_counter, rounds: int = 1,
                 rising: bool = False) -> Floors:
    """The floor of ``repeats`` timings of ``once(key)`` per key, every key in each pass (so
    noise hits every key alike) after one untimed warm-up pass over every shape. ``rising``
    (a verify cost curve, int keys): dipping floors are timed ``repeats`` more per round, up
    to ``rounds`` rounds, then capped (``settle``)."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    times: dict[K, list[float]] = {k: [] for k in keys}
    for k in keys:  # warm-up: the first call of a shape compiles and allocates
        once(k)
    for n in range(1, rounds + 1):
        for _ in range(repeats):
            for k in keys:
                t0 = clock()
                once(k)
                times[k].append(clock() - t0)
        if not rising:
            return Floors({k: min(v) for k, v in times.items()}, n)
        got = settle(cast("dict[int, list[float]]", times), last=n == rounds)  # rising: int keys
        if got is not None:
            return Floors(got.curve, n, got.capped)
    raise ValueError("rounds must be >= 1")
