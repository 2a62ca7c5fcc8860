"""The batched KV cache with per-row rollback: mlx-lm's ``BatchKVCache`` plus masked holes.

Contract: ``RowsKVCache`` runs mlx-lm's model classes unmodified and can hold holes (slots a
row rolled back), masked out and not counted in the row's RoPE offset, so a row sees exactly
the keys it would see alone. ``roll_back(cache, fed, kept)`` is the one rollback of a verify
step for every cache kind; ``trim_rows`` the batched form; ``prefill_rows`` prefills several
prompts in one forward. Anything that cannot roll back raises ``RollbackError``, never a
silent no-op. Tests: tests/cache/test_batch_cache.py, tests/decode/test_batch.py,
tests/decode/test_step.py. Why holes (measured) and the
contract in full: docs/caches.md#the-batch-cache."""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import BatchKVCache, KVCache

from ..core.arrays import int_rows, ints
from ..core.model import Model
from ..core.proposal import Wants
from ..core.capture import read_forward
from .recurrent import RecurrentCache
from .rollback import RollbackError, compact, trim

FeedWants = Callable[[int, int], "Wants | None"]  # ``Drafter.feed_wants``

COMPACT_AT = 64  # holes (in the longest row) that trigger a compaction


class RowsKVCache(BatchKVCache):
    """A ``BatchKVCache`` that can hold holes (rolled-back slots, masked and not counted in
    the row's RoPE offset), squeezed out by ``compact()`` once they take ``COMPACT_AT``."""

    def __init__(self, left_padding: list[int]):
        super().__init__(left_padding)
        self.valid: mx.array | None = None  # (B, capacity) bool; None: no holes
        self.pads = list(left_padding)  # host copies: the fast path reads them, no sync
        self.holes = [0] * len(left_padding)

    @classmethod
    def from_kv(cls, layer: KVCache) -> "RowsKVCache":
        """One row holding exactly what ``layer`` holds."""
        c = cls([0])
        if layer.keys is not None and layer.offset:
            c.update_and_fetch(layer.keys[..., : layer.offset, :], layer.values[..., : layer.offset, :])
        return c

    def _buffers(self) -> tuple[mx.array, mx.array]:
        """mlx-lm's key and value buffers (B, H, capacity, D), once a block was written."""
        # mlx-lm's __init__ sets them to None unannotated: the checker reads them as None
        keys, values = cast("tuple[mx.array | None, mx.array | None]", (self.keys, self.values))
        if keys is None or values is None:
            raise RollbackError("the batch cache holds nothing yet: write a block first")
        return keys, values

    @property
    def width(self) -> int:
        """Slots written per row, padding and holes included (mlx-lm's ``size()``)."""
        return self.size()

    def held(self) -> list[int]:
        """The tokens each row holds (its width less its left padding and its holes)."""
        return [self.width - p - h for p, h in zip(self.pads, self.holes)]

    def _plain(self) -> bool:
        return self.valid is None and not any(self.pads)

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        prev = self.width
        out = super().update_and_fetch(keys, values)
        if self.valid is not None:  # the written slots (and any new capacity) are valid
            head = self.valid[:, :prev]
            free = mx.ones((head.shape[0], self._buffers()[0].shape[2] - prev), mx.bool_)
            self.valid = mx.concatenate([head, free], axis=1)
        return out

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any):
        if self._plain():
            return None if N == 1 and not return_array else (
                create_causal_mask(N, self.width) if return_array else "causal")
        mask = create_causal_mask(N, offset=self.width, left_padding=self.left_padding)
        if self.valid is not None:  # the slots this block writes are valid until trimmed
            held = self.valid[:, : self.width]
            ahead = mx.ones((held.shape[0], N), mx.bool_)
            mask = mask & mx.concatenate([held, ahead], axis=1)[:, None, None, :]
        return mask

    def punch(self, base: int, keep: list[int], most: int) -> None:
        """Slots ``base + keep[i] .. base + most`` of row i become holes."""
        if self.valid is None:
            self.valid = mx.ones((len(keep), self._buffers()[0].shape[2]), mx.bool_)
        span = mx.arange(most)[None, :] < mx.array(keep)[:, None]
        self.valid[:, base : base + most] = self.valid[:, base : base + most] & span
        self.offset = self.offset - mx.array([most - k for k in keep])
        self.holes = [h + most - k for h, k in zip(self.holes, keep)]

    def compact(self) -> None:
        """Squeeze out the holes: each row's kept slots, right-aligned (one sync)."""
        if self.valid is None:
            return
        rows = int_rows(self.valid[:, : self.width])
        kept = [[j for j in range(self.pads[i], self.width) if r[j]] for i, r in enumerate(rows)]
        width = max(map(len, kept))
        index = mx.array([[0] * (width - len(k)) + k for k in kept])[:, None, :, None]
        held_k, held_v = self._buffers()
        keys = mx.take_along_axis(held_k, index, axis=2)
        values = mx.take_along_axis(held_v, index, axis=2)
        offset, self.valid, self.holes = self.offset, None, [0] * len(kept)
        self.trim(self.width)  # rewrite through mlx-lm's own update: it owns the write index
        self.keys = self.values = None
        self.update_and_fetch(keys, values)
        self.offset, self.pads = offset, [width - len(k) for k in kept]
        self.left_padding = mx.array(self.pads)

    def filter(self, batch_indices: Any) -> None:
        """Keep rows ``batch_indices`` with their holes (no compaction: one gather of the
        kept rows, as mlx-lm's filter; compacting first cost more than a decode step)."""
        keep = ints(batch_indices) if isinstance(batch_indices, mx.array) else list(batch_indices)
        index = mx.array(keep)
        low = min(self.pads[i] for i in keep)  # the padding every kept row shares goes
        holes = [self.holes[i] for i in keep]
        valid = self.valid[index, low:] if self.valid is not None and any(holes) else None
        super().filter(index)
        self.pads = [self.pads[i] - low for i in keep]
        self.valid, self.holes = valid, holes

    def extend(self, other: "RowsKVCache") -> None:
        """Join ``other``'s rows, holes and all (mlx-lm's extend right-aligns both buffers
        at the longer ``width``; the hole flags move with them, so nothing is compacted)."""
        mine, theirs = self.width, other.width
        flags = [(c.valid[:, :c.width] if c.valid is not None else None, len(c.pads), c.width)
                 for c in (self, other)] if self.valid is not None or other.valid is not None else None
        super().extend(other)
        top = max(mine, theirs)
        if flags is not None:
            capacity = self._buffers()[0].shape[2]
            self.valid = mx.concatenate([_aligned(v, n, top - idx, idx, capacity) for v, n, idx in flags])
        self.pads = [p + top - mine for p in self.pads] + [p + top - theirs for p in other.pads]
        self.holes = self.holes + other.holes

    def extract(self, idx: int) -> KVCache:
        """Row ``idx`` as a ``KVCache`` of exactly its kept positions (its own holes
        squeezed out; the other rows untouched)."""
        if not self.holes[idx] or self.valid is None:  # holes are flagged in valid: none
            return super().extract(idx)
        start = self.pads[idx]
        flags = ints(self.valid[idx, start : self.width])
        index = mx.array([start + j for j, ok in enumerate(flags) if ok], mx.int32)
        cache = KVCache()
        held_k, held_v = self._buffers()
        cache.keys = mx.contiguous(held_k[idx : idx + 1, :, index])
        cache.values = mx.contiguous(held_v[idx : idx + 1, :, index])
        cache.offset = cache.keys.shape[2]
        return cache


