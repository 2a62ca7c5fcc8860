"""What cost gates learnt on one verify cost curve, carried from request to request.

Contract: ``Learnt`` is one curve's memory (what a pipelined plain token saves, what a drafted
step of each length costs beside a one-token one, and the acceptance of a host drafter's offers
by grade and length: ``offers.OfferModel``), read and updated by every gate priced on that curve
(``CostGate(memory=)``); ``LearntCurves.on(cost)`` is the one
``Learnt`` for a curve (equal curves, one object), at most ``LearntCurves.limit`` curves kept.
Nothing here is process-global: whoever serves requests owns a ``LearntCurves`` and passes it in
``DraftResources.learnt`` (a server, a bench run, a library process: ``resources.resources_for``).
The pipelined saving is the machine's, like the curve: a ``LearntCurves`` given a ``store`` (a
file per curve beside the cached curves: the library's; a server and a bench keep none) starts
each curve from the ratio the last process kept and keeps its own at each request's end
(``Learnt.keep``), so a process's first request (every ``specdec generate`` call) starts as
later ones do (docs/gate.md, "Reading a trace": translation-181 started paused, 15 steps against
ungated's 13).
Why (issue #46): a request learnt both alone, and an answer of a dozen tokens ends before either
is measured: its first offers were priced on the prior, and it started paused into pipelined
steps that save nothing on this CPU (translation-181: ``P P P L`` where ungated drafts at once).
Tests: tests/drafters/test_gate_live.py, tests/policy/test_learnt.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..core.persist import atomic_write
from .offers import OfferModel

log = logging.getLogger(__name__)
KEPT_SEEN = 10  # a kept ratio counts as this many samples at most: live steps still move it
# the weight of one drafted step in its block length's shape (from 1: the curve's own), a
# quarter of the scale's (``gate.RATIO_WEIGHT``). The shape is the engine's and the curve's
# (constant); the scale is the machine's load (it moves): learnt slower, a change of load is
# read as the scale's, and the shape keeps only what one length costs beside another.
SHAPE_WEIGHT = 0.025


def shape_at(shape: Mapping[int, float], block: int) -> float:
    """What a verify step of ``block`` tokens takes over the curve's price at the gate's scale:
    its own learnt ratio, else the longest shorter drafted block's (a drafted step's host work,
    accepting and trimming the cache, is paid at every length), else 1 (a one-token verify step
    is the scale's own).

    >>> shape_at({2: 1.1, 5: 0.9}, 1), shape_at({2: 1.1, 5: 0.9}, 4), shape_at({2: 1.1, 5: 0.9}, 9)
    (1.0, 1.1, 0.9)
    """
    seen = [b for b in shape if b <= block]
    return shape[max(seen)] if seen else 1.0


@dataclass
class Learnt:
    """One curve's memory. ``ratio``: a pipelined plain token's cost over a one-token verify step
    (from ``seen`` tokens). ``shape``: a drafted step's over the curve's, per length. ``offers``:
    one ``OfferModel`` per drafter and draft length k_max (the acceptance of offers is the
    drafter's; bounded: ``k_max + 1 <= len(curve)``, a handful of
    drafter names). What late drafts lose is the text's, not the
    machine's: it stays the request's (carried, the replay read summarization and RAG 0.02-0.03x
    slower: the last answer's copies kept new text off the pipelined path)."""

    ratio: float = 1.0
    seen: int = 0
    # a drafted step's seconds over the curve's at the scale, per block length (``shape_at``);
    # in memory only, shared by the process's requests on this curve (a new process relearns it)
    shape: dict[int, float] = field(default_factory=dict)
    offers: dict[tuple[str, int], OfferModel] = field(default_factory=dict)
    path: Path | None = None  # where ``ratio`` is kept across processes (None: this process's)
    kept: int = 0  # ``seen`` when last kept or read

    def keep(self) -> None:
        """Write ``ratio`` to ``path`` if it learnt since it was last kept or read (a request's
        end: ``gate.CostGate.end``); the text's offers stay in memory. A cache that cannot be
        written is said (a warning naming it) and does not fail the request, whose output stands."""
        if self.path is None or self.seen == self.kept:
            return
        value = json.dumps({"ratio": self.ratio, "seen": min(self.seen, KEPT_SEEN)}).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(str(self.path), lambda f: f.write(value))
        except OSError as exc:
            log.warning("could not keep the pipelined saving in %s (%s): the next process measures "
                        "it again; check that the cost cache ($SPECDEC_CACHE_DIR) is writable",
                        self.path, exc)
        self.kept = self.seen  # said once per learning, not at every request's end

    def learn_shape(self, block: int, ratio: float) -> None:
        """A drafted step of ``block`` tokens took ``ratio`` times the curve's price at the scale."""
        old = self.shape.get(block, 1.0)
        self.shape[block] = old + SHAPE_WEIGHT * (ratio - old)

    def priced(self, cost: Mapping[int, float]) -> dict[int, float]:
        """The verify curve ``cost`` times each length's seen shape (``shape_at``). Why: the fitted
        line priced a drafted one-token step ~10 ms above a one-token verify step where the
        engine's took ~16 ms more, and a gate drafted one-token offers accepted 7 % of the time
        (qa-338 at 0.91x plain: lab/specbench/full-recheck)."""
        if not self.shape:
            return dict(cost)
        return {L: c * shape_at(self.shape, L) for L, c in cost.items()}

    def offers_for(self, drafter: str, k_max: int, prior: float, decay: float) -> OfferModel:
        """The offer model every gate over ``drafter`` (its name) with ``k_max`` on this curve
        counts into and prices from."""
        key = (drafter, k_max)
        if key not in self.offers:
            self.offers[key] = OfferModel(k_max, prior, decay)
        return self.offers[key]


class LearntCurves:
    """A bounded map from verify cost curve to its ``Learnt`` (one per model and machine: the
    curve is measured and cached per both). A server prices on a provisional curve while it
    calibrates (a new one every few rounds): the least recently used are dropped past ``limit``."""

    def __init__(self, limit: int = 16, store: Callable[[str], Path] | None = None):
        if limit < 1:
            raise ValueError(f"LearntCurves(limit={limit}): keep at least one curve")
        self.limit, self.store = limit, store  # store: a file name -> its path (None: keep none)
        self._by_curve: OrderedDict[tuple[tuple[int, float], ...], Learnt] = OrderedDict()

    def on(self, cost: Mapping[int, float]) -> Learnt:
        """The ``Learnt`` shared by every gate priced on ``cost``."""
        key = tuple(sorted(cost.items()))
        if key in self._by_curve:
            self._by_curve.move_to_end(key)
        else:
            if len(self._by_curve) >= self.limit:
                self._by_curve.popitem(last=False)
            self._by_curve[key] = self._kept(key)
        return self._by_curve[key]

    def _kept(self, key: tuple[tuple[int, float], ...]) -> Learnt:
        """A curve's new memory: the pipelined ratio kept for it by the last process, if any."""
        if self.store is None:
            return Learnt()
        path = self.store(f"pipelined-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}")
        if not path.exists():
            return Learnt(path=path)
        try:
            value = json.loads(path.read_text())
            ratio, seen = float(value["ratio"]), min(int(value["seen"]), KEPT_SEEN)
            if not (0.0 < ratio < 10.0 and seen > 0):
                raise ValueError(f"ratio {ratio}, seen {seen}")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s is unreadable (%s): the pipelined saving is measured again", path, exc)
            return Learnt(path=path)
        return Learnt(ratio=ratio, seen=seen, path=path, kept=seen)

    def __len__(self) -> int:
        return len(self._by_curve)
