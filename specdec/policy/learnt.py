"""What cost gates learnt on one verify cost curve, carried from request to request.

Contract: ``Learnt`` is one curve's memory (what a pipelined plain token saves, and the
acceptance of a host drafter's offers by length: ``offers.OfferModel``), read and updated by
every gate priced on that curve (``CostGate(memory=)``); ``LearntCurves.on(cost)`` is the one
``Learnt`` for a curve (equal curves, one object), at most ``LearntCurves.limit`` curves kept.
Nothing here is process-global: whoever serves requests owns a ``LearntCurves`` and passes it in
``DraftResources.learnt`` (a server, a bench run, a library process: ``resources.resources_for``).
Why (issue #46): a request learnt both alone, and an answer of a dozen tokens ends before either
is measured: its first offers were priced on the prior, and it started paused into pipelined
steps that save nothing on this CPU (translation-181: ``P P P L`` where ungated drafts at once).
Tests: tests/drafters/test_gate_live.py, tests/policy/test_learnt.py.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Mapping

from .offers import OfferModel


@dataclass
class Learnt:
    """One curve's memory. ``ratio``: a pipelined plain token's cost over a one-token verify step
    (from ``seen`` tokens). ``offers``: one ``OfferModel`` per drafter and draft length k_max (the
    acceptance of offers is the drafter's; bounded: ``k_max + 1 <= len(curve)``, a handful of
    drafter names). What late drafts lose is the text's, not the
    machine's: it stays the request's (carried, the replay read summarization and RAG 0.02-0.03x
    slower: the last answer's copies kept new text off the pipelined path)."""

    ratio: float = 1.0
    seen: int = 0
    offers: dict[tuple[str, int], OfferModel] = field(default_factory=dict)

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

    def __init__(self, limit: int = 16):
        if limit < 1:
            raise ValueError(f"LearntCurves(limit={limit}): keep at least one curve")
        self.limit = limit
        self._by_curve: OrderedDict[tuple[tuple[int, float], ...], Learnt] = OrderedDict()

    def on(self, cost: Mapping[int, float]) -> Learnt:
        """The ``Learnt`` shared by every gate priced on ``cost``."""
        key = tuple(sorted(cost.items()))
        if key in self._by_curve:
            self._by_curve.move_to_end(key)
        else:
            if len(self._by_curve) >= self.limit:
                self._by_curve.popitem(last=False)
            self._by_curve[key] = Learnt()
        return self._by_curve[key]

    def __len__(self) -> int:
        return len(self._by_curve)
