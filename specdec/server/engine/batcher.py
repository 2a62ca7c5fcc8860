"""The server's one inference path: every running request decodes in one batched step.

Contract (inference thread only): ``Batcher.run_once(tick)`` is one scheduling round: admit
queued jobs up to ``max_batch`` (and the KV budget); prefill up to ``CHUNK`` tokens (arriving
prompts together in one forward, else a chunk of the oldest); one batched decode step over
prefilled rows, without drafts while prompts wait; send tokens; finish rows at once and park
their slots until leaving pays. Each job is a ``decode.request.Request``, or with ``wedlm``
settings (``--decoder wedlm``) a window of WeDLM's lossy decoder (``wedlm_rows``); a job's
failure is its own error, a failed step fails the running jobs with 500 and the thread keeps
serving. Prefill is ``prefill``; a row and what it needs of its worker, ``rows``.
Tests: tests/server/test_batcher.py, tests/server/test_wedlm_batcher.py; docs/batching-and-server.md#the-batcher."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ...core.text import TextOut
from ...core.wedlm import WedlmSettings
from ...decode import loop
from ...decode.batch import Batch, RowFailed
from ...decode.request import Request
from ...decode.step import Step
from ...engine import grammar_for, tree_policy
from ...policy.pricing import BlockPrice
from ..http.errors import APIError
from .events import DoneEvent, Job, coalesced
from .kv_budget import release_idle_memory
from .prefill import Prefilling
from .rows import Active, WorkerPort
from .wedlm_rows import Window, WedlmRows

log = logging.getLogger("specdec.server")


class Batcher(Prefilling, WedlmRows):
    """The batched scheduling loop of the inference thread: ``run_once(tick)`` admits,
    prefills, runs one decode step and finishes rows (``wedlm``: every job is a WeDLM
    window, stepped instead)."""

    def __init__(self, worker: WorkerPort, cost: Callable[[int], float] | None,
                 wedlm: WedlmSettings | None = None):
        self.worker, self.wedlm = worker, wedlm
        self.windows: list[Window] = []  # WeDLM jobs (``wedlm_rows``)
        self.price = BlockPrice(cost)  # outlives each batch: what steps cost here stays true
        self.batch = Batch(worker.model, price=self.price)
        # in batch row order; None: a finished row's slot, parked (``Batch.park_rows``)
        self.decoding: list[Active | None] = []
        self.prefilling: list[Active] = []
        self.held: Job | None = None  # the next job, waiting for KV budget (``_fits``)
        self.parked_tokens = 0  # the longest reservation among the parked slots
        self._worked = False  # rows ran since the batch was last empty (``run_once``)

    def __len__(self) -> int:
        return len(self.running) + len(self.prefilling) + len(self.windows)

    @property
    def running(self) -> list[Active]:
        return [a for a in self.decoding if a is not None]

    def cancel_all(self) -> None:
        """Mark every admitted job cancelled (any thread); ``close`` then ends them."""
        for job in self.jobs:
            job.cancelled.set()

    def end_all(self, error: APIError) -> None:
        """On the inference thread: every admitted job ends with ``error`` (an APIError),
        which its client reads as an error event; the batch starts empty."""
        for a in self.running + self.prefilling:
            self._failed(a, error)
        self._end_windows(error)
        if self.held is not None:
            self.held.state = "finished"
            self.held.emit(self.worker.error_event(error))
        self.prefilling, self.decoding, self.held, self.parked_tokens = [], [], None, 0
        self.batch = Batch(self.worker.model, price=self.price)
        self._worked = False
        release_idle_memory()

    def close(self) -> None:
        """On the inference thread at shutdown: end every admitted job as cancelled."""
        self.cancel_all()
        self._drop_cancelled()

    def run_once(self, tick: float) -> None:
        """One scheduling round, its events sent together at its end (``events.coalesced``);
        a round that emptied the batch (rows finished, failed or were cancelled) hands its
        working set back to the system."""
        try:
            with coalesced():  # the round's events: one wake of the event loop
                self._round(tick)
        finally:
            if self._worked and not len(self):
                self._worked = False
                release_idle_memory()  # the batch's working set, back to the system

    def _round(self, tick: float) -> None:
        self._admit(tick)
        self._worked = self._worked or bool(len(self))
        self._drop_cancelled()
        if self.windows:
            self._step_windows()
        if self.prefilling:
            self._prefill()
        if self.running:
            try:
                steps = loop.step(self.batch, speculate=not self.prefilling)
            except RowFailed as e:  # before the cache was touched: that row leaves alone
                self._end_rows([], {e.row: e.error})
                return
            except Exception as e:  # noqa: BLE001 (a bug or a resource failure: fail the rows)
                self._fail_all(e)
                return
            self._synced()  # parked rows that rode along long enough left first
            # rows that joined while a pipelined step was queued (the last ones) may
            # have no Step yet: theirs comes with the next
            done: list[int] = []
            failed: dict[int, BaseException] = {}
            for i, step in enumerate(steps):
                try:
                    if self._deliver(i, step):
                        done.append(i)
                except Exception as e:  # noqa: BLE001 (its detokenizer, stop matcher...: its error)
                    failed[i] = e
            try:
                self._end_rows(done, failed)
            except Exception as e:  # noqa: BLE001 (leaving broke the batch: every row's error, not a hang)
                self._fail_all(e)

    # -- admission and prefill -------------------------------------------------------------

    def _admit(self, tick: float) -> None:
        while len(self) < self.worker.max_batch:
            job, self.held = self.held or self.worker.queue.get(timeout=0 if len(self) else tick), None
            if job is None:
                return
            if job.cancelled.is_set():
                self._cancelled(job)
                continue
            if not self._fits(job):  # it waits, first in line, until rows leave
                self.held = job
                return
            try:
                if self.wedlm is not None:
                    self.windows.append(self._start_window(job, self.wedlm))
                else:
                    self.prefilling.append(self._start(job))
            except Exception as e:  # noqa: BLE001 (e.g. a drafter that cannot be built)
                log.exception("could not start a request")
                job.state = "finished"
                job.emit(self.worker.error_event(e))

    def _fits(self, job: Job) -> bool:
        """Whether ``job``'s row keeps the batch cache inside the KV budget (``kv_budget``):
        every slot, parked ones too, padded to the longest reservation (prompt + max_tokens:
        what a row may grow to). A job alone always runs (the API refused it if it could
        never fit; the parked slots leave when it joins)."""
        kv = self.worker.kv
        if kv is None or not len(self):
            return True
        longest = max(self.parked_tokens, job.request.reserved, *(j.request.reserved for j in self._admitted()))
        return kv.fits(len(self.decoding) + len(self.prefilling) + len(self.windows) + 1, longest)

    def reserved_bytes(self) -> int:
        """What the batch cache (a window's own cache counted as a row) may grow to now
        (any thread: a snapshot)."""
        kv, active = self.worker.kv, self._admitted()
        if kv is None or not active:
            return 0
        longest = max(self.parked_tokens, *(j.request.reserved for j in active))
        return kv.batch_bytes(len(self.decoding) + len(self.prefilling) + len(self.windows), longest)

    def _start(self, job: Job) -> Active:
        w, job.state = self.worker, "running"
        asked, gen = job.request, job.request.gen  # the one value, passed to the row unchanged
        grammar = grammar_for(w.model, w.tokenizer, gen.response_format)
        drafter = w.drafter_for(asked)
        cache = w.prefixes.take(asked.prompt_ids, asked.scope) if w.prefixes.max_bytes else None
        req = Request(w.model, asked.prompt_ids, gen, drafter=drafter, eos=w.tokenizer.eos_token_ids,
                      tree=tree_policy(w.model, gen.draft, drafter), prompt_cache=cache,
                      text=TextOut(w.tokenizer, gen.stop), processors=[grammar] if grammar else ())
        started = time.perf_counter()
        req.start()
        return Active(job, req, started)

    def _synced(self) -> None:
        """Drop the parked slots the batch let go of (all at once: on a join, a step or
        enough parked)."""
        if None in self.decoding and not any(r.parked for r in self.batch.rows):
            self.decoding = list[Active | None](self.running)
        if None not in self.decoding:
            self.parked_tokens = 0

    # -- decoding -------------------------------------------------------------------------

    def _deliver(self, i: int, step: Step) -> bool:
        """Send row i's tokens; whether its request is finished."""
        a = self.decoding[i]
        if a is None:  # parked: its request has its answer
            return False
        if step.error is not None:  # that row failed after its step: its request's error
            raise step.error
        for e in a.req.feed(step):
            now = time.perf_counter()
            self.worker.metrics.on_token(a.last is None, now - (a.job.submitted if a.last is None else a.last))
            a.last = now
            self.worker.send_token(a.job, e.text, e)
        return bool(a.req.finish_reason)

    def _end_rows(self, done: list[int], failed: dict[int, BaseException]) -> None:
        """Finished rows and failed ones leave together (one leave: indices stay valid);
        a failed row's request gets its own error, the others go on."""
        rows = sorted([*done, *failed])
        for i, (a, layers) in zip(rows, self._leave(rows)):
            if i in failed:
                self._failed(a, failed[i])
                continue
            error = self._store_finished(a, layers)
            a.job.state = "finished"
            a.job.emit(self.worker.done_event(a.job, a.req, a.started) if error is None
                       else self.worker.error_event(error))

    def _leave(self, rows: list[int]) -> list[tuple[Active, list[Any]]]:
        """Rows ``rows`` leave the batch together: each job with its cache layers."""
        if not rows:
            return []
        out = [a for i in rows if (a := self.decoding[i]) is not None]
        if len(out) != len(rows):
            raise RuntimeError(f"rows {rows} to leave include a parked slot")
        layers, left = self.batch.park_rows(rows)
        for i in rows:
            self.decoding[i] = None
        gone = set(left)
        self.decoding = [a for i, a in enumerate(self.decoding) if i not in gone]
        self.parked_tokens = max(self.parked_tokens, *(a.job.request.reserved for a in out)) \
            if None in self.decoding else 0
        return list(zip(out, layers))

    def _store_finished(self, a: Active, layers: list[Any] | None, ok: bool = True) -> Exception | None:
        """The job's cache goes to the prefix store and its tokens to the shared memory. Never
        raises (its client and its batchmates' would wait forever): a failure (a cache out of
        step) is returned, that request's error, its cache emptied and its text not stored."""
        req, error = a.req, None
        try:
            req.finish(ok, layers)
            self.worker.commit(a.job.request, req.prompt_ids + req.tokens)
        except Exception as e:  # noqa: BLE001 (its request's error: see above)
            log.exception("settling a finished request failed: its cache is dropped")
            error = e
            if req.prompt_cache is not None:
                req.prompt_cache.reset()
        if req.prompt_cache is not None:
            self.worker.prefixes.put(req.prompt_cache)  # emptied after an error
            self.worker.metrics.on_prefix_store(self.worker.prefixes)
        return error

    def _drop_cancelled(self) -> None:
        gone = [i for i, a in enumerate(self.decoding) if a is not None and a.job.cancelled.is_set()]
        for a, layers in self._leave(gone):
            self._store_finished(a, layers)
            self._cancelled(a.job)
        if self.held is not None and self.held.cancelled.is_set():
            self._cancelled(self.held)
            self.held = None
        for a in [a for a in self.prefilling if a.job.cancelled.is_set()]:
            self.prefilling.remove(a)
            self._store_finished(a, None, ok=False)  # half prefilled: what it holds is not worth keeping
            self._cancelled(a.job)
        self._drop_cancelled_windows()

    def _cancelled(self, job: Job) -> None:
        job.state = "cancelled"
        self.worker.metrics.on_cancel()
        job.emit(DoneEvent("cancelled"))

    def _failed(self, a: Active, e: BaseException) -> None:
        if not self.worker.group_failure(e):  # a lost rank: the worker fails every job and stops
            log.error("generation failed: %s: %s", type(e).__name__, e)
            self._store_finished(a, None, ok=False)
        a.job.state = "finished"
        a.job.emit(self.worker.error_event(e))

    @property
    def jobs(self) -> list[Any]:
        """The admitted jobs (prefilling or decoding) and the one held for KV budget."""
        return self._admitted() + ([self.held] if self.held else [])

    def _admitted(self) -> list[Job]:
        """Every admitted job: decoding or parked rows, prefilling ones, WeDLM windows."""
        return [a.job for a in self.running + self.prefilling] + [w.job for w in self.windows]

    def _fail_all(self, e: BaseException) -> None:
        log.exception("a batched step failed: failing its %d requests", len(self.running))
        for a in self.running:
            self._failed(a, e)
        self.decoding, self.parked_tokens = [], 0
        self.batch = Batch(self.worker.model, price=self.price)

