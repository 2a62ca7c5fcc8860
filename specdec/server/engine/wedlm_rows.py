"""``specdec serve --decoder wedlm``: WeDLM's lossy parallel decoder as a row kind of the
batcher, so that one scheduler serves every request.

Contract (inference thread only): a mixin of ``batcher.Batcher``. With ``wedlm`` settings
the batcher admits each job as a ``Window`` (instead of a ``decode.request.Request`` row);
each scheduling round advances it by one step of ``decode.wedlm.step_stream`` (the decoder
``specdec generate --decoder wedlm`` runs: no second generation path), its committed tokens
go out as ``TokenEvent``s and it ends with a ``DoneEvent`` whose usage says ``lossless:
false``. Admission, the queue, cancellation, ``end_all`` (the drain deadline), per-job
errors (its own 400/500; the thread keeps serving) and the release of an emptied batch's
memory are the batcher's. ``check(req)`` is the 400 the worker gives at submit for what the
decoder cannot do (top-p/k, penalties, logprobs, response_format).
Tests: tests/server/test_wedlm_batcher.py, tests/server/test_wedlm_serve.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generator

from ...core.sampling import Rng
from ...core.text import TextOut
from ...core.wedlm import WedlmSettings
from ...decode.wedlm import WedlmStats, step_stream
from ..http.errors import APIError
from .events import DoneEvent, GenRequest, Job, TokenEvent
from .rows import WorkerPort

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


@dataclass
class Window:
    """One admitted WeDLM job: its decoder's step generator, text, tokens and stats."""

    job: Job
    steps: Generator[list[int], None, None]
    text: TextOut
    stats: WedlmStats
    started: float  # when the job left the queue
    tokens: list[int] = field(default_factory=list)
    last: float | None = None  # when the previous token went out (metrics)


class WedlmRows:
    """``Batcher``'s WeDLM rows. One at a time (the worker sets ``max_batch`` 1): each
    window's forward rotates its tokens at reordered positions over its own prompt cache
    (``decode.wedlm.positions``), which a row of the batch cache cannot do; the point is
    one scheduler, not batching WeDLM."""

    # the batcher's state and steps used here (``batcher.Batcher``)
    worker: WorkerPort
    windows: list[Window]
    _cancelled: Callable[[Job], None]

    def _start_window(self, job: Job, settings: WedlmSettings) -> Window:
        """``job`` as a window; its prompt is prefilled by its first step (lazily)."""
        w, gen = self.worker, job.request.gen
        job.state = "running"
        stats, t = WedlmStats(), gen.sampling.temperature
        steps = step_stream(w.model, job.request.prompt_ids, settings, max_tokens=gen.max_tokens,
                            eos=w.tokenizer.eos_token_ids, stats=stats, temperature=t,
                            rng=Rng(gen.sampling.seed) if t > 0 else None)
        return Window(job, steps, TextOut(w.tokenizer, gen.stop), stats, time.perf_counter())

    def _step_windows(self) -> None:
        """One decoder step of every window; a window's failure is its job's error alone."""
        for w in list(self.windows):
            try:
                done = self._advance(w)
            except Exception as e:  # noqa: BLE001 (this job's failure; the thread serves on)
                self._leave_window(w)
                self._window_failed(w, e)
                continue
            if done is not None:
                self._leave_window(w)
                w.job.state = "finished"
                w.job.emit(done)

    def _advance(self, w: Window) -> DoneEvent | None:
        """One decoder step: its committed tokens go out; the job's ``DoneEvent`` when it
        ended (EOS, a stop string or max_tokens)."""
        committed = next(w.steps, None)
        if committed is None:
            full = len(w.tokens) >= w.job.request.gen.max_tokens
            return self._window_done(w, "length" if full else "stop")
        for t in committed:
            w.tokens.append(t)
            segment, stopped = w.text.feed(t)
            now = time.perf_counter()
            self.worker.metrics.on_token(w.last is None,
                                         now - (w.job.submitted if w.last is None else w.last))
            w.last = now
            w.job.emit(TokenEvent(segment, t))
            if stopped:  # the text is cut at the stop string: nothing held back is kept
                return self._window_done(w, "stop", tail=False)
        return None

    def _window_done(self, w: Window, reason: str, tail: bool = True) -> DoneEvent:
        n_prompt, n = len(w.job.request.prompt_ids), len(w.tokens)
        seconds = time.perf_counter() - w.started
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n,
                 "drafted_tokens": 0, "accepted_tokens": 0,
                 "prompt_tokens_details": {"cached_tokens": 0},
                 "decoder": "wedlm", **w.stats.as_dict()}  # as_dict says lossless: False
        usage.pop("tokens")
        timings = {"decoder": "wedlm", "queue_s": round(w.started - w.job.submitted, 4),
                   "decode_tokens_per_s": round(n / seconds, 2) if seconds > 0 else 0.0}
        self.worker.metrics.on_done(usage)
        log.info("done: %d prompt + %d tokens (%s), wedlm, %d forwards", n_prompt, n, reason,
                 w.stats.forwards)
        return DoneEvent(reason, w.text.tail() if tail else "", usage, timings)

    def _leave_window(self, w: Window) -> None:
        """``w`` leaves; its decoder is closed, so its cache is free when the batch empties."""
        self.windows.remove(w)
        w.steps.close()

    def _end_windows(self, error: BaseException) -> None:
        """Every window's job ends with ``error`` (``Batcher.end_all``)."""
        for w in list(self.windows):
            self._leave_window(w)
            self._window_failed(w, error)

    def _window_failed(self, w: Window, e: BaseException) -> None:
        if not self.worker.group_failure(e):
            log.error("generation failed: %s: %s", type(e).__name__, e)
        w.job.state = "finished"
        w.job.emit(self.worker.error_event(e))

    def _drop_cancelled_windows(self) -> None:
        for w in [w for w in self.windows if w.job.cancelled.is_set()]:
            self._leave_window(w)
            self._cancelled(w.job)
