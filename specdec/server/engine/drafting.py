"""What each request drafts with, for the inference thread: its drafter, its drafting
memory (shared, its tenant's, or isolated for a salted request), and the verify cost curve
that prices drafts (cached, else measured in idle time).

Contract: a mixin of ``worker.InferenceWorker`` (its state: ``cfg``, ``model``, ``memory``,
``batcher``, ``curve``...); runs on the inference thread only. ``drafter_for`` gives a
request the server's resources (memories, curve) and builds its fresh drafter with the one
``resources.drafter_for``; ``commit`` adds a finished request's text to its tenant's memory
unless it said ``store: false`` or was salted (such a request's ngram-mod drafter writes a
table of its own). Tests: tests/server/test_worker.py,
tests/server/test_tenants.py."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import mlx.nn as nn

from ...calibrate import Calibration
from ...core.model import Model
from ...drafters.base import NoDrafter
from ...drafters.spec import DraftResources
from ...eagle.io import load_head
from ...eagle.mtp import load_for
from ...loader import load
from ...resources import drafter_for
from ...measure import cached_cost_curve, cost_curve_for, draft_cost_for
from ...policy.block import curve_cost, unknown_cost
from ...policy.learnt import LearntCurves
from ...policy.pricing import BATCH_COST_LENGTHS, BlockPrice
from ..config import ServerConfig
from .batcher import Batcher
from .events import GenRequest, JobQueue
from .memory import SharedMemory

log = logging.getLogger("specdec.server")
# an unseen model's batch cost curve is measured in idle time (``calibrate``): repeats per
# length, and the most seconds of calibration between two looks at the queue (a job that
# arrives meanwhile waits at most that plus one forward)
CALIBRATION_REPEATS = 5
CALIBRATION_SLICE_S = 0.05


class Drafting:
    """``InferenceWorker``'s drafting side: drafters, memories and the cost curve."""

    # the worker's state read here (set by ``InferenceWorker``)
    cfg: ServerConfig
    model: Model
    tokenizer: Any  # the tokenizer's seam (a HF tokenizer or the GGUF one)
    draft: tuple[Any, Any] | None  # (draft model, its tokenizer)
    mtp: Any  # the checkpoint's MTP block (eagle.mtp) with --draft-type mtp
    group: Any
    max_batch: int
    plain_only: str | None
    recurrent: bool
    batcher: Batcher | None
    queue: JobQueue
    memory: SharedMemory
    _isolated: SharedMemory
    _tenant_memory: dict[str, SharedMemory]
    curve: dict[int, float] | None
    calibration: Calibration | None
    _gate_off_said: bool
    _tenant_learnt: dict[str, LearntCurves]  # what cost gates learnt, per tenant ("": shared)
    _costs: dict[int, dict[int, float]]
    _draft_costs: dict[str, dict[str, float]]
    head: Any = None  # an EAGLE-3 head (--draft-type eagle), shared by every request's drafter

    @property
    def busy(self) -> int:
        """How many jobs run (``InferenceWorker.busy``: calibration waits while any do)."""
        raise NotImplementedError

    def _price(self) -> BlockPrice:
        """The batcher's block prices, which the cost curve sets."""
        if not isinstance(self.batcher, Batcher):
            raise RuntimeError("the verify cost curve prices the batcher's blocks: none runs")
        return self.batcher.price

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
        self._price().curve = unknown_cost  # several rows decode plain until it is known
        log.info("batching up to %d requests; no verify cost curve cached for this model: "
                 "batches of several requests decode plain and a lone request drafts without "
                 "the cost gate until it is measured, %d forwards in idle time",
                 self.max_batch, self.calibration.total)

    def _use_curve(self, curve: dict[int, float]) -> None:
        self.curve = curve
        if self.max_batch > 1:
            self._price().reprice(curve_cost(curve))

    def _calibrate(self, budget_s: float = CALIBRATION_SLICE_S) -> None:
        """Calibration forwards for up to ``budget_s`` while no job runs or waits; once
        done, the batch prices its blocks with the curve (and the curve is cached)."""
        cal, t0 = self.calibration, time.monotonic()
        if cal is None:
            return
        while not self.busy and not len(self.queue) and time.monotonic() - t0 < budget_s:
            if cal.step() and cal.curve is not None:  # step() says whether the curve is done
                cal.store()
                self._use_curve(cal.curve)
                log.info("verify cost curve measured and cached: batches and cost gates now "
                         "price their drafts")
                self.calibration = None
                return
            if self.curve is None and (estimate := cal.estimate()) is not None:
                # one round of every length: rough, but better than no pricing at all
                self._use_curve(estimate)
                log.info("verify cost curve: a first estimate prices batches and cost gates "
                         "(%.0f %% measured)", 100 * cal.progress)

    def load_drafters(self) -> None:
        """What ``--draft-model`` names: with ``--draft-type mtp`` the checkpoint holding the MTP
        block (default: the model's own directory), with ``eagle`` an EAGLE-3 head (sharing the
        target's embeddings), else a draft model."""
        spec = self.cfg.speculation
        if spec.uses("mtp"):
            self.mtp = load_for(cast("nn.Module", self.model), spec.draft_model)
        elif spec.draft_model and spec.uses("eagle"):
            self.head = load_head(spec.draft_model, target=cast("nn.Module", self.model))
        elif spec.draft_model:
            self.draft = load(spec.draft_model, dtype=self.cfg.dtype)

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

    def learnt_for(self, req: GenRequest) -> LearntCurves:
        """What ``req``'s cost gate starts from and adds to, partitioned as its drafting
        memory (offer acceptance is learnt from text): the shared one (one key or none), its
        tenant's own (several keys), or for a salted request a fresh one nothing carries."""
        if req.cache_salt is not None:
            return LearntCurves()
        return self._tenant_learnt.setdefault(req.tenant, LearntCurves())

    @staticmethod
    def stores(req: GenRequest) -> bool:
        """Whether ``req``'s text may join a drafting memory (not with ``store: false`` or a
        salt)."""
        return req.store and req.cache_salt is None

    def commit(self, req: GenRequest, tokens: list[int]) -> None:
        """A finished request's text joins its tenant's memory, if it ``stores``."""
        if self.stores(req):
            self.memory_for(req).commit(tokens)

    def drafter_for(self, req: GenRequest) -> Any:
        """A fresh drafter for ``req`` under its decode policy (its grammar arrives when the
        request starts)."""
        if self.plain_only is not None:
            return NoDrafter()
        spec = req.gen.draft
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
        # an ngram-mod drafter writes its request's text into the table it drafts from (the
        # prompt at begin, the answer as it grows and at end): a request that does not
        # store gets a fresh table of its own, so its text joins no memory
        res = DraftResources(
            tokenizer=self.tokenizer, draft=self.draft, table=memory.table if self.stores(req) else None,
            history=memory.history, cost=cost, target=self.model, mtp=self.mtp, head=self.head,
            draft_cost=self._draft_cost(spec.draft_type) if priced else None,
            learnt=self.learnt_for(req))
        return drafter_for(spec, self.model, self.tokenizer, res, sampling=req.gen.sampling)

    def _gate_curve(self, max_len: int) -> dict[int, float]:
        """The known verify curve at every length 1..max_len (between and beyond the
        measured lengths: ``policy.block.curve_cost``'s interpolation)."""

        curve = self.curve
        if curve is None:
            raise RuntimeError("the cost gate prices with the verify cost curve: none is known yet")
        cost = curve_cost(curve)
        return {L: curve.get(L) or cost(L) for L in range(1, max_len + 1)}

    def _draft_cost(self, draft_type: str) -> dict[str, float]:
        if draft_type not in self._draft_costs:  # measured once per drafter (cached on disk)

            self._draft_costs[draft_type] = draft_cost_for(
                draft_type, self.model, self.draft[0] if self.draft else None, head=self.head,
                mtp=self.mtp)
        return self._draft_costs[draft_type]

    def _cost_curve(self, max_len: int) -> dict[int, float]:
        if max_len not in self._costs:  # measured once per length (and cached on disk)

            self._costs[max_len] = cost_curve_for(self.model, max_len)
        return self._costs[max_len]
