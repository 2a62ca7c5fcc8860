"""The rows of a batch and their cache: ``join`` / ``leave`` / ``park`` (the speculative
step over them is ``loop.step``).

Invariant: row i's part of the cache holds exactly ``rows[i].context[:-1]`` between steps
(one more for the rows a queued plain step covers, which ``leave`` trims). A lone row keeps
its request's own cache layers, of any kind; a second row turns every layer into a
``batch_cache.RowsKVCache`` (full-attention only: ``batchable``). Each join and leave copies
the batch cache once, so finished rows are parked until enough leave together
(docs/how-it-works.md). Tests: tests/decode/test_batch.py, tests/server/test_batcher.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from ..cache.batch_cache import RowsKVCache
from ..cache.recurrent import RecurrentCache
from ..cache.rollback import make_cache, trim
from ..core.model import Model
from ..core.vocab import vocab_size
from ..policy.pricing import BlockPrice
from .rows import Row, parked_stand_in

# parked rows leave once they have cost this many steps' worth of rows: their gather
# costs 1-2 steps at 32 rows x 576 tokens (lab/batch-leave-and-park-cost/batch_leave_cost.py)
PARK_STEPS = 2.0


class RowFailed(Exception):
    """Row ``row`` failed before the step touched the cache: it alone should leave."""

    def __init__(self, row: int, error: BaseException):
        super().__init__(f"row {row}: {type(error).__name__}: {error}")
        self.row, self.error = row, error


def batchable(model: Model, kv_bits: int | None) -> str | None:
    """None when the model's cache can be batched here, else why not."""
    if kv_bits is not None:
        return "a quantized KV cache (--kv-bits) is not batched (the batch cache is full precision)"
    layers = make_cache(model, rollback=False, recurrent=True)
    if isinstance(layers, RecurrentCache):
        return ("the model has recurrent layers (a hybrid): their states roll back one "
                "request at a time")
    kinds = {type(c).__name__ for c in layers}
    if kinds != {"KVCache"}:
        return f"the model's cache layers are {sorted(kinds)}; batching needs full-attention KVCache"
    return None


@dataclass
class InFlight:
    """A plain step queued for the first ``covers`` rows of a batch: device arrays
    [argmax (covers, 1), its logprob (covers, 1)] (``step.queue_plain_step``)."""

    arrays: list[Any]
    covers: int

    def kept(self, rows: list[int]) -> "InFlight | None":
        """The step for rows ``rows`` of it only (None: none)."""
        if not rows:
            return None
        index = mx.array(rows)
        return InFlight([a[index] for a in self.arrays], len(rows))


