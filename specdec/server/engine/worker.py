"""The one inference thread: it owns the model and the shared memory, and runs requests
from a bounded queue through one path, the batcher (with ``--decoder wedlm``: its rows are
windows of the WeDLM decoder, one request at a time, ``wedlm_rows``).

Contract: ``start()`` loads on the worker thread and returns when ready (never measures: a
missing cost curve is calibrated in idle moments); only that thread runs the model or
changes the memory. Jobs come through ``queue`` (``admission.enqueue`` puts them there,
``check_room``/``queue_full`` raising ``APIError(503)`` past ``queue_size``; the batcher takes
them); each job gets its events in order, ending in ``DoneEvent`` or ``ErrorEvent``; ``cancel`` frees its place
at once. Hybrids speculate one request at a time; a lost rank fails jobs with 503.
What requests draft with is ``drafting``; what the thread sends back is ``replies``.
Tests: tests/server/test_events.py, tests/server/test_limits.py, tests/server/test_worker.py.
Details: docs/batching-and-server.md#the-worker."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...cache.prompt_cache import PrefixStore
from ...cache.recurrent import has_recurrent, refuse_trees
from ...cache.rollback import RollbackError, UnsupportedCacheError, make_cache
from ...calibrate import Calibration
from ...core.vocab import vocab_size
from ...core.wedlm import settings_of
from ...decode.batch import batchable
from ...distributed import LeaderModel, Watchdog, shard
from ...loader import load
from ...policy.learnt import LearntCurves
from .batcher import Batcher
from ..config import ServerConfig
from ..http.errors import APIError
from .drafting import Drafting
from .events import DoneEvent, ErrorEvent, Job, JobQueue
from .kv_budget import KVBudget, MemoryLimits, budget_for, set_limits
from .memory import SharedMemory
from .replies import Replies
from ..http.metrics import Metrics
from .spec.options import MAX_DRAFT_TOKENS

log = logging.getLogger("specdec.server")
DEFAULT_MAX_BATCH = 32  # as mlx_lm.server's --decode-concurrency


class InferenceWorker(Drafting, Replies):
    """The one thread that runs the model: ``start`` loads, ``queue`` holds the jobs admitted
    (``check_room``: 503 when full), ``cancel`` frees a job's place at once, ``stop`` saves the memory."""

    prefixes: PrefixStore  # set by ``load``, as the mixins' model, tokenizer and memory

    def __init__(self, cfg: ServerConfig, metrics: Metrics, group: Any = None,
                 group_timeout: float = 120.0,
                 on_group_lost: Callable[[], None] | None = None):
        self.cfg, self.metrics = cfg, metrics
        self.group, self.group_timeout, self.on_group_lost = group, group_timeout, on_group_lost
        self.group_error: str | None = None
        self.queue = JobQueue(cfg.queue_size)
        self.tokenizer_lock = threading.Lock()  # HF tokenizers are not safe to share freely
        self.batcher: Batcher | None = None  # the scheduler (once loaded)
        self.max_batch = 1
        self.one_at_a_time: str | None = None  # why requests do not batch (None: they do)
        self.plain_only: str | None = None  # why no request speculates (None: they may)
        self.recurrent = False  # a hybrid target: no token trees (cache.recurrent.refuse_trees)
        self.leader: LeaderModel | None = None  # rank 0 of a sharded target (--distributed)
        self.draft: tuple[Any, Any] | None = None  # (draft model, tokenizer) if loaded
        self.mtp: Any = None  # the checkpoint's MTP block (eagle.mtp) with --draft-type mtp
        self.context_length = self.vocab_size = 0
        self.kv: KVBudget | None = None  # the KV memory budget (None: sharded, or none)
        self.limits: MemoryLimits | None = None  # mlx's limits, set from the budgets
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping = False
        self._mean_job_s = 1.0  # moving average, for Retry-After
        self._last_save = time.monotonic()
        self._costs: dict[int, dict[int, float]] = {}
        self.curve: dict[int, float] | None = None  # the verify cost curve, once known
        self._gate_off_said = False
        # what its requests' cost gates learnt per curve, one per tenant (``learnt_for``)
        self._tenant_learnt: dict[str, LearntCurves] = {}
        self.calibration: Calibration | None = None  # while the curve is unknown
        self._draft_costs: dict[str, dict[str, float]] = {}
        self._thread = threading.Thread(target=self._main, name="specdec-inference", daemon=True)
        self._drain_until: float | None = None  # set by drain(): SIGTERM's deadline

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    @property
    def busy(self) -> int:
        """How many jobs are running (prefilling or decoding)."""
        return len(self.batcher) if self.batcher is not None else 0

    @property
    def kv_reserved(self) -> int:
        """Bytes the running batch's cache may grow to (0 before the model is loaded)."""
        return self.batcher.reserved_bytes() if self.batcher is not None else 0

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopping and self.group_error is None

    def drain(self, seconds: float) -> None:
        """SIGTERM: refuse new requests from now on (503); requests in flight run on, and
        those still running after ``seconds`` end with a 'shutting down' error event."""
        self._drain_until = time.monotonic() + seconds

    def _cut_drained(self) -> None:
        if self._drain_until is not None and time.monotonic() >= self._drain_until and self.batcher:  # busy
            self.batcher.end_all(APIError(503, "the server is shutting down: this request was "
                                          "still running after --drain-timeout; retry it",
                                          code="shutting_down"))

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel everything, let the thread save the memory one last time, join it. After a
        lost rank the join waits 1 s at most: the thread may be stuck in a collective that
        never returns (the app's shutdown waited the whole 30 s for it before exiting)."""
        self._stopping = True
        if self.batcher is not None:
            self.batcher.cancel_all()
        for job in self.queue.drain():
            job.state = "cancelled"
            job.emit(ErrorEvent(APIError(503, "the server is shutting down; retry later",
                                         code="shutting_down")))
        self.queue.wake()
        self._thread.join(min(timeout, 1.0) if self.group_error is not None else timeout)

    def _main(self) -> None:
        try:
            self.load()
        except Exception as e:  # noqa: BLE001 (any load failure is re-raised by start())
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop()
        finally:
            if self.batcher is not None:
                self.batcher.close()
            self._save(final=True)
            if self.leader is not None and self.group_error is None:
                self.leader.stop()  # the followers exit; MLX work stays on this thread

    def load(self) -> None:
        """Load the model and build the scheduler on the calling thread (``start`` calls it on
        the inference thread; in-process tests call it and drive ``batcher.run_once``)."""
        cfg = self.cfg
        self.model, self.tokenizer = load(cfg.model, dtype=cfg.dtype)
        if self.group is not None:
            shard(self.model, self.group)
            dog = Watchdog(self.group_timeout, lambda s: self._group_lost(
                f"no forward finished for {s:.0f} s (a rank hung or its network is down)"))
            self.model = self.leader = LeaderModel(self.model, self.group, dog)
        self.load_drafters()
        self.context_length = self._context_length()
        self.vocab_size = vocab_size(self.model, self.tokenizer)
        self.memory = SharedMemory.open(cfg.memory_file, self.tokenizer, cfg.speculation)
        # other tenants' memories (in RAM, one per API key), and the never-written one
        # salted requests draft from
        self._tenant_memory: dict[str, SharedMemory] = {}
        self._isolated = SharedMemory.open(None, self.tokenizer, replace(cfg.speculation, suffix_history=0))

        self.prefixes = PrefixStore(self.model, cfg.prompt_cache_bytes if self.group is None else 0,
                                    max_draft_tokens=MAX_DRAFT_TOKENS, kv_bits=cfg.kv_bits)
        self.max_draft_tokens = MAX_DRAFT_TOKENS
        self.kv = budget_for(self.model, self.cfg, sharded=self.group is not None)
        if self.kv is not None:
            models = [self.model] + ([self.draft[0]] if self.draft else [])
            self.limits = set_limits(models, self.kv, self.prefixes.max_bytes)
        if cfg.decoder == "wedlm":  # WeDLM's lossy decoder serves every request
            self._setup_wedlm()
            return
        self.plain_only = self.cannot_speculate()
        self._setup_batching()

    def _setup_wedlm(self) -> None:
        """--decoder wedlm: a WeDLM model (else the startup error saying so); the batcher
        runs each request, one at a time, as a window of the WeDLM decoder (``wedlm_rows``)."""
        mask = settings_of(self.model).mask_token_id  # ValueError: not a WeDLM model
        self.plain_only = self.one_at_a_time = "--decoder wedlm decodes one request at a time"
        self.max_batch = 1
        self.batcher = Batcher(self, None, wedlm=self.cfg.run_config().wedlm_settings(mask))
        log.info("serving with --decoder wedlm: WeDLM's parallel window decoder, NOT lossless")

    def cannot_speculate(self) -> str | None:
        """Why no request can speculate on this model (None: they can); such a model
        serves plain decoding, said once at startup, rather than failing every request."""
        try:
            make_cache(self.model, kv_bits=self.cfg.kv_bits, recurrent=True)
        except (UnsupportedCacheError, RollbackError) as e:
            log.warning("speculative decoding is off for this model, serving plain decoding: %s", e)
            return str(e)
        return None

    def _setup_batching(self) -> None:
        """Resolve ``--max-batch`` (None: ``DEFAULT_MAX_BATCH`` where the model can batch,
        else 1, said in the log), make the batcher and find the verify cost curve."""
        layers = make_cache(self.model, rollback=False)
        self.recurrent = has_recurrent(layers)
        refuse_trees(layers, self.cfg.speculation.draft_tree_budget)  # at start-up, not per request
        why = batchable(self.model, self.cfg.kv_bits)
        if self.group is not None:
            why = "the target is sharded (--distributed)"
        if self.cfg.speculation.draft_tree_budget:
            why = "token trees (--draft-tree-budget) are verified one request at a time"
        want = self.cfg.max_batch
        if why is not None and want is not None and want > 1:
            raise ValueError(f"--max-batch {want}: cannot batch: {why}; use --max-batch 1")
        if why is not None and want is None:
            log.info("requests run one at a time: %s", why)
        self.max_batch = 1 if why is not None else DEFAULT_MAX_BATCH if want is None else want
        self.one_at_a_time = why  # said in /health
        self.batcher = Batcher(self, None)
        self._find_curve()

    def _context_length(self) -> int:
        native = getattr(getattr(self.model, "args", None), "max_position_embeddings", None)
        if self.cfg.context_length is None:
            if native is None:
                raise ValueError("the model config has no max_position_embeddings: pass "
                                 "--context-length N")
            return int(native)
        if native is not None and self.cfg.context_length > native:
            raise ValueError(f"--context-length {self.cfg.context_length} exceeds the model's "
                             f"{native}")
        return self.cfg.context_length

    # -- the asyncio side's interface ------------------------------------------------------

    def check_room(self) -> None:
        """Raise the 503 a new request would get now (before any work is spent on it)."""
        if self.group_error is not None:
            raise APIError(503, f"the distributed group lost a rank: {self.group_error}; the "
                           "group must be restarted", code="distributed_group_lost")
        if not self.alive or self._drain_until is not None:
            raise APIError(503, "the server is shutting down; retry later", code="shutting_down",
                           headers={"Retry-After": "5"})
        if len(self.queue) >= self.queue.maxsize:
            self.queue_full()

    def queue_full(self) -> None:
        """Raise the 503 of a full queue, with the wait it would take (Retry-After)."""
        wait = max(1, min(3600, math.ceil(self._mean_job_s * (len(self.queue) + 1))))
        raise APIError(503, f"the request queue is full ({self.queue.maxsize} waiting); retry "
                       f"in about {wait} s", code="queue_full", headers={"Retry-After": str(wait)})

    def cancel(self, job: Job) -> None:
        """Idempotent; a no-op for a finished job."""
        if job.state in ("finished", "cancelled"):
            return
        job.cancelled.set()
        if self.queue.remove(job):
            job.state = "cancelled"
            self.metrics.on_cancel()
            job.emit(DoneEvent("cancelled"))

    # -- the thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        tick = min(self.cfg.save_interval, 1.0) if self.cfg.save_interval > 0 else 1.0
        while not self._stopping:
            try:
                self._scheduler().run_once(0 if self.calibration is not None else tick)
                if self.calibration is not None:
                    self._calibrate()
            except Exception:  # noqa: BLE001 (outside any job's own handling: the thread survives)
                log.exception("a scheduling round failed; the inference thread keeps serving")
            if self.leader is not None and self.leader.watchdog is not None and not self.busy:
                self.leader.watchdog.disarm()  # idle: no deadline until the next job
            self._cut_drained()
            self._maybe_save()

    def _maybe_save(self) -> None:
        if self.cfg.save_interval > 0 and time.monotonic() - self._last_save >= self.cfg.save_interval:
            self._save()

    def _save(self, final: bool = False) -> None:
        self._last_save = time.monotonic()
        if getattr(self, "memory", None) is None:  # not loaded (a load failed)
            return
        try:
            if self.memory.save():
                self.metrics.on_save(ok=True)
                log.info("saved the shared memory to %s%s", self.cfg.memory_file,
                         " (shutdown)" if final else "")
        except OSError as e:  # keep serving; the memory stays dirty and is retried
            self.metrics.on_save(ok=False)
            self.memory.dirty = True
            log.error("could not save the shared memory to %s: %s", self.cfg.memory_file, e)
