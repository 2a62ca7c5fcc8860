"""Prometheus metrics of one server (its own registry, so tests can run several).

Contract: ``Metrics.render()`` gives the ``specdec_*`` counters, gauges and histograms
(requests by endpoint and status, cancellations, tokens generated/prompted/drafted/accepted,
acceptance rate, queue depth, running requests, KV reserved/budget, time to first token,
time per output token, memory saves); the ``on_*`` hooks run on the inference thread.
Tests: tests/server/test_metrics.py. The list in full: docs/batching-and-server.md#metrics."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:  # cache.prompt_cache imports mlx: annotations only
    from ...cache.prompt_cache import PrefixStore

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()  # "*_created" timestamps only clutter a one-process server
        r = self.registry = CollectorRegistry()
        self.requests = Counter("specdec_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.cancelled = Counter("specdec_requests_cancelled",
                                 "generations cancelled because the client disconnected", registry=r)
        self.prompt_tokens = Counter("specdec_prompt_tokens", "prompt tokens processed", registry=r)
        self.generated = Counter("specdec_generated_tokens", "tokens generated", registry=r)
        self.drafted = Counter("specdec_drafted_tokens", "draft tokens proposed", registry=r)
        self.accepted = Counter("specdec_accepted_tokens", "draft tokens accepted", registry=r)
        self.saves = Counter("specdec_memory_saves", "shared-memory saves", ["result"], registry=r)
        self.ttft = Histogram("specdec_time_to_first_token_seconds",
                              "arrival to first token (queue wait included)", buckets=TTFT_BUCKETS,
                              registry=r)
        self.token_gap = Histogram("specdec_time_per_output_token_seconds",
                                   "gap between consecutive tokens of a request",
                                   buckets=TOKEN_BUCKETS, registry=r)
        self._lock = threading.Lock()
        self._drafted = self._accepted = 0
        Gauge("specdec_acceptance_rate", "accepted / drafted tokens since start",
              registry=r).set_function(self._acceptance)
        self.cached_tokens = Counter("specdec_cached_prompt_tokens",
                                     "prompt tokens reused from the prefix cache", registry=r)
        self._prefix_bytes = Gauge("specdec_prefix_cache_bytes", "bytes held by the prefix cache",
                                   registry=r)
        self._prefix_entries = Gauge("specdec_prefix_cache_entries", "caches in the prefix cache",
                                     registry=r)
        self._queue_depth = Gauge("specdec_queue_depth", "requests waiting", registry=r)
        self._running = Gauge("specdec_requests_running", "requests running (prefilling or decoding)", registry=r)
        self._kv_reserved = Gauge("specdec_kv_reserved_bytes", "KV cache the running batch may grow "
                                  "to (rows padded to the longest prompt + max_tokens)", registry=r)
        self._kv_budget = Gauge("specdec_kv_budget_bytes", "the KV budget (--kv-budget)", registry=r)

    def watch(self, queue_depth: Callable[[], float], running: Callable[[], float],
              kv_reserved: Callable[[], float], kv_budget: Callable[[], float]) -> None:
        self._queue_depth.set_function(queue_depth)
        self._running.set_function(running)
        self._kv_reserved.set_function(kv_reserved)
        self._kv_budget.set_function(kv_budget)

    def _acceptance(self) -> float:
        with self._lock:
            return self._accepted / self._drafted if self._drafted else 0.0

    def on_request(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def on_cancel(self) -> None:
        self.cancelled.inc()

    def on_token(self, first: bool, seconds: float) -> None:
        """A token was generated ``seconds`` after the request arrived (first) or after
        the previous token."""
        (self.ttft if first else self.token_gap).observe(seconds)
        self.generated.inc()

    def on_done(self, usage: dict) -> None:
        """A request completed (cancelled ones count their tokens only)."""
        self.prompt_tokens.inc(usage["prompt_tokens"])
        self.cached_tokens.inc(usage["prompt_tokens_details"]["cached_tokens"])
        self.drafted.inc(usage["drafted_tokens"])
        self.accepted.inc(usage["accepted_tokens"])
        with self._lock:
            self._drafted += usage["drafted_tokens"]
            self._accepted += usage["accepted_tokens"]

    def on_prefix_store(self, store: PrefixStore) -> None:
        self._prefix_bytes.set(store.nbytes)
        self._prefix_entries.set(len(store.entries))

    def on_save(self, ok: bool) -> None:
        self.saves.labels("ok" if ok else "error").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