class Batch:
    """Rows decoding together, their cache and how their blocks are priced (``price``)."""

    def __init__(self, model: Model, cost: Callable[[int], float] | None = None, learn: bool = True,
                 vocab: int | None = None, *, price: BlockPrice | None = None):
        self.model = model
        self.price = price if price is not None else BlockPrice(cost, learn)
        self.vocab = vocab if vocab is not None else vocab_size(model)
        self.rows: list[Row] = []
        self.cache: list[Any] | None = None
        self.inflight: InFlight | None = None  # a plain step queued, not yet read (``pipeline``)
        self.parked_cost = 0.0  # steps' worth of rows the parked slots have taken so far
        self.probe = -1  # the slot whose drafter was last asked while blocks were priced out

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def layers(self) -> list[Any]:
        """The batch's cache layers (one per model layer); only while it has rows."""
        if self.cache is None:
            raise RuntimeError("an empty batch has no cache: join a row first")
        return self.cache

    @property
    def queued(self) -> bool:
        """Whether a pipelined plain step is queued on the device (see ``step``)."""
        return self.inflight is not None

    def join(self, row: Row, layers: list[Any]) -> None:
        held = layers.positions() if isinstance(layers, RecurrentCache) else {c.offset for c in layers}
        if held != {len(row.context) - 1}:
            raise ValueError(f"a joining row needs cache layers holding its context but the "
                             f"last token ({len(row.context) - 1}); got {sorted(held)}")
        if self.cache is None:  # alone: the request's own layers (the same list), any kind
            self.cache = layers
            self.rows.append(row)
            return
        self._check_batchable([row])
        if any(type(c) is not KVCache for c in layers):
            kinds = sorted({type(c).__name__ for c in (*self.cache, *layers)})
            raise ValueError(f"cannot batch cache layers {kinds}: batching needs full-attention KVCache")
        self._add([row], [RowsKVCache.from_kv(m) for m in layers])

    def join_rows(self, rows: list[Row], layers: list[RowsKVCache]) -> None:
        """Add several rows at once, their cache one ``RowsKVCache`` per layer whose row i
        holds exactly ``rows[i].context[:-1]`` (``batch_cache.prefill_rows``): one copy of
        the batch cache for all of them."""
        want = [len(r.context) - 1 for r in rows]
        for c in layers:
            held = c.held() if isinstance(c, RowsKVCache) else None
            if held != want:
                raise ValueError(f"joining rows need batch cache layers holding each row's context "
                                 f"but the last token ({want}); got {held}")
        if self.cache is None:
            self._check_batchable(rows)
            self.cache, self.rows = layers, list(rows)
            return
        self._add(rows, layers)

    def _check_batchable(self, new: Sequence[Row]) -> None:
        if len(self.rows) + len(new) > 1 and any(r.tree_budget for r in (*self.rows, *new)):
            raise ValueError("token trees (a draft tree budget) are verified one request at a time")

    def _add(self, rows: Sequence[Row], layers: list[RowsKVCache]) -> None:
        self._check_batchable(rows)
        self._unpark()  # the join copies the batch cache anyway: parked rows leave first
        if any(type(c) not in (KVCache, RowsKVCache) for c in self.layers):
            kinds = sorted({type(c).__name__ for c in self.layers})
            raise ValueError(f"cannot batch cache layers {kinds}: batching needs full-attention KVCache")
        if not isinstance(self.layers[0], RowsKVCache):
            self.cache = [RowsKVCache.from_kv(c) for c in self.layers]
        for c, m in zip(self.layers, layers):
            c.extend(m)  # right-aligns both: the shorter side gets left padding
        self.rows.extend(rows)

    def leave(self, i: int) -> list[Any]:
        return self.leave_rows([i])[0]

    def leave_rows(self, indices: Sequence[int]) -> list[list[Any]]:
        """Remove rows ``indices`` (one copy of the batch cache for all of them); returns
        each one's cache layers, in the order asked, holding exactly its ``context[:-1]``."""
        out = self._extract(indices)
        self._drop(indices)
        return out

    def park_rows(self, indices: Sequence[int]) -> tuple[list[list[Any]], list[int]]:
        """``leave_rows`` for finished rows, without copying the batch cache for each:
        returns their cache layers (as ``leave_rows``) and the row indices that left the
        batch now. A batched row's layers are copied out at once, but its slot stays,
        ``parked`` (a greedy one-token row whose output nobody reads), until parked rows
        are a quarter of the batch, a row joins, no other row is left or they have ridden
        along for ``PARK_STEPS`` steps' worth of rows (``step``); then they all leave in
        one copy. Why: each leave copies every remaining row's cache (0.3-0.5 s
        at 32 rows of 576 tokens, more than a step: ``lab/batch-leave-and-park-cost/batch_leave_cost.py``), and
        speculative rows finish on different steps; a parked row costs one row of a step."""
        out = self._extract(indices)
        if not isinstance(self.layers[0], RowsKVCache):
            self._drop(indices)
            return out, list(indices)
        for i in indices:
            self.rows[i] = parked_stand_in(self.rows[i])
        parked = [j for j, r in enumerate(self.rows) if r.parked]
        if 4 * len(parked) < len(self.rows):
            return out, []
        return out, self._unpark()

    def ride_parked(self) -> None:
        """Before a step: parked rows that have ridden along for ``PARK_STEPS`` steps' worth
        of rows leave (one copy of the batch cache)."""
        n = sum(r.parked for r in self.rows)
        if n:
            self.parked_cost += n / len(self.rows)
            if self.parked_cost >= PARK_STEPS:
                self._unpark()

    def _unpark(self) -> list[int]:
        """Every parked row leaves (one copy of the batch cache); returns their indices."""
        parked = [j for j, r in enumerate(self.rows) if r.parked]
        if parked:
            self._drop(parked)
        self.parked_cost = 0.0
        return parked

    def _extract(self, indices: Sequence[int]) -> list[list[Any]]:
        lone = not isinstance(self.layers[0], RowsKVCache)  # a lone row's own layers
        out = [self.layers] if lone else [[c.extract(i) for c in self.layers] for i in indices]
        if self.inflight is not None:  # the queued step fed them one token more
            for i, layers in zip(indices, out):
                if i < self.inflight.covers:
                    trim(layers, 1)
        if not lone:  # copied now (a lazy slice would keep the whole batch buffer alive),
            # without waiting: a queued pipelined step runs first, and the host builds the
            # next step meanwhile instead of stalling the pipeline on every finished row
            mx.async_eval([c.state for layers in out for c in layers])
        return out

    def _drop(self, indices: Sequence[int]) -> None:
        gone = set(indices)
        keep = [j for j in range(len(self.rows)) if j not in gone]
        if self.inflight is not None:
            self.inflight = self.inflight.kept([j for j in keep if j < self.inflight.covers])
        self.rows = [self.rows[j] for j in keep]
        if not self.rows:
            self.cache = None
        else:
            for c in self.layers:
                c.filter(keep)  # also drops the padding every remaining row shares
