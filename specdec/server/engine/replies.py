"""What the inference thread sends back: each token, the final usage and timings, an
error's event, and the failure of a sharded target's group (every job ends with 503).

Contract: a mixin of ``worker.InferenceWorker``; a bug's detail goes to the log under the
request id its 500 names, never to the client (it may quote another tenant's prompt).
Tests: tests/server/test_events.py, tests/server/test_worker.py."""

from __future__ import annotations

import logging

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...decode.request import Emitted, Request
from ...distributed import is_group_failure
from ..http.errors import APIError, internal_error
from .events import DoneEvent, ErrorEvent, Job, JobQueue, TokenEvent

if TYPE_CHECKING:  # annotations only: the worker imports this module
    from ..http.metrics import Metrics
    from .batcher import Batcher

log = logging.getLogger("specdec.server")


class Replies:
    """``InferenceWorker``'s replies: token, done and error events."""

    # the worker's state read here (set by ``InferenceWorker``)
    group: Any  # the distributed group (None: one machine)
    group_error: str | None
    on_group_lost: Callable[[], None] | None
    queue: JobQueue
    batcher: Batcher | None
    tokenizer: Any  # the tokenizer's seam (a HF tokenizer or the GGUF one)
    tokenizer_lock: threading.Lock
    metrics: Metrics

    def _scheduler(self) -> Batcher:
        """The scheduler ``load`` built (the inference loop runs only after it)."""
        if self.batcher is None:
            raise RuntimeError("load() builds the scheduler before the inference loop runs")
        return self.batcher

    def send_token(self, job: Job, text: str, r: Emitted) -> None:
        """One token to the client."""
        event = TokenEvent(text, r.token)
        if job.request.gen.logprobs:
            event.logprob, event.token_text = r.logprob, self._decode(r.token)
            event.top = [(self._decode(t), lp) for t, lp in (r.top or [])]
        job.emit(event)

    def error_event(self, e: BaseException) -> ErrorEvent:
        if self.group_error is not None:
            return ErrorEvent(APIError(503, f"the distributed group lost a rank: {self.group_error}",
                                       code="distributed_group_lost"))
        if isinstance(e, APIError):
            return ErrorEvent(e)
        # a bug's detail may quote a prompt: it goes to the log under the id the body names
        return ErrorEvent(internal_error(e, "generation"))

    def group_failure(self, e: BaseException) -> bool:
        """Whether ``e`` means a rank of the sharded target is gone (then the group is
        declared lost: every job fails with 503 and the server stops)."""
        if self.group is None:
            return False

        if is_group_failure(e):
            self._group_lost(str(e))
        return self.group_error is not None

    def _group_lost(self, why: str) -> None:
        """A rank died or hung (maybe called from the watchdog's thread while this one is
        stuck in a collective): fail every job with 503 and have the server stop."""
        if self.group_error is not None:
            return
        self.group_error = why
        log.error("the distributed group lost a rank: %s; failing requests with 503 and "
                  "stopping (restart the whole group with mlx.launch)", why)
        err = APIError(503, f"the distributed group lost a rank: {why}", code="distributed_group_lost")
        jobs = self.queue.drain() + (self.batcher.jobs if self.batcher is not None else [])
        for job in jobs:
            job.state = "finished"
            job.emit(ErrorEvent(err))
        if self.on_group_lost is not None:
            self.on_group_lost()

    def _decode(self, token: int) -> str:
        with self.tokenizer_lock:
            return self.tokenizer.decode([token])

    def done_event(self, job: Job, req: Request, started: float) -> DoneEvent:
        """The final event of a finished ``decode.request.Request``: usage and timings."""
        s, n_prompt = req.stats, len(job.request.prompt_ids)
        if req.finish_reason is None:
            raise RuntimeError("a done event for a request that has not finished")
        usage = {
            "prompt_tokens": n_prompt, "completion_tokens": s.generated_tokens,
            "total_tokens": n_prompt + s.generated_tokens, "drafted_tokens": s.drafted,
            "accepted_tokens": s.accepted, "acceptance_rate": round(s.acceptance_rate, 4),
            "mean_acceptance_length": round(s.mean_acceptance_length, 4),
            "decode_steps": s.verify_steps, "draft_steps": s.draft_steps,
            "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
        }
        timings = {
            "draft_type": s.drafter, "queue_s": round(started - job.submitted, 4),
            "ttft_s": round(started - job.submitted + s.ttft_s, 4), "prefill_s": round(s.prefill_s, 4),
            "decode_tokens_per_s": round(s.decode_tokens_per_s, 2),
        }
        self.metrics.on_done(usage)
        log.info("done: %d prompt + %d tokens (%s), %s, accepted %d/%d, decode %.1f tok/s",
                 n_prompt, s.generated_tokens, req.finish_reason, s.drafter, s.accepted,
                 s.drafted, s.decode_tokens_per_s)
        return DoneEvent(req.finish_reason, req.tail(), usage, timings)
