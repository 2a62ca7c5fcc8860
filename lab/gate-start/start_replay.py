"""Issue #46: the paused start's cost on short answers (translation-181), and three start policies tried.

Replays the live loop (``lag_replay.run``: a resume out of a pipelined stretch emits the in-flight
token plain first) with gates that share ``Pipelining`` from question to question (``--carry``), for
the ungated suffix drafter (k = 8), today's ``CostGate`` and three subclasses that change only how a
request starts. Deterministic, no timing (the bench's curve as the clock, a pipelined token ``ratio``
of a one-token verify step); loads the tokenizer only.

    PYTHONPATH=. python3 lab/gate-start/start_replay.py [--show translation-181]

The subclasses were written against the gate before carried offers and the priced start became the
default (gate5): to reproduce replay.txt run it at d87af60; here they stack on the new default.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-live-lag"))

import specdec  # noqa: E402
import lag_replay as L  # noqa: E402
from specdec.policy.gate import CostGate  # noqa: E402
from specdec.policy.learnt import Learnt  # noqa: E402

RESULTS = ("lab/specbench/quick/results.json", "lab/specbench/per-category-1-offers/results.json")


def _saves(g: CostGate) -> float:
    return g.cost[1] * g.scale - g.plain_seconds()


class StrictStart(CostGate):
    """Pipeline only where a pipelined token is measured to save more than late drafts lose (a tie,
    ratio 1, goes to verify steps), and start a request on that same decision (not always paused)."""

    def pipelines(self) -> bool:
        if not self._ratio_seen:
            return True
        return _saves(self) > (self._late.lost / self._late.asks if self._late.asks else 0.0)

    def _start(self) -> None:
        super()._start()
        if self._paused and self.peeks and self._ratio_seen:
            self._paused = self.pipelines()


class PricedStart(CostGate):
    """Price the drafter's offer on the prompt as ``watch`` prices every paused token's (a paused
    start never looked at it: no token is in flight yet, so a start that drafts is not late)."""

    def begin(self, prompt_ids) -> None:
        super().begin(prompt_ids)
        if self._paused and self.peeks and self._wants_priced_start():
            offer = self.inner.propose(prompt_ids, self._k)
            self._pend(prompt_ids, offer)
            self._paused = self._idle_price(len(offer)) == 0 and self.pipelines()

    def _wants_priced_start(self) -> bool:
        return True


class PricedStartNoSaving(PricedStart):
    """``PricedStart`` only where pipelining is measured (carried) to save nothing."""

    def _wants_priced_start(self) -> bool:
        return bool(self._ratio_seen) and _saves(self) <= 0.0


_SHARED: dict = {}


class CarriedOffers(CostGate):
    """Every gate on the curve reads and counts one ``OfferModel`` (offer acceptance carried
    across requests, decayed as within one): a request's first offers priced on what the ones
    before saw, not on the prior."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.offers = _SHARED.setdefault("offers", self.offers)


class CarriedOffersPricedStart(CarriedOffers, PricedStartNoSaving):
    """Both: offers carried, and the prompt's offer priced at the start where pipelining saves nothing."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--show", default="translation-181")
    args = ap.parse_args()
    _, tok = specdec.load("smollm2-135m", dtype="float32")
    curve = {int(k): v for k, v in json.load(open(RESULTS[0]))["cost_curve"].items()}
    line = L.robust_line(curve, L.K + 1)
    by_q = defaultdict(list)
    for path in RESULTS:
        for q in L.turns(path, tok):
            by_q[q.name].append(q)
    gates = {"ungated": None, "default": CostGate, "strict start": StrictStart,
             "priced start": PricedStart, "priced, no saving": PricedStartNoSaving,
             "carried offers": CarriedOffers, "carried + priced": CarriedOffersPricedStart}
    for ratio in (1.0, 0.9):
        print(f"== a pipelined token = {ratio} one-token verify step (live, carried)")
        per = {}
        for name, cls in gates.items():
            memory = Learnt() if cls else None
            _SHARED.clear()
            rows = [r for qs in by_q.values()
                    for r in L.run(qs, tok, curve, line, cls, cls is not None, True, ratio, memory)]
            per[name] = L.summary(name, rows, line, ratio)
            for r in rows:
                if r["name"] == args.show and r["turn"] == 0:
                    print("   ", " ".join(r["steps"]))
        print("per question, speed / accepted:", " / ".join(per))
        for q in per["ungated"]:
            print(f"  {q:20s}", "  ".join(f"{per[n][q][1]:.3f}/{per[n][q][0]:<3d}" for n in per))


if __name__ == "__main__":
    main()
