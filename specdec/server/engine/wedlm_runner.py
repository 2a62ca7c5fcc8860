"""``specdec serve --decoder wedlm``: the inference thread's scheduler for WeDLM's lossy
parallel decoder, in the batcher's place.

Contract (inference thread only): ``WedlmRunner.run_once(tick)`` takes the next job when
none runs and advances the running one by one decoder step (its committed tokens go out as
``TokenEvent``s); a job ends with a ``DoneEvent`` whose usage says ``lossless: false``.
Jobs run one at a time through ``decode.wedlm.step_stream``, the decoder that ``specdec
generate --decoder wedlm`` runs: no second generation path, nothing batched with
speculative rows. ``check(req)`` is the 400 for what the decoder cannot do (top-p/k,
penalties, logprobs, response_format); temperature and seed are the decoder's own.
Tests: tests/server/test_wedlm_serve.py, tests/server/test_wedlm_runner.py.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

from ...core.sampling import Rng
from ...core.text import TextOut
from ...core.wedlm import WedlmSettings
from ...decode.wedlm import WedlmStats, step_stream
from ..http.errors import APIError
from .events import DoneEvent, GenRequest, Job, TokenEvent

log = logging.getLogger("specdec.server")


def check(req: GenRequest) -> None:
    """Refuse (400) what the window decoder cannot honour (it is greedy or samples at a
    temperature, nothing more), rather than ignore it."""
    sp = req.gen.sampling
    unsupported = [name for name, asked in (
        ("top_p", sp.top_p < 1), ("top_k", sp.top_k > 0), ("min_p", sp.min_p > 0),
        ("repetition/presence/frequency penalties", sp.repetition_penalty != 1
         or sp.presence_penalty != 0 or sp.frequency_penalty != 0),
        ("logit_bias", bool(sp.logit_bias)), ("logprobs", req.gen.logprobs),
        ("response_format", req.gen.response_format is not None)) if asked]
    if unsupported:
        raise APIError(400, f"{', '.join(unsupported)} not supported: this server decodes with "
                       "--decoder wedlm (window decoding, greedy or at a temperature); send "
                       "the request without them, or restart the server with --draft-type "
                       "wedlm (lossless)", code="unsupported_with_wedlm")


class _Running:
    """The job being decoded: its step generator, text, tokens and stats."""

    def __init__(self, job: Job, steps: Iterator[list[int]], text: TextOut, stats: WedlmStats):
        self.job, self.steps, self.text, self.stats = job, steps, text, stats
        self.tokens: list[int] = []
        self.started = time.perf_counter()
        self.last: float | None = None


class WedlmRunner:
    """Runs the worker's queue through the WeDLM decoder, one job at a time (module doc)."""

    def __init__(self, worker: Any, settings: WedlmSettings):
        self.worker, self.settings = worker, settings
        self.current: _Running | None = None

    def __len__(self) -> int:
        return int(self.current is not None)

    @property
    def jobs(self) -> list[Job]:
        return [self.current.job] if self.current is not None else []

    def reserved_bytes(self) -> int:
        return 0  # one request's own cache, not the batch's KV budget

    def cancel_all(self) -> None:
        for job in self.jobs:
            job.cancelled.set()

    def close(self) -> None:
        self.cancel_all()
        self._drop_cancelled()

    def end_all(self, error: APIError) -> None:
        if self.current is not None:
            self._end(self.worker.error_event(error))

    def run_once(self, tick: float) -> None:
        if self.current is None:
            job = self.worker.queue.get(timeout=tick)
            if job is None:
                return
            if job.cancelled.is_set():
                self._cancelled(job)
                return
            self.current = self._start(job)
        self._drop_cancelled()
        if self.current is not None:
            try:
                self._advance(self.current)
            except Exception as e:  # noqa: BLE001 (this job's failure; the thread serves on)
                log.error("generation failed: %s: %s", type(e).__name__, e)
                self._end(self.worker.error_event(e))

    def _start(self, job: Job) -> _Running:
        w, gen = self.worker, job.request
        job.state = "running"
        stats = WedlmStats()
        t = gen.gen.sampling.temperature
        steps = step_stream(w.model, gen.prompt_ids, self.settings, max_tokens=gen.gen.max_tokens,
                            eos=w.tokenizer.eos_token_ids, stats=stats, temperature=t,
                            rng=Rng(gen.gen.sampling.seed) if t > 0 else None)
        return _Running(job, steps, TextOut(w.tokenizer, gen.gen.stop), stats)

    def _advance(self, r: _Running) -> None:
        """One decoder step: its committed tokens go out; the job ends at EOS, a stop
        string or max_tokens."""
        committed = next(r.steps, None)
        if committed is None:
            return self._finish(r, "length" if len(r.tokens) >= r.job.request.gen.max_tokens else "stop")
        for t in committed:
            r.tokens.append(t)
            segment, stopped = r.text.feed(t)
            now = time.perf_counter()
            self.worker.metrics.on_token(r.last is None,
                                         now - (r.job.submitted if r.last is None else r.last))
            r.last = now
            r.job.emit(TokenEvent(segment, t))
            if stopped:  # the text is cut at the stop string: nothing held back is kept
                return self._finish(r, "stop", tail=False)
        return None

    def _finish(self, r: _Running, reason: str, tail: bool = True) -> None:
        n_prompt, n = len(r.job.request.prompt_ids), len(r.tokens)
        seconds = time.perf_counter() - r.started
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n,
                 "drafted_tokens": 0, "accepted_tokens": 0,
                 "prompt_tokens_details": {"cached_tokens": 0},
                 "decoder": "wedlm", **r.stats.as_dict()}  # as_dict says lossless: False
        usage.pop("tokens")
        timings = {"decoder": "wedlm", "queue_s": round(r.started - r.job.submitted, 4),
                   "decode_tokens_per_s": round(n / seconds, 2) if seconds > 0 else 0.0}
        self.worker.metrics.on_done(usage)
        log.info("done: %d prompt + %d tokens (%s), wedlm, %d forwards", n_prompt, n, reason,
                 r.stats.forwards)
        self._end(DoneEvent(reason, r.text.tail() if tail else "", usage, timings))

    def _end(self, event: Any) -> None:
        if self.current is None:
            raise RuntimeError("no running job to end")
        job, self.current = self.current.job, None
        job.state = "finished"
        job.emit(event)

    def _drop_cancelled(self) -> None:
        if self.current is not None and self.current.job.cancelled.is_set():
            job, self.current = self.current.job, None
            self._cancelled(job)

    def _cancelled(self, job: Job) -> None:
        job.state = "cancelled"
        self.worker.metrics.on_cancel()
        job.emit(DoneEvent("cancelled"))
