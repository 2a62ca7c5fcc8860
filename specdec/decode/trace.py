"""A per-step trace of a single stream's decode: what the cost gate chose and why (k, the
acceptance estimate, predicted vs observed seconds, pauses, probes, shadow guesses, the
drafter's own time) beside what the step emitted, one JSON line per step.

Contract: ``with tracing(path) as t:`` is the only switch (a context variable, undone on
exit); ``loop.stream`` reads ``active()`` once per request and hands its steps and decode
policy to ``Tracer.follow``, so with no trace a step costs nothing more. Times are the step's own (its one host sync): no sync is added. One row per
Step the stream yields, so rows agree with the request's stats (steps, accepted tokens).
Tests: tests/decode/test_trace.py. Read on real questions: lab/gate-trace/README.md.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Iterator

from ..policy.adaptive import draft_seconds, expected_tokens
from ..policy.drafting import DecodePolicy
from ..policy.gate import CostGate
from ..policy.learnt import shape_at
from .step import Step

_ACTIVE: ContextVar["Tracer | None"] = ContextVar("specdec_trace", default=None)


def active() -> "Tracer | None":
    """The trace being written (None: tracing is off)."""
    return _ACTIVE.get()


@contextmanager
def tracing(path: str) -> Iterator["Tracer"]:
    """Trace every single stream decoded inside the block into ``path`` (JSONL)."""
    with open(path, "w", encoding="utf-8") as f:
        tracer = Tracer(f)
        token = _ACTIVE.set(tracer)
        try:
            yield tracer
        finally:
            _ACTIVE.reset(token)


@dataclass
class Gated:
    """What the cost gate knew before a step (None fields: the drafter has no gate)."""

    paused: bool = False
    state: int | None = None  # gate.REJECTED / ACCEPTED / RUN: which slot counts price it
    probe: int = 0  # verify steps left of a probe
    offer: int = 0  # a host drafter's last offer's length (its drafts are priced on it)
    accept: list[float] = field(default_factory=list)  # per-slot acceptance estimate
    hit: float | None = None  # how often the drafter proposes anything
    scale: float | None = None  # observed / predicted verify step
    plain_s: float | None = None  # predicted pipelined plain token
    shape: dict[int, float] = field(default_factory=dict)  # a drafted step's over the curve's, by length
    guess: int = 0  # tokens of the pending shadow guess


def gated(policy: DecodePolicy) -> Gated:
    """What the policy knows (the cost gate's state; only ``paused`` for another)."""
    return Gated(**policy.describe())


class Tracer:
    """Writes one JSON object per step; ``tags`` (e.g. the bench's config and case) and the
    request number go on every row."""

    def __init__(self, out: IO[str]):
        self.out, self.request = out, -1
        self.tags: dict[str, Any] = {}
        self._i = 0

    def tag(self, **tags: Any) -> None:
        self.tags = tags

    def follow(self, steps: Iterator[Step], policy: DecodePolicy) -> Iterator[Step]:
        """A request's steps, each timed (its generator's own time) and written with what
        the policy knew before and after it (a verify step's proposing time from its
        ``took``; a plain step has none)."""
        self.request, self._i = self.request + 1, 0
        while True:
            before, t0 = gated(policy), time.perf_counter()
            policy.last = None
            s = next(steps, None)
            if s is None:
                return
            last = policy.last
            proposing = last.proposing if last is not None and last.block else None
            self._write(policy, before, s, time.perf_counter() - t0, proposing)
            yield s

    def _write(self, policy: DecodePolicy, before: Gated, s: Step, seconds: float,
               propose_s: float | None) -> None:
        after = gated(policy)
        k = s.drafted
        row = {**self.tags, "request": self.request, "step": self._i, "k": k,
               "accepted": s.accepted, "emitted": len(s.tokens), "fed": s.fed,
               "plain": propose_s is None, "observed_s": round(seconds, 6),
               "propose_s": None if propose_s is None else round(propose_s, 6),
               "before": asdict(before), "shadow": after.guess if after.guess and not before.guess else 0,
               "paused_after": after.paused}
        if isinstance(policy, CostGate):  # a host drafter's offer is priced at its proposal
            priced = after if policy.peeks and propose_s is not None else before
            row.update(_predicted(policy, priced, k, propose_s is None))
            row["learnt_s"] = round(policy.learnt_s, 6)  # the wall time its prices learnt
        self.out.write(json.dumps(row) + "\n")
        self._i += 1


def _predicted(gate: CostGate, before: Gated, k: int, plain: bool) -> dict[str, float]:
    """The gate's price of the step it took, from what it knew before: seconds (the verify
    curve at k + 1 times its scale, plus the drafter's cost) and expected emitted tokens."""
    if plain and before.plain_s is not None:
        return {"predicted_s": round(before.plain_s, 6), "expected": 1.0}
    hit = before.hit if before.hit is not None else 1.0
    verify = gate.cost.get(k + 1, float("nan")) * shape_at(before.shape, k + 1)
    seconds = verify * (before.scale or 1.0) + draft_seconds(gate.draft_cost, k)
    return {"predicted_s": round(seconds, 6),
            "expected": round(hit * expected_tokens(before.accept, k) + 1 - hit, 3),
            "draft_pred_s": round(draft_seconds(gate.draft_cost, k), 6)}