def _aligned(valid: Any, rows: int, left: int, held: int, width: int) -> mx.array:
    """Hole flags ``valid`` ((rows, held), None: no holes) shifted ``left`` slots right in
    a buffer ``width`` slots wide; padding and free slots are flagged valid (the padding
    is masked by ``left_padding``)."""
    valid = mx.ones((rows, held), mx.bool_) if valid is None else valid
    parts = [mx.ones((rows, left), mx.bool_), valid[:, : width - left],
             mx.ones((rows, max(width - left - held, 0)), mx.bool_)]
    return mx.concatenate(parts, axis=1)


def trim_rows(cache: list[Any], fed: int, keep: list[int]) -> None:
    """Every row was fed ``fed`` positions; row i keeps its first ``keep[i]`` (checked on
    every layer before any change; ``RollbackError``)."""
    most = max(keep, default=0)
    for i, c in enumerate(cache):  # check every layer first: never leave layers disagreeing
        if not isinstance(c, RowsKVCache):
            raise RollbackError(f"layer {i}: {type(c).__name__} is not a RowsKVCache")
        if len(keep) != len(c.pads) or not all(0 <= k <= fed for k in keep):
            raise RollbackError(f"layer {i}: keep {keep} must give 0..{fed} for each of "
                                f"{len(c.pads)} rows")
        if fed > c.size():
            raise RollbackError(f"layer {i}: cannot trim {fed} of {c.size()} positions")
    for i, c in enumerate(cache):
        if c.trim(fed - most) != fed - most:
            raise RollbackError(f"layer {i}: the batch cache trimmed less than {fed - most}")
        if most > min(keep):
            c.punch(c.size() - most, keep, most)
        if max(c.holes) >= COMPACT_AT:
            c.compact()


