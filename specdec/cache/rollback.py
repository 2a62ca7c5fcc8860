"""KV-cache construction and rollback with one contract: ``trim(cache, n) -> n``.

Contract: ``make_cache`` builds the model's mlx-lm cache with every ``RotatingKVCache`` swapped
for ``WindowKVCache`` (same window, always rolls back; mlx-lm's cannot after a wrap,
ml-explore/mlx-lm#1914), refusing caches that cannot roll back (``UnsupportedCacheError``)
unless recurrent ones are asked for; ``prefill`` fills in chunks; ``trim`` removes the last
``n`` positions everywhere; ``compact(cache, base_offset, keep)`` keeps a token tree's
accepted path (via ``batch_cache.roll_back``). Either raises ``RollbackError``, never a no-op.
Tests: tests/cache/test_rollback.py, tests/decode/test_tree_attention.py. Details: docs/caches.md#rollback."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import mlx.core as mx
from mlx_lm.models.cache import (
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    _BaseCache,
    make_prompt_cache,
)


from ..core.model import Model
from ..core.proposal import Wants
from ..core.capture import read_forward

if TYPE_CHECKING:
    import mlx.nn as nn
from .errors import RollbackError, UnsupportedCacheError
from .recurrent import RecurrentCache, has_recurrent, recurrent_layers

__all__ = ["RollbackError", "UnsupportedCacheError", "WindowKVCache", "make_cache", "prefill",
           "trim", "compact", "RecurrentCache"]


class WindowKVCache(_BaseCache):
    """Sliding-window KV cache in time order that supports exact ``trim`` after wrapping.

    Buffer slot ``i`` holds absolute position ``start + i``; valid slots end at
    ``offset - start``. When a block does not fit, the oldest positions beyond
    ``window - 1 + slack`` are dropped and the buffer regrows by ``step`` (amortised
    copies). ``make_mask`` is called before ``update_and_fetch`` by mlx-lm models, so both
    derive the drop from the same ``_drop_for`` rule.
    """

    step = 128

    def __init__(self, window: int, slack: int = 16):
        if window < 1 or slack < 0:
            raise ValueError(f"bad window cache shape: window={window}, slack={slack}")
        self.window, self.slack = window, slack
        self.keys: mx.array | None = None  # (B, H, slots, D); slot 0 is position ``start``
        self.values: mx.array | None = None
        self.start = 0
        self.offset = 0

    # ---- helpers -----------------------------------------------------------------------
    def _valid(self) -> int:
        return self.offset - self.start

    def _drop_for(self, n_new: int) -> int:
        if self.keys is None or self._valid() + n_new <= self.keys.shape[2]:
            return 0
        return max(0, self._valid() - (self.window - 1 + self.slack))

    def first_key(self, n_new: int) -> int:
        """Absolute position of the first key a block of ``n_new`` tokens will attend to
        (``make_mask`` and ``update_and_fetch`` drop by the same rule)."""
        return self.start + self._drop_for(n_new)

    # ---- mlx-lm cache interface ---------------------------------------------------------
    def update_and_fetch(self, keys: mx.array, values: mx.array):
        S = keys.shape[2]
        n = self._valid()
        held_k, held_v = self.keys, self.values
        if held_k is None or held_v is None or n + S > held_k.shape[2]:
            drop = self._drop_for(S)
            B, H, _, Dk = keys.shape
            pad = S + self.step
            new_k = mx.zeros((B, H, n - drop + pad, Dk), keys.dtype)
            new_v = mx.zeros((B, H, n - drop + pad, values.shape[3]), values.dtype)
            if held_k is not None and held_v is not None and n - drop > 0:
                new_k[..., : n - drop, :] = held_k[..., drop:n, :]
                new_v[..., : n - drop, :] = held_v[..., drop:n, :]
            held_k, held_v = new_k, new_v
            self.keys, self.values = held_k, held_v
            self.start += drop
            n -= drop
        held_k[..., n : n + S, :] = keys
        held_v[..., n : n + S, :] = values
        self.offset += S
        return held_k[..., : n + S, :], held_v[..., : n + S, :]

    def make_mask(self, N: int, window_size: int | None = None, return_array: bool = False, **_):
        window = window_size or self.window
        first_key = self.start + self._drop_for(N)  # absolute position of key slot 0
        n_keys = self.offset + N - first_key
        if self.offset + N - 1 - first_key < window:  # every key inside every window
            if N == 1:
                return None
            if not return_array:
                return "causal"
        q = mx.arange(self.offset, self.offset + N)[:, None]
        k = mx.arange(first_key, first_key + n_keys)[None]
        return (k <= q) & (k > q - window)

    def is_trimmable(self) -> bool:
        return True

    def check_trim(self, n: int) -> None:
        """Raise RollbackError unless ``trim(n)`` would leave a full window behind."""
        after = self.offset - n
        if n < 0 or after < self.start or self._valid() - n < min(after, self.window - 1):
            raise RollbackError(
                f"WindowKVCache cannot trim {n}: it retains positions {self.start}..{self.offset - 1} "
                f"and a {self.window}-token window needs {min(after, self.window - 1)} of them; "
                f"build the cache with a larger max_trim (slack={self.slack})"
            )

    def trim(self, n: int) -> int:
        self.check_trim(n)
        self.offset -= n
        return n

    def size(self) -> int:
        return min(self.offset, self.window)

    @property
    def state(self):
        n = self._valid()
        return self.keys[..., :n, :], self.values[..., :n, :]

    @state.setter
    def state(self, v):
        self.keys, self.values = v
        self.start = self.offset - self.keys.shape[2]

    @property
    def meta_state(self):
        return tuple(map(str, (self.window, self.slack, self.start, self.offset)))

    @meta_state.setter
    def meta_state(self, v):
        self.window, self.slack, self.start, self.offset = map(int, v)

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        k, v = self.keys, self.values
        return 0 if k is None or v is None else k.nbytes + v.nbytes


ROLLBACK_KINDS = (KVCache, QuantizedKVCache, WindowKVCache)


def layer_caches(model: Model) -> list[Any]:
    """mlx-lm's own cache layers for ``model`` (its ``make_cache``, else a KVCache a layer)."""
    # mlx-lm types the model nn.Module but reads only make_cache and layers: a Model's seam
    return make_prompt_cache(cast("nn.Module", model))


