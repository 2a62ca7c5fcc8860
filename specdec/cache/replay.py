"""Re-running a recurrent layer on the rows a verify step kept, model-agnostically.

Contract:
- ``watch(model)`` (idempotent) lets every module of ``model`` whose ``__call__`` takes a
  ``cache`` say so while it runs (``report``), and every module inside one remember its
  output while a block is recorded (``remember``): each module's class is swapped, on this
  instance only, for a subclass whose ``__call__`` does that around the original call.
  Nothing else changes: the subclass computes exactly what the class does, and
  ``isinstance`` still holds. It also hooks mlx-lm's one-step gated-delta recurrence
  (``gated_delta._gated_delta_step_ops``, looked up by its loop at call time), so that
  while a block is recorded each position's output is kept per running layer.
- ``record()`` ... ``stop()``: between them (one verify block's forward), modules inside
  watched ones remember (their input, their output) per module, and recurrence steps
  their outputs; ``stop`` returns that memo and ends recording.
- ``caller_of(cache)``: called from a recurrent cache's ``advance`` (mlx-lm's recurrent
  layers call it once per forward, inside the layer, after writing the new state); returns
  the innermost running module that received that very cache object as an argument: the
  recurrent layer (its mixer), with the arguments it got. None when no watched module did.
- ``rerun(call, fed, kept, memo)`` calls that module again with every activation argument
  cut to its first ``kept`` rows (an array whose axis 1 is the ``fed``-row block), so a
  layer whose cache was given back its pre-block arrays computes (lazily) its state after
  exactly the kept rows. A module inside it called on one of those very cut arrays returns
  its block output's first ``kept`` rows from ``memo``, and the recurrence's steps return
  the block's; everything else is computed again. The output is discarded, and MLX never
  evaluates what the state does not depend on (the output projection, the rest of the
  model).

Why this is exact and cheap: a recurrent layer's new state depends only on its old state
and its input rows, and the rows a verify forward fed it for the kept positions are
already computed (they depend on the accepted tokens only: the model is causal); so are
each position-wise module's outputs on them, and the state after each position on a path
that steps one position at a time. What a rerun still computes is a few small ops per
layer (measured: ``scripts/hybrid_rollback_cost.py``). A module or layer called twice in
one block is not reused (which call a rerun repeats is unknown): it is computed again.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, NamedTuple

import mlx.core as mx

_local = threading.local()
_SUBCLASSES: dict[tuple[type, str], type] = {}


class Call(NamedTuple):
    module: Any
    args: tuple
    kwargs: dict


def _stack() -> list[Call]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _takes_cache(cls: type) -> bool:
    try:
        return "cache" in inspect.signature(cls.__call__).parameters
    except (TypeError, ValueError):
        return False


def _reporting_call(cls: type):
    def __call__(self, *args, **kwargs):
        stack = _stack()
        memo = getattr(_local, "memo", None)
        if memo is not None:  # a module run twice in a block (shared weights): steps unknown
            memo["calls", id(self)] = memo.get(("calls", id(self)), 0) + 1
        stack.append(Call(self, args, kwargs))
        try:
            return cls.__call__(self, *args, **kwargs)
        finally:
            stack.pop()
    return __call__


def _remembering_call(cls: type):
    def __call__(self, *args, **kwargs):
        x = args[0] if args else None
        rerun = getattr(_local, "rerun", None)
        if rerun is not None and x is not None:
            memo, cuts, kept, _ = rerun
            seen, block = memo.get(id(self)), cuts.get(id(x))
            # a hit only on the very rows the block gave it, cut: the first kept rows of
            # its block output are what it computes for those rows (positions are causal)
            if seen is not None and block is not None and seen[0] is block:
                return seen[1][:, :kept]
        out = cls.__call__(self, *args, **kwargs)
        memo = getattr(_local, "memo", None)
        if memo is not None and isinstance(x, mx.array) and isinstance(out, mx.array) \
                and x.ndim >= 2 and out.ndim >= 2 and out.shape[1] == x.shape[1]:
            # called twice in one block: which call a rerun repeats is unknown, so neither
            memo[id(self)] = (x, out) if id(self) not in memo else (None, None)
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


def watch(model: Any) -> None:
    """Let the modules of ``model`` that take a ``cache`` report themselves, and every
    module inside one remember its output while a block runs (module docstring)."""
    _watch_recurrences()
    watched = set(_SUBCLASSES.values())
    for m in model.modules():
        if type(m) in watched or not _takes_cache(type(m)):
            continue
        m.__class__ = _watching(type(m), "report")
        for _, child in m.named_modules():
            if child is not m and type(child) not in watched and not _takes_cache(type(child)):
                child.__class__ = _watching(type(child), "remember")
        watched = set(_SUBCLASSES.values())


def record() -> None:
    """From now until ``stop``: modules inside watched ones remember their block outputs."""
    _local.memo = {}


def stop() -> dict:
    memo, _local.memo = getattr(_local, "memo", None) or {}, None
    return memo


def caller_of(cache: Any) -> Call | None:
    """The innermost running watched module that got ``cache`` itself as an argument."""
    for call in reversed(_stack()):
        if any(a is cache for a in call.args) or any(a is cache for a in call.kwargs.values()):
            return call
    return None


def _remembering_steps(step):
    """mlx-lm's one-step gated-delta recurrence (its CPU path runs it once per position),
    remembering each step's output while a block runs, per running recurrent layer, and
    giving them back in order when that layer is rerun: the state after each position is
    computed once, by the block."""
    def recurrence_step(*args, **kwargs):
        stack = _stack()
        key = ("steps", id(stack[-1].module)) if stack else None
        rerun = getattr(_local, "rerun", None)
        if rerun is not None and key is not None:
            memo, _, kept, taken = rerun
            once = memo.get(("calls", key[1])) == 1
            seen = memo.get(key, ()) if once else ()
            t = taken.get(key, 0)
            if t < min(kept, len(seen)):
                taken[key] = t + 1
                return seen[t]
        out = step(*args, **kwargs)
        memo = getattr(_local, "memo", None)
        if memo is not None and key is not None:
            memo.setdefault(key, []).append(out)
        return out
    recurrence_step.remembers = step
    return recurrence_step


def _watch_recurrences() -> None:
    """Hook the recurrence helpers mlx-lm's layers share (module globals their loops look
    up at call time). Only a speed path: without it a rerun computes the steps again."""
    from mlx_lm.models import gated_delta

    step = getattr(gated_delta, "_gated_delta_step_ops", None)
    if step is not None and not hasattr(step, "remembers"):
        gated_delta._gated_delta_step_ops = _remembering_steps(step)


def rerun(call: Call, fed: int, kept: int, memo: dict) -> None:
    """Run ``call``'s module again on the first ``kept`` of its ``fed`` rows (lazily: only
    the cache writes it makes are ever evaluated). A module inside it that the block ran
    on one of these very arrays gives its block output's first ``kept`` rows (``memo``,
    from ``stop``) instead of computing them again: the in-projections cost no weight pass."""
    cuts: dict[int, mx.array] = {}

    def cut(a: Any) -> Any:
        if isinstance(a, mx.array) and a.ndim >= 2 and a.shape[1] == fed:
            part = a[:, :kept]
            cuts[id(part)] = a
            return part
        return a

    args = tuple(cut(a) for a in call.args)
    kwargs = {k: cut(v) for k, v in call.kwargs.items()}
    _local.rerun = (memo, cuts, kept, {})
    try:
        call.module(*args, **kwargs)
    finally:
        _local.rerun = None
