"""A batcher's row and its worker, as types: ``Active`` (one admitted job and its
``decode.request.Request``) and ``WorkerPort`` (what the batcher needs of ``worker.InferenceWorker``).
Tests: tests/server/test_batcher.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ...cache.prompt_cache import PrefixStore
from ...core.model import Model
from ...decode.request import Emitted, Request
from ...drafters.base import Drafter
from ...policy.drafting import DecodePolicy
from ..config import ServerConfig
from ..http.metrics import Metrics
from .events import DoneEvent, ErrorEvent, GenRequest, Job, JobQueue
from .kv_budget import KVBudget


class WorkerPort(Protocol):
    """What the batcher needs of its worker (``worker.Worker``): the model and its
    resources, the queue it admits from, and the events and memory a job ends with."""

    model: Model
    tokenizer: Any
    cfg: ServerConfig
    queue: JobQueue
    metrics: Metrics
    prefixes: PrefixStore
    kv: KVBudget | None
    max_batch: int

    def drafter_for(self, req: GenRequest) -> Drafter | DecodePolicy: ...
    def send_token(self, job: Job, text: str, r: Emitted) -> None: ...
    def done_event(self, job: Job, req: Request, started: float) -> DoneEvent: ...
    def error_event(self, e: BaseException) -> ErrorEvent: ...
    def group_failure(self, e: BaseException) -> bool: ...
    def commit(self, req: GenRequest, tokens: list[int]) -> None: ...


@dataclass
class Active:
    """One admitted job and its request (prefilling, or decoding in the batch)."""

    job: Job
    req: Request
    started: float  # when the job left the queue
    last: float | None = None  # when the previous token went out (metrics)
