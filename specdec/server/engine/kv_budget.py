"""The KV memory budget: requests are admitted against bytes of batch cache, not rows.

Contract: ``Footprint.measure`` finds one row's bytes per token (and recurrent layers' fixed
bytes) from mlx-lm's own cache; ``KVBudget.batch_bytes(slots, tokens)`` prices rows padded to
the longest; reservations count prompt + ``max_tokens``, so an admitted batch never outgrows
the budget (the batcher holds back, the API refuses what never fits); ``default_budget()`` is
``DEFAULT_SHARE`` of memory; ``set_limits`` gives mlx a memory limit of weights + twice the KV
budget + prompt cache + headroom and a small buffer cache. Tests: tests/server/test_kv_budget.py.
Details: docs/batching-and-server.md#the-kv-budget."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, QuantizedKVCache, make_prompt_cache

from ...core.arrays import flat_tree
from ...core.model import Model

if TYPE_CHECKING:
    from ..config import ServerConfig

DEFAULT_SHARE = 0.3
# activations outside every cache (a prefill chunk's attention scores, MLP, logits):
# a share of what the caches and weights hold, at least ACTIVATION_FLOOR
ACTIVATION_SHARE, ACTIVATION_FLOOR = 0.25, 256 << 20
CACHE_LIMIT = 16 << 20  # mlx keeps at most this much freed memory for reuse
log = logging.getLogger("specdec.server")


def _bytes(tree: Any) -> int:
    return sum(a.nbytes for _, a in flat_tree(tree) if isinstance(a, mx.array))


@dataclass(frozen=True)
class Footprint:
    """Bytes per token per growing layer, with each layer's window (None: unbounded), and
    the fixed bytes every row holds (recurrent states)."""

    per_token: tuple[tuple[int, int | None], ...]
    fixed: int

    @classmethod
    def measure(cls, model: Model, kv_bits: int | None = None) -> Footprint:
        cache = make_prompt_cache(cast("nn.Module", model))
        if kv_bits is not None:
            cache = [QuantizedKVCache(bits=kv_bits) if type(c) is KVCache else c for c in cache]
        model(mx.array([[0]]), cache=cache)
        mx.eval([c.state for c in cache])
        per_token, fixed = [], 0
        for c in cache:
            if getattr(c, "keys", None) is None:  # a recurrent layer: the same bytes at any length
                fixed += _bytes(c.state)
                continue
            # keys/values are allocated in steps of tokens (axis -2), quantized ones as tuples
            kv = [a for _, a in flat_tree([c.keys, c.values])]
            per_token.append((_bytes(kv) // kv[0].shape[-2], getattr(c, "max_size", None)))
        return cls(tuple(per_token), fixed)

    def row_bytes(self, tokens: int) -> int:
        return self.fixed + sum(b * (tokens if w is None else min(tokens, w)) for b, w in self.per_token)


@dataclass(frozen=True)
class KVBudget:
    budget: int  # bytes of batch cache
    footprint: Footprint

    def batch_bytes(self, slots: int, tokens: int) -> int:
        return slots * self.footprint.row_bytes(tokens)

    def fits(self, slots: int, tokens: int) -> bool:
        return self.batch_bytes(slots, tokens) <= self.budget

    def info(self, reserved: int) -> dict[str, int]:
        return {"budget_bytes": self.budget, "reserved_bytes": reserved,
                "bytes_per_token": self.footprint.row_bytes(1) - self.footprint.fixed,
                "longest_request_tokens": self.longest}

    @functools.cached_property
    def longest(self) -> int:
        """The longest row that fits alone (binary search: ``row_bytes`` is monotone)."""
        lo, hi = 0, 1 << 24
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.fits(1, mid) else (lo, mid - 1)
        return lo


def memory_bytes() -> int:
    """The memory caches compete for: the GPU's where mlx reports it, else the machine's."""
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    size = info.get("memory_size") or info.get("max_recommended_working_set_size")
    if size:
        return int(size)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_budget() -> int:
    return int(DEFAULT_SHARE * memory_bytes())


def budget_for(model: Model, cfg: ServerConfig, sharded: bool) -> KVBudget | None:
    """The server's budget: ``cfg.kv_budget`` bytes (None: ``default_budget()``), priced on
    ``model``'s measured footprint; None for a sharded target (its forward runs on every
    rank, one request at a time)."""
    if sharded:
        if cfg.kv_budget is not None:
            raise ValueError("--kv-budget is not supported with a sharded target (requests run "
                             "one at a time there): leave it unset")
        return None
    kv = KVBudget(cfg.kv_budget or default_budget(), Footprint.measure(model, cfg.kv_bits))
    log.info("KV budget %.2f GiB: one request of %d tokens at most", kv.budget / 2**30, kv.longest)
    return kv


@dataclass(frozen=True)
class MemoryLimits:
    """What ``set_limits`` gave mlx: ``memory_limit`` = the weights + the batch cache's peak
    (twice the KV budget: joining a row copies it once) + the prefix store's bytes +
    ``headroom`` for activations; ``cache_limit`` caps freed buffers kept for reuse
    (Metal's default keeps up to the memory limit)."""

    weights: int
    kv_peak: int
    prompt_cache: int
    headroom: int
    memory_limit: int
    cache_limit: int

    def info(self) -> dict[str, int]:
        return {f"{k}_bytes": v for k, v in self.__dict__.items()}


def set_limits(models: list[Any], kv: KVBudget, prompt_cache: int) -> MemoryLimits:
    """Set mlx's memory and cache limits from the budgets (once, at server start). On
    Metal and CUDA the memory limit makes allocations past it wait for running work or
    fail; mlx's CPU allocator only records it (std::malloc underneath), so there the
    budgets themselves bound memory and the cache limit returns freed buffers. Admission
    keeps a batch inside the limit: mlx's wait or failure is only a backstop."""
    weights = sum(_bytes(m.parameters()) for m in models)
    held = weights + 2 * kv.budget + prompt_cache
    headroom = max(ACTIVATION_FLOOR, int(ACTIVATION_SHARE * held))
    limits = MemoryLimits(weights, 2 * kv.budget, prompt_cache, headroom, held + headroom, CACHE_LIMIT)
    mx.set_memory_limit(limits.memory_limit)
    mx.set_cache_limit(limits.cache_limit)
    log.info("mlx memory limit %.2f GiB (weights %.2f + 2 x KV budget %.2f + prompt cache %.2f + "
             "activations %.2f), buffer cache %d MiB", limits.memory_limit / 2**30, weights / 2**30,
             kv.budget / 2**30, prompt_cache / 2**30, headroom / 2**30, CACHE_LIMIT >> 20)
    return limits


def _glibc() -> Any:
    """The process's C library where it has ``malloc_trim`` (glibc), else None."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


def release_idle_memory() -> None:
    """Hand back what an emptied batch leaves held for nothing: mlx's buffer cache and, on
    glibc, the heap's free pages (std::malloc keeps them: a 50-stream burst left RSS
    0.5 GB up for good; lab/serve-attacks). Inference thread, when the batch empties."""
    mx.clear_cache()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
