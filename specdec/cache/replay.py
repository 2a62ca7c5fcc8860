"""Re-running a recurrent layer on the rows a verify step kept, model-agnostically.

``Recorder(model)`` is a context manager: inside ``with recorder:`` every module of
``model`` that takes a ``cache`` reports itself running (``caller_of``), every module inside
one remembers its block output while ``record()`` ... ``stop()`` runs, and mlx-lm's per-step
gated-delta recurrence remembers each position's output; ``rerun`` calls a recorded layer
again on its first ``kept`` rows, reusing what the block computed. Invariant: on exit every
module has its own class again and mlx-lm's hook is its own; inside, each computes exactly
what its class does. Scope: ``RecurrentCache`` enters it around a verify block's forward and
around a rollback's reruns only (after its first block, only the recurrent layers swap).
Tests: tests/cache/test_replay.py; parity in tests/cache/test_recurrent.py, tests/drafters/test_draft_model_hybrid.py; why: docs/how-it-works.md.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, NamedTuple

import mlx.core as mx
from mlx_lm.models import gated_delta

from ..core.model import Model

log = logging.getLogger(__name__)

HOOK = "_gated_delta_step_ops"  # mlx-lm's one-step recurrence, looked up by its loop per call
_SUBCLASSES: dict[tuple[type, str], type] = {}
_active: Recorder | None = None  # the recorder in scope (one inference thread per process)
_warned = False  # the absent-hook warning is logged once per process


class Call(NamedTuple):
    module: Any
    args: tuple
    kwargs: dict


class Key(NamedTuple):
    """A memo entry: ``what`` ("output": a module's (input, output) in the block; "calls":
    how often a reporting module ran; "steps": a recurrent layer's per-position outputs)
    of the module with ``id`` ``module`` (alive for the block: the model holds it)."""
    what: str
    module: int


class _Rerun(NamedTuple):
    memo: dict[Key, Any]
    cuts: dict[int, mx.array]  # id of a cut array -> the block array it was cut from
    kept: int
    taken: dict[Key, int]  # recurrence steps handed back so far, per layer


def step_hook(module: Any = gated_delta, name: str = HOOK) -> Callable | None:
    """mlx-lm's per-step recurrence (None when absent), unwrapped if a recorder hooks it."""
    step = getattr(module, name, None)
    return getattr(step, "remembers", step)


def fast_path(module: Any = gated_delta, name: str = HOOK) -> bool:
    """Whether the per-step hook exists; warns once when not: reruns then compute the
    recurrence steps again (still exact, slower)."""
    if step_hook(module, name) is not None:
        return True
    global _warned
    if not _warned:
        _warned = True
        log.warning("mlx_lm.models.gated_delta.%s is absent: hybrid rollback replays "
                    "recompute the recurrence (exact, slower)", name)
    return False


def _takes_cache(cls: type) -> bool:
    try:
        return "cache" in inspect.signature(cls.__call__).parameters
    except (TypeError, ValueError):
        return False


def _reporting_call(cls: type):
    def __call__(self, *args, **kwargs):
        rec = _active
        if rec is None:
            return cls.__call__(self, *args, **kwargs)
        if rec.memo is not None:  # a module run twice in a block (shared weights): steps unknown
            key = Key("calls", id(self))
            rec.memo[key] = rec.memo.get(key, 0) + 1
        rec.stack.append(Call(self, args, kwargs))
        try:
            return cls.__call__(self, *args, **kwargs)
        finally:
            rec.stack.pop()
    return __call__


def _remembering_call(cls: type):
    def __call__(self, *args, **kwargs):
        rec, x = _active, (args[0] if args else None)
        key = Key("output", id(self))
        if rec is not None and rec.rerunning is not None and x is not None:
            r = rec.rerunning
            seen, block = r.memo.get(key), r.cuts.get(id(x))
            # a hit only on the very rows the block gave it, cut: the first kept rows of
            # its block output are what it computes for those rows (positions are causal)
            if seen is not None and block is not None and seen[0] is block:
                return seen[1][:, :r.kept]
        out = cls.__call__(self, *args, **kwargs)
        memo = rec.memo if rec is not None else None
        if memo is not None and isinstance(x, mx.array) and isinstance(out, mx.array) \
                and x.ndim >= 2 and out.ndim >= 2 and out.shape[1] == x.shape[1]:
            # called twice in one block: which call a rerun repeats is unknown, so neither
            memo[key] = (x, out) if key not in memo else (None, None)
        return out
    return __call__


def _watching(cls: type, how: str) -> type:
    """``cls`` with a ``__call__`` that reports itself running (``report``) or remembers
    its block output for a rerun (``remember``); one subclass per class and way."""
    sub = _SUBCLASSES.get((cls, how))
    if sub is None:
        call = _reporting_call(cls) if how == "report" else _remembering_call(cls)
        sub = type(cls.__name__, (cls,), {"__call__": call, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _SUBCLASSES[cls, how] = sub
    return sub


def _swaps(model: Model) -> list[tuple[Any, type, type]]:
    """(module, its class, its watching subclass) for every module ``with`` swaps."""
    out: list[tuple[Any, type, type]] = []
    seen: set[int] = set()
    for m in model.modules():
        if id(m) in seen or not _takes_cache(type(m)):
            continue
        seen.add(id(m))
        out.append((m, type(m), _watching(type(m), "report")))
        for _, child in m.named_modules():
            if id(child) not in seen and not _takes_cache(type(child)):
                seen.add(id(child))
                out.append((child, type(child), _watching(type(child), "remember")))
    return out


def _remembering_steps(step: Callable) -> Callable:
    """mlx-lm's one-step recurrence, remembering each step's output while a block records,
    per running layer, and giving them back in order when that layer is rerun."""
    def recurrence_step(*args, **kwargs):
        rec = _active
        key = Key("steps", id(rec.stack[-1].module)) if rec is not None and rec.stack else None
        r = rec.rerunning if key is not None else None
        if r is not None:
            once = r.memo.get(Key("calls", key.module)) == 1
            seen = r.memo.get(key, ()) if once else ()
            t = r.taken.get(key, 0)
            if t < min(r.kept, len(seen)):
                r.taken[key] = t + 1
                return seen[t]
        out = step(*args, **kwargs)
        if key is not None and rec.memo is not None:
            rec.memo.setdefault(key, []).append(out)
        return out
    setattr(recurrence_step, "remembers", step)  # the marker ``step_hook`` and ``open`` read
    return recurrence_step


class Recorder:
    """The replay state of one model; ``with recorder:`` swaps its modules' classes (and
    mlx-lm's step hook) in, and out again on exit. Not re-entrant per model."""

    def __init__(self, model: Model):
        self.model = model
        self.stack: list[Call] = []  # running reporting modules, innermost last
        self.memo: dict[Key, Any] | None = None  # while a block records (``record``)
        self.rerunning: _Rerun | None = None  # while ``rerun`` runs
        self.fast = fast_path()
        self._swaps: list[tuple[Any, type, type]] | None = None  # built on first entry
        self._undo: list[tuple[Any, type]] = []
        self._hook: Callable | None = None  # mlx-lm's own step, while ours replaces it
        self._outer: Recorder | None = None

    def __enter__(self) -> Recorder:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> Recorder:
        """Swap the classes in (``with`` does it; ``begin`` / ``end_block`` span two calls)."""
        global _active
        if _active is self:
            return self
        if self._swaps is None:
            self._swaps = _swaps(self.model)
        for m, cls, sub in self._swaps:
            if type(m) is cls:  # a module swapped by an enclosing scope keeps that swap
                m.__class__ = sub
                self._undo.append((m, cls))
        step = getattr(gated_delta, HOOK, None)
        if step is not None and not hasattr(step, "remembers"):
            self._hook = step
            setattr(gated_delta, HOOK, _remembering_steps(step))
        self._outer, _active = _active, self
        return self

    def close(self) -> None:
        """Every swapped class and the step hook back as they were; a no-op when closed."""
        global _active
        if _active is not self:
            return
        for m, cls in self._undo:
            m.__class__ = cls
        self._undo = []
        if self._hook is not None:
            setattr(gated_delta, HOOK, self._hook)
            self._hook = None
        _active, self._outer = self._outer, None
        self.stack = []

    def narrow(self, layers: list[Any]) -> None:
        """Swap, from now on, only inside ``layers`` (every recurrent layer, as recorded by
        ``caller_of``): reruns run nothing else, so the rest need no swap (and each swap
        costs ~2 us per module per scope)."""
        keep = {id(m) for layer in layers for _, m in layer.named_modules()}
        if self._swaps is not None and _active is not self:
            self._swaps = [s for s in self._swaps if id(s[0]) in keep]

    def record(self) -> None:
        """From now until ``stop``: modules inside watched ones remember their block outputs."""
        self.memo = {}

    def stop(self) -> dict[Key, Any]:
        """End recording; returns what was recorded (empty when nothing was)."""
        memo, self.memo = self.memo or {}, None
        return memo

    def caller_of(self, cache: Any) -> Call | None:
        """The innermost running watched module that got ``cache`` itself as an argument."""
        for call in reversed(self.stack):
            if any(a is cache for a in call.args) or any(a is cache for a in call.kwargs.values()):
                return call
        return None

    def rerun(self, call: Call, fed: int, kept: int, memo: dict[Key, Any]) -> None:
        """Run ``call``'s module again (inside ``with self``) on the first ``kept`` of its
        ``fed`` rows, lazily; a module inside it that the block ran on one of these very
        arrays gives its block output's first ``kept`` rows (``memo``, from ``stop``)."""
        cuts: dict[int, mx.array] = {}

        def cut(a: Any) -> Any:
            if isinstance(a, mx.array) and a.ndim >= 2 and a.shape[1] == fed:
                part = a[:, :kept]
                cuts[id(part)] = a
                return part
            return a

        args = tuple(cut(a) for a in call.args)
        kwargs = {k: cut(v) for k, v in call.kwargs.items()}
        self.rerunning = _Rerun(memo, cuts, kept, {})
        try:
            call.module(*args, **kwargs)
        finally:
            self.rerunning = None


def caller_of(cache: Any) -> Call | None:
    """``Recorder.caller_of`` of the recorder in scope (None outside every scope)."""
    return _active.caller_of(cache) if _active is not None else None
