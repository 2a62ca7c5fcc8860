"""What each request drafts with, for the inference thread: its drafter, its drafting
memory (shared, its tenant's, or isolated for a salted request), and the verify cost curve
that prices drafts (cached, else measured in idle time).

Contract: a mixin of ``worker.InferenceWorker`` (its state: ``cfg``, ``model``, ``memory``,
``batcher``, ``curve``...); runs on the inference thread only. ``drafter_for`` builds a
fresh drafter per request; ``commit`` adds a finished request's text to its tenant's memory
unless it said ``store: false`` or was salted. Tests: tests/server/test_worker.py,
tests/server/test_tenants.py."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...calibrate import Calibration
from ...drafters.base import NoDrafter
from ...drafters.spec import DraftResources
from ...eagle.io import load_head
from ...loader import load
from ...policy.build import build_policy
from ...measure import cached_cost_curve, cost_curve_for, draft_cost_for
from ...policy.block import curve_cost, unknown_cost
from ...policy.pricing import BATCH_COST_LENGTHS
from .events import GenRequest
from .memory import SharedMemory

log = logging.getLogger("specdec.server")
# an unseen model's batch cost curve is measured in idle time (``calibrate``): repeats per
# length, and the most seconds of calibration between two looks at the queue (a job that
# arrives meanwhile waits at most that plus one forward)
CALIBRATION_REPEATS = 5
CALIBRATION_SLICE_S = 0.05


class Drafting:
    """``InferenceWorker``'s drafting side: drafters, memories and the cost curve."""

    head: Any = None  # an EAGLE-3 head (--draft-type eagle), shared by every request's drafter

    def _load_draft(self, spec: Any, dtype: str) -> None:
        """The draft model (``self.draft``) or EAGLE-3 head (``self.head``, the target's
        embeddings) that ``--draft-model`` names, if any."""
        if spec.draft_model and spec.uses("eagle"):
            self.head = load_head(spec.draft_model, target=self.model)
        elif spec.draft_model:
            self.draft = load(spec.draft_model, dtype=dtype)

    def _find_curve(self) -> None:
        """The verify cost curve from the cache; without one a ``Calibration`` measures it
        in idle time (``_calibrate``): the server answers at once, whatever it has seen."""

        lengths = [*range(1, 17), *(BATCH_COST_LENGTHS if self.max_batch > 1 else ())]
        curve = cached_cost_curve(self.model, lengths)
        if curve is not None:
            self._use_curve(curve)
            log.info("batching up to %d requests; blocks and cost gates priced by the cached "
                     "verify cost curve", self.max_batch)
            return
        if self.group is not None or self.plain_only is not None or self.recurrent:
            log.info("no verify cost curve cached for this model and none is measured here (a "
                     "sharded or hybrid target): requests draft without the cost gate")
            return
        self.calibration = Calibration(self.model, lengths, repeats=CALIBRATION_REPEATS)
        self.batcher.price.curve = unknown_cost  # several rows decode plain until it is known
        log.info("batching up to %d requests; no verify cost curve cached for this model: "
                 "batches of several requests decode plain and a lone request drafts without "
                 "the cost gate until it is measured, %d forwards in idle time",
                 self.max_batch, self.calibration.total)

    def _use_curve(self, curve: dict[int, float]) -> None:
        self.curve = curve
        if self.max_batch > 1:
            self.batcher.price.reprice(curve_cost(curve))

    def _calibrate(self, budget_s: float = CALIBRATION_SLICE_S) -> None:
        """Calibration forwards for up to ``budget_s`` while no job runs or waits; once
        done, the batch prices its blocks with the curve (and the curve is cached)."""
        cal, t0 = self.calibration, time.monotonic()
        while not self.busy and not len(self.queue) and time.monotonic() - t0 < budget_s:
            if cal.step():
                cal.store()
                self._use_curve(cal.curve)
                log.info("verify cost curve measured and cached: batches and cost gates now "
                         "price their drafts")
                self.calibration = None
                return
            if self.curve is None and cal.estimate() is not None:
                # one round of every length: rough, but better than no pricing at all
                self._use_curve(cal.estimate())
                log.info("verify cost curve: a first estimate prices batches and cost gates "
                         "(%.0f %% measured)", 100 * cal.progress)

    def memory_for(self, req: GenRequest) -> SharedMemory:
        """The drafting memory ``req`` reads: the shared one (one key or none; the memory
        file's), its tenant's own (several keys), or for a salted request one that nothing
        is ever written to."""
        if req.cache_salt is not None:
            return self._isolated
        if not req.tenant:
            return self.memory
        if req.tenant not in self._tenant_memory:
            self._tenant_memory[req.tenant] = SharedMemory.open(None, self.tokenizer,
                                                                self.cfg.speculation)
        return self._tenant_memory[req.tenant]

    def commit(self, req: GenRequest, tokens: list[int]) -> None:
        """A finished request's text joins its tenant's memory (not with ``store: false``
        or a salt)."""
        if req.store and req.cache_salt is None:
            self.memory_for(req).commit(tokens)

    def drafter_for(self, req: GenRequest) -> Any:
        """A fresh drafter for ``req`` under its decode policy (its grammar arrives when the
        request starts)."""
        if self.plain_only is not None:
            return NoDrafter()
        spec = req.speculation
        if spec.speculative and spec.gate and self.curve is None:
            if not self._gate_off_said:
                log.info("the cost gate is off until the verify cost curve is known: requests "
                         "draft k tokens at every step")
                self._gate_off_said = True
            spec = spec.with_options(gate=False)
        k = spec.num_draft_tokens
        cost = self._gate_curve(k + 1) if spec.speculative and spec.gate else \
            self._cost_curve(k + 1) if spec.adaptive_k else None
        priced = spec.speculative and (spec.gate or spec.adaptive_k or spec.draft_tree_budget == "auto")
        memory = self.memory_for(req)
        res = DraftResources(
            tokenizer=self.tokenizer, draft=self.draft, table=memory.table,
            history=memory.history, cost=cost, target=self.model, head=self.head,
            draft_cost=self._draft_cost(spec.draft_type) if priced else None)
        return build_policy(spec, res, temperature=req.sampling.temperature, seed=req.sampling.seed)

    def _gate_curve(self, max_len: int) -> dict[int, float]:
        """The known verify curve at every length 1..max_len (between and beyond the
        measured lengths: ``policy.block.curve_cost``'s interpolation)."""

        cost = curve_cost(self.curve)
        return {L: self.curve.get(L) or cost(L) for L in range(1, max_len + 1)}

    def _draft_cost(self, draft_type: str) -> dict[str, float]:
        if draft_type not in self._draft_costs:  # measured once per drafter (cached on disk)

            self._draft_costs[draft_type] = draft_cost_for(
                draft_type, self.model, self.draft[0] if self.draft else None, head=self.head)
        return self._draft_costs[draft_type]

    def _cost_curve(self, max_len: int) -> dict[int, float]:
        if max_len not in self._costs:  # measured once per length (and cached on disk)

            self._costs[max_len] = cost_curve_for(self.model, max_len)
        return self._costs[max_len]
