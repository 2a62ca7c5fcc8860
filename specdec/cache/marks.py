"""Rollback of a draft model's recurrent cache by per-position marks.

- ``StepMarks(cache)`` on a ``recurrent.RecurrentCache``. ``mark(position)`` remembers every
  recurrent layer's arrays (references, no copy) as the state after ``position`` tokens;
  ``anchor=True`` marks a prompt's end, kept until the next anchor.
- ``back_to(position, at)``: a cache holding ``at`` tokens goes back to the latest mark at
  or before ``position`` (attention layers trim, recurrent layers get the marked arrays
  back) and returns that mark's position; ``RollbackError`` when there is none (rebuild).
Why marks, not the target's replay or re-feed: a draft model's chain feeds one token per
forward, so the state after every drafted position exists already; keeping a reference
to it is exact and costs nothing, where a replay or a re-feed computes again.
Tests: tests/cache/test_marks.py, tests/drafters/test_draft_model_hybrid.py.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx

from .errors import RollbackError
from .recurrent import CountedArraysCache, RecurrentCache


class Mark(NamedTuple):
    arrays: list[list[mx.array | None]]  # per recurrent layer, its cache entries
    offsets: list[int | None]  # per recurrent layer, its position count (None: not counted)


class StepMarks:
    """Per-position marks of a draft model's recurrent states: ``mark(position)``, and
    ``back_to(position, at)`` the latest mark at or before ``position``."""

    def __init__(self, cache: RecurrentCache):
        self.cache = cache
        self._at: dict[int, Mark] = {}
        self.anchor: int | None = None

    def __len__(self) -> int:
        return len(self._at)

    def mark(self, position: int, anchor: bool = False) -> None:
        # mlx-lm's recurrent layers replace their cache entries (``cache[i] = new``) and MLX
        # arrays are immutable, so references are the state at this position for good
        states = self.cache.states
        self._at[position] = Mark([list(c.cache) for c in states],
                                  [getattr(c, "offset", None) for c in states])
        if anchor:  # a new prompt: what came before its end is never gone back to again
            self._at = {p: m for p, m in self._at.items() if p >= position}
            self.anchor = position

    def _keep_only(self, position: int) -> None:
        """Drop every mark but ``position``'s and the anchor (their tokens are gone, or a
        later mark serves any rollback they could)."""
        self._at = {p: m for p, m in self._at.items() if p in (position, self.anchor)}

    def back_to(self, position: int, at: int) -> int:
        """Go back to the latest mark at or before ``position`` (docs/caches.md#recurrent-layers-hybrid-models)."""
        if not 0 <= position <= at:
            raise RollbackError(f"cannot go back to position {position} of a cache holding {at}")
        if position == at:  # nothing to drop: the state is already there
            self._keep_only(at)
            return at
        marks = [p for p in self._at if p <= position]
        if not marks:
            raise RollbackError(f"no recurrent state marked at or before position {position}: "
                                "rebuild the cache")
        p = max(marks)
        cut = at - p
        attention = self.cache.attention
        for c in attention:  # checked first: never leave layers disagreeing
            if cut > c.offset or (hasattr(c, "check_trim") and c.check_trim(cut)):
                raise RollbackError(f"{type(c).__name__} cannot trim {cut} of {c.offset} positions")
        for c in attention:
            c.trim(cut)
        mark = self._at[p]
        for c, arrays, offset in zip(self.cache.states, mark.arrays, mark.offsets):
            # mlx-lm's ArraysCache.__init__ fills ``cache`` with None unannotated (read: list[None])
            c.cache = list(arrays)  # type: ignore[arg-type]
            if isinstance(c, CountedArraysCache) and offset is not None:
                c.offset = offset
        if self.anchor is not None and self.anchor > p:
            self.anchor = None
        self._keep_only(p)
        return p
