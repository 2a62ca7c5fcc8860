"""The worker's continuous-batching loop: every running request decodes in one forward.

Contract (run on the inference thread only, by ``InferenceWorker`` when batching is on):
- ``Batcher(worker).run_once(tick)`` is one scheduling round: admit queued jobs while
  fewer than ``max_batch`` run; prefill one chunk (``CHUNK`` tokens) of the oldest job
  still prefilling (so the running ones keep decoding while a long prompt arrives); run
  one batched decode step (``specdec.decode.batch.Batch``) over the rows that are prefilled,
  without drafts while prompts wait for their prefill (a longer step would delay every
  one of them; measured at 32 clients: speculating then cost 5-7 % of throughput and
  half again of the p95 time to first token);
  send each row's tokens to its client; finish rows at EOS, max tokens, a stop string or
  a cancel at once. With nothing to do it waits up to ``tick`` seconds for a job.
- Each job gets a ``PromptCache`` from the prefix store (or a fresh one when the store is
  off), so a conversation's next turn prefills only what is new; when it finishes, its
  cache (exactly prompt + emitted tokens) goes back to the store.
- Each row verifies its own draft and stops on its own; its events, usage and timings
  are those of the sequential path (``worker._run``). A failure of the batched forward
  fails every running job with 500 and starts an empty batch; the server keeps serving.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ..decode.batch import Batch, Row
from ..engine import Emitter
from ..cache.prompt_cache import make_prompt_cache
from ..core.sampling import Rng
from ..core.stats import SpecStats
from ..core.text import TextOut

log = logging.getLogger("specdec.server")
CHUNK = 256  # prefill tokens per scheduling round: bounds the stall of the running rows


@dataclass
class Active:
    """One admitted job: prefilling (``row`` None) or decoding in the batch."""

    job: Any
    cache: Any  # PromptCache
    pending: list[int]  # prompt tokens still to prefill
    drafter: Any
    text: TextOut
    stats: SpecStats = field(default_factory=SpecStats)
    started: float = field(default_factory=time.perf_counter)
    row: Row | None = None
    emitter: Emitter | None = None
    tokens: list[int] = field(default_factory=list)
    last: float | None = None  # when the previous token went out (metrics)


class Batcher:
    """See the module docstring."""

    def __init__(self, worker: Any, cost: Any):
        self.w = worker
        self.batch = Batch(worker.model, cost)
        self.decoding: list[Active] = []  # in batch row order
        self.prefilling: list[Active] = []

    def __len__(self) -> int:
        return len(self.decoding) + len(self.prefilling)

    def cancel_all(self) -> None:
        """Mark every admitted job cancelled (any thread); ``close`` then ends them."""
        for a in self.decoding + self.prefilling:
            a.job.cancelled.set()

    def close(self) -> None:
        """On the inference thread at shutdown: end every admitted job as cancelled."""
        self.cancel_all()
        self._drop_cancelled()

    def run_once(self, tick: float) -> None:
        self._admit(tick)
        self._drop_cancelled()
        if self.prefilling:
            self._prefill_chunk(self.prefilling[0])
        if self.decoding:
            try:
                steps = self.batch.step(speculate=not self.prefilling)
            except Exception as e:  # noqa: BLE001 (a bug or a resource failure: fail the rows)
                self._fail_all(e)
                return
            for i in reversed(range(len(self.decoding))):
                self._deliver(i, steps[i])

    # -- admission and prefill -------------------------------------------------------------

    def _admit(self, tick: float) -> None:
        while len(self) < self.w.max_batch:
            job = self.w.queue.get(timeout=0 if len(self) else tick)
            if job is None:
                return
            if job.cancelled.is_set():
                self._cancelled(job)
                continue
            try:
                self.prefilling.append(self._start(job))
            except Exception as e:  # noqa: BLE001 (e.g. a drafter that cannot be built)
                log.exception("could not start a request")
                job.state = "finished"
                job.emit(self.w.error_event(e))

    def _start(self, job: Any) -> Active:
        req, w = job.request, self.w
        job.state = "running"
        cache = w.prefixes.take(req.prompt_ids) if w.prefixes.max_bytes else \
            make_prompt_cache(w.model, max_draft_tokens=w.max_draft_tokens)
        reused = cache.reuse(w.model, req.prompt_ids, req.speculation.num_draft_tokens, None)
        a = Active(job, cache, list(req.prompt_ids[reused:-1]), w.drafter_for(req),
                   TextOut(w.tokenizer, req.stop))
        a.stats.drafter, a.stats.prompt_tokens, a.stats.cached_tokens = \
            a.drafter.name, len(req.prompt_ids), reused
        a.drafter.begin(list(req.prompt_ids))
        return a

    def _prefill_chunk(self, a: Active) -> None:
        from ..decode.step import prefill

        chunk, a.pending = a.pending[:CHUNK], a.pending[CHUNK:]
        try:
            prefill(self.w.model, a.cache.layers, chunk)
            a.cache.fed(chunk)
        except Exception as e:  # noqa: BLE001
            self.prefilling.remove(a)
            self._failed(a, e)
            return
        if a.pending:
            return
        self.prefilling.remove(a)
        req = a.job.request
        a.stats.prefill_s = time.perf_counter() - a.started
        params = req.sampling
        a.row = Row(list(req.prompt_ids), a.drafter, req.speculation.num_draft_tokens, params,
                    [req.max_tokens], rng=None if params.greedy else Rng(params.seed),
                    top_logprobs=req.top_logprobs)
        a.emitter = Emitter(a.row.budget, set(self.w.tokenizer.eos_token_ids), a.stats, None, a.started)
        self.batch.join(a.row, a.cache.layers)
        self.decoding.append(a)

    # -- decoding -------------------------------------------------------------------------

    def _deliver(self, i: int, step: Any) -> None:
        a = self.decoding[i]
        out, done = a.emitter.feed(step)
        reason = "length" if done and a.row.budget[0] <= 0 else "stop"
        for e in out:
            text, hit = a.text.feed(e.token)
            a.tokens.append(e.token)
            now = time.perf_counter()
            self.w.metrics.on_token(a.last is None, now - (a.job.submitted if a.last is None else a.last))
            a.last = now
            self.w.send_token(a.job, text, e)
            if hit:
                self._finish(i, "stop", stopped=True)
                return
        if done:
            self._finish(i, reason)

    def _finish(self, i: int, reason: str, stopped: bool = False) -> None:
        a = self.decoding.pop(i)
        a.cache.layers = self.batch.leave(i)
        self._settle(a)
        tail = "" if stopped else a.text.tail()
        final = SimpleNamespace(stats=a.stats, finish_reason=reason, text=tail)
        a.job.state = "finished"
        a.job.emit(self.w.done_event(a.job, final, a.started))

    def _settle(self, a: Active) -> None:
        """The job's tokens go to the shared memory and its cache to the prefix store."""
        req = a.job.request
        self.w.memory.commit(req.prompt_ids + a.tokens)
        a.cache.settle(req.prompt_ids + a.tokens)
        if self.w.prefixes.max_bytes:
            self.w.prefixes.put(a.cache)
            self.w.metrics.on_prefix_store(self.w.prefixes)

    def _drop_cancelled(self) -> None:
        for i in reversed(range(len(self.decoding))):
            a = self.decoding[i]
            if a.job.cancelled.is_set():
                self.decoding.pop(i)
                a.cache.layers = self.batch.leave(i)
                self._settle(a)
                self._cancelled(a.job)
        for a in [a for a in self.prefilling if a.job.cancelled.is_set()]:
            self.prefilling.remove(a)
            a.cache.reset()  # half prefilled: what it holds is not worth keeping
            self._cancelled(a.job)

    def _cancelled(self, job: Any) -> None:
        job.state = "cancelled"
        self.w.metrics.on_cancel()
        from .worker import DoneEvent

        job.emit(DoneEvent("cancelled"))

    def _failed(self, a: Active, e: BaseException) -> None:
        log.error("generation failed: %s: %s", type(e).__name__, e)
        self.w.memory.commit(a.job.request.prompt_ids + a.tokens)
        a.job.state = "finished"
        a.job.emit(self.w.error_event(e))

    def _fail_all(self, e: BaseException) -> None:
        log.exception("a batched step failed: failing its %d requests", len(self.decoding))
        for a in self.decoding:
            self._failed(a, e)
        self.decoding = []
        self.batch = Batch(self.w.model, self.batch.cost)

