"""A verify cost curve measured one forward at a time, in a server's idle moments.

Contract of ``Calibration(model, lengths, repeats=, context=, seed=)``: ``step()`` times one
forward of the next block length (round-robin; round 0 warms up) and returns True when done;
``curve`` is then {L: the floor of its timings} (``measure_floor``: contention only adds time;
a dipping curve gets up to ``ROUNDS`` rounds of ``repeats`` more, then is capped) and ``store()``
caches it; ``estimate()`` is the curve so far; ``progress`` the fraction done. Steps never touch
the model's own state.
Tests: tests/test_calibrate.py. Why not at once (measured): docs/gate.md#calibration."""

from __future__ import annotations

import random
import time
from typing import Sequence

import mlx.core as mx

from .cache.rollback import make_cache, prefill, trim
from .core.model import Model
from .core.vocab import vocab_size
from .measure import store_cost_curve
from .measure_floor import ROUNDS, lower_envelope, settle


class Calibration:
    """A cost curve timed one forward per ``step()``, on its own prefilled cache;
    ``curve`` when done, ``estimate()`` before, ``store()`` caches it."""

    def __init__(self, model: Model, lengths: Sequence[int], *, repeats: int = 5,
                 context: int = 256, seed: int = 0):
        self.model, self.lengths, self.repeats = model, sorted(set(lengths)), repeats
        self._rng = random.Random(seed)
        self._vocab = vocab_size(model)
        self._cache = make_cache(model, max_trim=max(self.lengths) + 1)
        prefill(model, self._cache, [self._rng.randrange(self._vocab) for _ in range(context - 1)])
        self._times: dict[int, list[float]] = {L: [] for L in self.lengths}
        self._done = 0  # forwards timed, warm-up round included
        self._rounds = 1  # timing rounds of ``repeats`` per length planned (more on a dip)
        self.curve: dict[int, float] | None = None

    @property
    def total(self) -> int:
        return (self._rounds * self.repeats + 1) * len(self.lengths)

    @property
    def progress(self) -> float:
        return self._done / self.total

    def step(self) -> bool:
        if self.curve is not None:
            return True
        rnd, i = divmod(self._done, len(self.lengths))
        L = self.lengths[i]
        block = mx.array([[self._rng.randrange(self._vocab) for _ in range(L)]])
        t0 = time.perf_counter()
        mx.eval(mx.argmax(self.model(block, cache=self._cache)[0], axis=-1))
        if rnd:  # round 0 warms up every shape
            self._times[L].append(time.perf_counter() - t0)
        trim(self._cache, L)
        self._done += 1
        if self._done == self.total:
            got = settle(self._times, last=self._rounds == ROUNDS)
            if got is None:  # a dip: a length saw no quiet moment; time every length again
                self._rounds += 1
                return False
            self.curve = got.curve
            self._cache = []  # done: the layers are freed (step returns before using it)
        return self.curve is not None

    def estimate(self) -> dict[int, float] | None:
        if self.curve is not None:
            return self.curve
        if self._done < 2 * len(self.lengths):  # the warm-up round and one counted round
            return None
        return lower_envelope({L: min(v) for L, v in self._times.items()})

    def store(self) -> None:
        if self.curve is None:
            raise ValueError("the calibration is not finished")
        store_cost_curve(self.model, self.curve)
