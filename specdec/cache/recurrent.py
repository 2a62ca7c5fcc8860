"""Rollback for models with recurrent state (hybrid and pure SSM models), model-agnostic.

Contract: ``RecurrentCache`` is the model's cache list (mlx-lm runs on it unchanged);
``begin(tokens)`` keeps each recurrent layer's pre-block arrays before a verify block,
``end_block()`` closes the block's record, ``rewind(n)`` drops the last ``n`` fed positions
by ``"replay"`` (re-run recurrent layers on their kept rows; the default) or ``"refeed"``
(kept tokens ride in front of the next block); ``settle()`` feeds them at once. Rewinding
past the last block, batched rows and trees raise ``RollbackError``.
Tests: tests/cache/test_recurrent.py, tests/drafters/test_draft_model_hybrid.py. Why replay (measured) and the
contract in full: docs/caches.md#recurrent-layers-hybrid-models; docs/how-it-works.md, "Hybrid models"."""

from __future__ import annotations

from typing import Any, Iterator, Sequence, cast

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, RotatingKVCache

from . import replay
from ..core.model import Model
from .errors import RollbackError


def _leaves(layer: Any) -> Iterator[Any]:
    """The cache objects of one layer (a ``CacheList`` holds several)."""
    if isinstance(layer, CacheList):
        for c in layer.caches:
            yield from _leaves(c)
    else:
        yield layer


def has_recurrent(layers: Sequence[Any]) -> bool:
    return any(isinstance(c, ArraysCache) for layer in layers for c in _leaves(layer))


LINEAR_DRAFTS = "use linear drafts (--draft-tree-budget 0)"


def trees_refused(fix: str = LINEAR_DRAFTS) -> str:
    return f"token trees are not verified on models with recurrent layers (hybrids): {fix}"


def refuse_trees(layers: Sequence[Any], tree_budget: int | str, fix: str = LINEAR_DRAFTS) -> None:
    """The one check for token trees on a hybrid: a tree branches the cache and a recurrent
    state cannot, so a tree budget (a number or "auto") on ``layers`` (a model's cache, e.g.
    ``make_cache(model, rollback=False)``) with recurrent layers is refused before anything
    is measured or run; ``fix`` says what to do instead (the caller's flag or config)."""
    if tree_budget and has_recurrent(layers):
        raise ValueError(trees_refused(fix))


class CountedArraysCache(ArraysCache):
    """mlx-lm's ``ArraysCache`` that also counts the positions it has seen (``offset``,
    as attention caches have): every mlx-lm recurrent layer calls ``advance(n)`` once per
    forward of n tokens, so a recurrent layer's position is checked like any other."""

    def __init__(self, size: int):
        super().__init__(size)
        self.offset = 0
        self.calls: list[replay.Call | None] | None = None  # recorded while a block runs

    def advance(self, N: int) -> None:
        super().advance(N)
        self.offset += N
        if self.calls is not None and len(self.calls) < 2:  # in a verify block: who wrote it
            self.calls.append(replay.caller_of(self))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in held_arrays(self))


def held_arrays(layer: ArraysCache) -> list[mx.array]:
    """The arrays a recurrent layer holds now (its empty slots left out)."""
    # mlx-lm's __init__ fills ``cache`` with None unannotated: the checker reads list[None]
    return [a for a in cast("list[mx.array | None]", layer.cache) if a is not None]


def _counted(layer: Any) -> Any:
    if isinstance(layer, CacheList):
        return CacheList(*(_counted(c) for c in layer.caches))
    if type(layer) is ArraysCache:
        if not layer.empty():
            raise ValueError("recurrent layers are converted while empty (make_cache)")
        return CountedArraysCache(len(layer.cache))
    return layer


def recurrent_layers(model: Model, layers: Sequence[Any]) -> "RecurrentCache":
    """``layers`` (a fresh cache) as a ``RecurrentCache`` whose recurrent layers count."""
    return RecurrentCache(model, [_counted(c) for c in layers])


def recurrent(cache: Any) -> bool:
    return isinstance(cache, RecurrentCache)