def make_cache(
    model: Model,
    *,
    max_trim: int = 16,
    rollback: bool = True,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    recurrent: bool = False,
) -> list[Any]:
    """The model's mlx-lm cache, made rollback-capable (docs/caches.md#rollback)."""
    cache = layer_caches(model)
    hybrid = recurrent and has_recurrent(cache)
    if hybrid:
        if kv_bits is not None:
            raise UnsupportedCacheError("a quantized KV cache (--kv-bits) is not supported on "
                                        "models with recurrent layers: leave --kv-bits unset")
        max_trim *= 2  # a rollback's kept tokens ride in front of the next block (recurrent)
    out = []
    for i, c in enumerate(cache):
        if isinstance(c, RotatingKVCache):
            if c.keep:
                raise UnsupportedCacheError(
                    f"layer {i}: RotatingKVCache with keep={c.keep} (attention sinks) is not supported"
                )
            c = WindowKVCache(c.max_size, slack=max_trim)
        elif kv_bits is not None and type(c) is KVCache:
            c = QuantizedKVCache(group_size=kv_group_size, bits=kv_bits)
        if rollback and not isinstance(c, ROLLBACK_KINDS) and not (hybrid and has_recurrent([c])):
            raise UnsupportedCacheError(
                f"layer {i} uses {type(c).__name__}, which cannot roll back rejected draft tokens; "
                "speculative decoding is impossible here: use --draft-type none"
                + (" (or make_cache(..., recurrent=True) for a hybrid model)" if has_recurrent([c]) else "")
            )
        out.append(c)
    return recurrent_layers(model, out) if hybrid else out


