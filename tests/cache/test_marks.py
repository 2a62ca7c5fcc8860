"""``specdec.cache.marks.StepMarks``: going back to the latest mark restores the marked
recurrent arrays and trims attention to match; anchors and refusals (no model: a
``RecurrentCache`` over mlx-lm's own cache classes, written by hand)."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache

from specdec.cache.errors import RollbackError
from specdec.cache.marks import StepMarks
from specdec.cache.recurrent import RecurrentCache


def fed(n, marked=()):
    """A cache that took ``n`` tokens, its recurrent state after position p being [p], with
    marks at ``marked`` (an anchor at the first)."""
    cache = RecurrentCache(None, [ArraysCache(1), KVCache()])
    marks = StepMarks(cache)
    state, kv = cache.states[0], cache.attention[0]
    for p in range(1, n + 1):
        kv.update_and_fetch(mx.full((1, 2, 1, 4), float(p)), mx.full((1, 2, 1, 4), float(p)))
        state.cache[0] = mx.array([p])
        if p in marked:
            marks.mark(p, anchor=p == marked[0])
    return cache, marks


def state_of(cache):
    return cache.states[0].cache[0].item(), cache.attention[0].offset


def test_back_to_restores_the_latest_mark_at_or_before_the_position():
    cache, marks = fed(6, marked=(1, 3, 5))
    assert marks.back_to(4, at=6) == 3
    assert state_of(cache) == (3, 3)
    assert len(marks) == 2  # the kept mark and the anchor; later marks' tokens are gone
    assert marks.back_to(2, at=3) == 1 and state_of(cache) == (1, 1)


def test_going_back_to_the_present_keeps_the_state():
    cache, marks = fed(4, marked=(2, 4))
    assert marks.back_to(4, at=4) == 4 and state_of(cache) == (4, 4)


def test_an_anchor_drops_earlier_marks():
    cache, marks = fed(5, marked=(3,))
    marks.mark(1)  # before the anchor: kept only as long as nothing new anchors
    marks.mark(4, anchor=True)
    assert marks.anchor == 4 and len(marks) == 1
    with pytest.raises(RollbackError, match="no recurrent state marked at or before position 3: rebuild"):
        marks.back_to(3, at=5)


@pytest.mark.parametrize("position, at", [(-1, 3), (4, 3)])
def test_a_position_outside_the_cache_is_refused(position, at):
    _, marks = fed(3, marked=(1,))
    with pytest.raises(RollbackError, match=f"cannot go back to position {position} of a cache holding {at}"):
        marks.back_to(position, at)


def test_an_attention_layer_that_cannot_trim_leaves_every_layer_as_it_was():
    cache, marks = fed(3, marked=(1,))
    with pytest.raises(RollbackError, match="KVCache cannot trim 4 of 3 positions"):
        marks.back_to(1, at=5)  # the caller claims more than the attention layer holds
    assert state_of(cache) == (3, 3)