class RecurrentCache(list):
    """The cache list of a model with recurrent layers: ``begin`` / ``end_block`` around a
    verify block, ``rewind(n)`` within it (replay or re-feed), ``settle``, checkpoints."""

    def __init__(self, model: Model, layers: Sequence[Any]):
        super().__init__(layers)
        self.model = model
        self.recorder = replay.Recorder(model)  # entered only while a block or a rerun runs
        self._narrowed = False  # whether the recorder swaps only the recurrent layers yet
        leaves = [c for layer in layers for c in _leaves(layer)]
        self.states = [c for c in leaves if isinstance(c, ArraysCache)]
        self.attention = [c for c in leaves if not isinstance(c, ArraysCache)]
        for c in self.attention:
            # a RotatingKVCache's trim is wrong after it wraps (rollback.WindowKVCache's docstring)
            if not hasattr(c, "trim") or not c.is_trimmable() or isinstance(c, RotatingKVCache):
                raise RollbackError(f"{type(c).__name__} beside recurrent layers cannot roll back")
        self._snap: list[list[Any]] | None = None
        self._fed: list[int] = []  # what went through the model since the snapshot
        self.pending: list[int] = []  # kept tokens not fed again yet (see ``settle``)
        self._mark: tuple[int, list[list[Any]]] | None = None  # see ``checkpoint``
        self.kind = "replay"  # how ``rewind`` rebuilds the recurrent states (docs/caches.md#recurrent-layers-hybrid-models)
        self._calls: list[list[replay.Call | None] | None] | None = None  # per recurrent layer,
        # who wrote it in the block
        self._memo: dict = {}  # what the block's modules remembered (``Recorder.stop``)
        self.last_rollback: str | None = None  # how the last partial rewind did it

    def positions(self) -> set[int]:
        """The position counts of every layer (one value when they agree); settles first."""
        self.settle()
        return {c.offset for c in (*self.attention, *self._counting())}

    @property
    def nbytes(self) -> int:
        """Bytes held, the checkpoint's own recurrent arrays included (the prefix store's
        budget counts them)."""
        held = {id(a): a.nbytes for c in self.states for a in held_arrays(c)}
        if self._mark is not None:
            held.update({id(a): a.nbytes for arrays in self._mark[1] for a in arrays if a is not None})
        return sum(c.nbytes for c in self.attention) + sum(held.values())

    def settle(self) -> None:
        """Feed the pending kept tokens now (lazily: no host sync), so every layer holds
        exactly the accepted positions; callers outside a verify step need this."""
        self.recorder.stop()  # a block's memo never outlives it (nothing to roll back after this)
        if self.pending:
            tokens, self.pending = self.pending, []
            # logits unused and never evaluated: only the cache arrays are computed
            self.model(mx.array(tokens)[None], cache=self)

    def begin(self, tokens: Sequence[int]) -> list[int]:
        """Before a verify forward of ``tokens``: snapshot, and return what to feed: the
        pending kept tokens of the last re-feed rollback, then ``tokens`` (the caller drops
        the logits of the pending ones)."""
        for c in self.states:
            if c.lengths is not None or c.left_padding is not None:
                raise RollbackError("recurrent layers with batched rows cannot roll back: "
                                    "hybrid requests run one at a time")
        self._snap = [list(c.cache) for c in self.states]
        self._fed, self.pending = self.pending + list(tokens), []
        self._calls, self._memo = None, {}
        for c in self._counting():
            c.calls = [] if self.kind == "replay" else None
        if self.kind == "replay":
            self.recorder.open()  # left in ``end_block``: the forward is built by then
            self.recorder.record()
        return self._fed

    def end_block(self) -> None:
        """Right after the block's forward was built (the caller of ``begin``): what the
        layers recorded is kept for ``rewind``, and nothing after the block is recorded."""
        counting = self._counting()
        self._calls = [c.calls for c in counting]
        self._memo = self.recorder.stop()
        self.recorder.close()
        writers = self._writers()
        if not self._narrowed and writers is not None:  # the layers are known: swap only them
            self.recorder.narrow([call.module for call in writers])
            self._narrowed = True
        for c in counting:
            c.calls = None

    def _writers(self) -> list[replay.Call] | None:
        """Each recurrent layer's one writer in the block, when every layer was written
        exactly once, by a module that got its cache as an argument (``Recorder.caller_of``);
        None when the block cannot be replayed."""
        if self._calls is None or len(self._calls) != len(self.states):
            return None
        writers = []
        for calls in self._calls:
            if calls is None or len(calls) != 1 or calls[0] is None:
                return None
            writers.append(calls[0])
        return writers

    def _counting(self) -> list[CountedArraysCache]:
        """The recurrent layers, each counting its positions (as ``make_cache(...,
        recurrent=True)`` makes them); a verify block and its rewind need that."""
        counting = [c for c in self.states if isinstance(c, CountedArraysCache)]
        if len(counting) != len(self.states):
            raise RollbackError("a recurrent layer does not count its positions: build the "
                                "cache with make_cache(model, recurrent=True)")
        return counting

    def rewind(self, n: int) -> int:
        if self._calls is None:  # the block's caller did not end it: it ends here
            self.end_block()
        writers = self._writers()
        replayable = writers is not None
        memo, self._calls, self._memo = self._memo, None, {}
        if n == 0:
            self._snap, self._fed = None, []
            return 0
        if self.pending or self._snap is None or not 0 < n <= len(self._fed):
            raise RollbackError(f"a recurrent cache rewinds only within its last verify block "
                                f"({len(self._fed)} positions), not {n}: rebuild the cache")
        fed, kept = len(self._fed), len(self._fed) - n
        # replay keeps the attention layers' kept positions; a re-feed computes them again
        cut = n if replayable else fed
        for c in self.attention:  # checked first: never leave layers disagreeing
            if cut > c.offset or (hasattr(c, "check_trim") and c.check_trim(cut)):
                raise RollbackError(f"{type(c).__name__} cannot trim {cut} of {c.offset} positions")
        for c in self.attention:
            c.trim(cut)
        for c, saved in zip(self._counting(), self._snap):
            c.cache = list(saved)
            c.offset -= fed
        if writers is not None:
            # each recurrent layer runs again on its kept input rows (lazily): its state
            # after exactly the kept positions, and ``advance`` puts its offset there
            with self.recorder:
                for call in writers:
                    if kept:
                        self.recorder.rerun(call, fed, kept, memo)
            self.pending, self.last_rollback = [], "replay"
        else:
            # the kept tokens ride in front of the next verify block (one forward, not
            # two); ``settle`` feeds them for anyone who needs the cache before that
            self.pending, self.last_rollback = self._fed[:kept], "refeed"
        self._snap, self._fed = None, []
        return n

    def checkpoint(self) -> None:
        """Remember the state here (references, no copy), so a later prompt that shares
        the positions up to here but diverges after them can come back (``restore``): a
        conversation's next turn repeats the last prompt, rarely the reply's exact tokens."""
        (at,) = self.positions()
        self._mark = (at, [list(c.cache) for c in self.states])

    @property
    def checkpointed(self) -> int | None:
        """The position of the last ``checkpoint`` (None: none)."""
        return self._mark[0] if self._mark is not None else None

    def restore(self) -> int:
        """Go back to the last ``checkpoint``; returns its position, or raises
        ``RollbackError`` when there is none or an attention layer cannot trim that far."""
        mark = self._mark
        (at,) = self.positions()
        if mark is None or mark[0] > at:
            raise RollbackError("no checkpoint of the recurrent state to go back to")
        for c in self.attention:  # checked first: never leave layers disagreeing
            if hasattr(c, "check_trim"):
                c.check_trim(at - mark[0])
        for c in self.attention:
            c.trim(at - mark[0])
        for c, saved in zip(self._counting(), mark[1]):
            c.cache, c.offset, c.calls = list(saved), mark[0], None
        self._calls, self._memo = None, {}
        self.recorder.stop()
        self._snap, self._fed = None, []
        return mark[0]

    def compact(self, *_: Any) -> None:
        raise RollbackError(trees_refused())