def prefill(model: Model, cache: list, tokens: Sequence[int], step_size: int = 512,
            wants: Callable[[int, int], Wants | None] | None = None, start: int = 0) -> None:
    """Run ``tokens`` (positions ``start..``) through the model in chunks of ``step_size``,
    filling the cache (no logits kept; each chunk evaluated, so the graph stays bounded);
    ``wants(position, n)``: what a drafter wants of each chunk's forward (its hidden
    states, read in the chunk's one sync: ``core.capture.read_forward``)."""
    if isinstance(cache, RecurrentCache):
        cache.settle()
    for i in range(0, len(tokens), step_size):
        part = list(tokens[i : i + step_size])
        want = wants(start + i, len(part)) if wants is not None else None
        _, wanted = read_forward(model, lambda: model(mx.array(part)[None], cache=cache), [want], [len(part)])
        mx.eval([c.state for c in cache], *wanted)


def trim(cache: list[Any], n: int) -> int:
    """Remove the last ``n`` positions from every layer; returns ``n`` or raises RollbackError."""
    if n == 0:
        return 0
    if isinstance(cache, RecurrentCache):
        return cache.rewind(n)
    for i, c in enumerate(cache):  # check every layer first: never leave layers disagreeing
        if not isinstance(c, ROLLBACK_KINDS):
            raise RollbackError(f"layer {i}: {type(c).__name__} cannot roll back")
        if isinstance(c, WindowKVCache):
            c.check_trim(n)
        elif n > c.offset:
            raise RollbackError(f"layer {i}: cannot trim {n} of {c.offset} positions")
    for i, c in enumerate(cache):
        got = c.trim(n)
        if got != n:
            raise RollbackError(f"layer {i}: {type(c).__name__} trimmed {got} of {n} positions")
    return n


def _check_keep(keep: list[int], fed: int, what: str) -> None:
    if not keep or keep[0] != 0 or any(b <= a for a, b in zip(keep, keep[1:])) or keep[-1] >= fed:
        raise RollbackError(f"{what}: keep must start at block index 0 (the root) and increase "
                            f"within the {fed} fed positions, got {keep}")


def _gather_rows(buf: mx.array, at: int, keep: list[int]) -> mx.array:
    """``buf`` with slots ``at + keep[i]`` moved to ``at + i`` (axis 2; ``keep`` ascending)."""
    first = next((i for i, j in enumerate(keep) if i != j), len(keep))
    if first < len(keep):  # the leading run already in place stays untouched
        rows = mx.take(buf, mx.array(keep[first:]) + at, axis=2)
        buf[..., at + first : at + len(keep), :] = rows
    return buf


def compact(cache: list[Any], base_offset: int, keep: list[int]) -> int:
    """After a tree block was fed at ``base_offset``, keep only block indices ``keep``
    (the root 0, then the accepted nodes in path order) at consecutive positions from
    ``base_offset`` and drop the rest; returns the new offset. Layers other than KVCache
    and WindowKVCache raise RollbackError (checked before any change; a quantized cache
    never speculates: ``errors.refuse_quantized_speculation``)."""
    keep = list(keep)
    if isinstance(cache, RecurrentCache):
        cache.compact()  # raises: recurrent layers cannot branch
    for i, c in enumerate(cache):  # check every layer first: never leave layers disagreeing
        if not (type(c) is KVCache or isinstance(c, WindowKVCache)):
            raise RollbackError(f"layer {i}: {type(c).__name__} cannot compact a token tree")
        _check_keep(keep, c.offset - base_offset, f"layer {i}")
        if isinstance(c, WindowKVCache) and base_offset < c.start:
            raise RollbackError(f"layer {i}: the tree block at {base_offset} is no longer held "
                                f"(window cache starts at {c.start})")
    for c in cache:
        at = base_offset - (c.start if isinstance(c, WindowKVCache) else 0)
        c.keys = _gather_rows(c.keys, at, keep)
        c.values = _gather_rows(c.values, at, keep)
        c.offset = base_offset + len(keep)
    return base_offset + len(keep)