def prefill_rows(model: Model, layers: list[list[Any]], tokens: list[list[int]],
                 step_size: int = 512, wants: Sequence[FeedWants | None] = ()) -> list[RowsKVCache]:
    """Several requests' prompts in one batched forward: row i holds its layers' positions
    plus ``tokens[i]``, no holes left; ``wants[i]``: what row i's drafter wants of each chunk
    (``rollback.prefill``'s)."""
    if len(layers) != len(tokens) or not layers:
        raise ValueError("prefill_rows needs one list of cache layers per token list")
    if any(type(c) is not KVCache for row in layers for c in row):
        raise ValueError("a batched prefill needs full-attention KVCache layers")
    cache = [RowsKVCache.from_kv(c) for c in layers[0]]
    for row in layers[1:]:
        for c, m in zip(cache, row):
            c.extend(RowsKVCache.from_kv(m))
    width = max(map(len, tokens))
    block = mx.array([list(t) + [0] * (width - len(t)) for t in tokens])
    starts = [row[0].offset for row in layers]  # each row's first fed position
    for i in range(0, width, step_size):
        parts = [t[i : i + step_size] for t in tokens]
        want = [w(starts[r] + i, len(parts[r])) if w is not None and parts[r] else None
                for r, w in enumerate(wants)]
        _, wanted = read_forward(model, lambda: model(block[:, i : i + step_size], cache=cache), want,
                                 [len(p) for p in parts])
        mx.eval([c.state for c in cache], *wanted)
    if width:
        trim_rows(cache, width, [len(t) for t in tokens])
        for c in cache:
            c.compact()  # no holes: decode steps keep the plain masks
    return cache


def roll_back(cache: list[Any], fed: int, kept: list[list[int]]) -> None:
    """The one rollback of a verify step, whatever the cache: every row was fed ``fed``
    block positions, row i keeps block indices ``kept[i]``; else ``RollbackError``."""
    if isinstance(cache, RecurrentCache):
        if len(kept) != 1 or kept[0] != list(range(len(kept[0]))):
            raise RollbackError("recurrent layers keep a prefix of one row's block: hybrid "
                                "requests run one at a time, with linear drafts")
        cache.rewind(fed - len(kept[0]))
        return
    if any(isinstance(c, RowsKVCache) for c in cache):
        if any(k != list(range(len(k))) for k in kept):
            raise RollbackError("batched rows keep prefixes of their blocks: trees are verified "
                                "one request at a time")
        trim_rows(cache, fed, [len(k) for k in kept])
        return
    if len(kept) != 1:
        raise RollbackError(f"{len(kept)} rows on a single-request cache: join them through "
                            "decode.batch.Batch (RowsKVCache)")
    keep = kept[0]
    if keep == list(range(len(keep))):
        trim(cache, fed - len(keep))
    else:
        compact(cache, cache[0].offset - fed, keep)
