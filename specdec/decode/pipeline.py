"""Pipelined plain steps of a batch: while every row decodes plainly and greedily, the next
step's forward is queued on the device before this one is read, as ``plain.plain_steps``
does for one stream.

Invariant: the tokens and logprobs are those ``step.verify_step`` gives the same rows; a
queued step (``Batch.inflight``) has fed its rows one token more than their contexts'
``[:-1]``. Tests: tests/decode/test_pipeline.py, tests/decode/test_batch.py (pipelined and
landed steps), tests/drafters/test_gate.py.
"""

from __future__ import annotations

import time
from typing import Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from ..cache.batch_cache import RowsKVCache
from ..cache.recurrent import RecurrentCache
from ..core.proposal import EMPTY
from ..policy.drafting import StepTime
from .batch import Batch, InFlight
from .rows import (NOTHING, Drafted, Row, draft_for_step, drafting, last_tokens, observe_row, plain_row,
                   row_failed)
from .step import Step, Verify, land_plain_step, queue_plain_step


def pipelines(batch: Batch, speculate: bool) -> bool:
    """Whether this step is plain for every row and the next may be queued before it is
    read: each row greedy with nothing beyond the argmax to compute, full-attention
    layers, and no row drafting (none asked, a policy at k = 0, or blocks priced out:
    the block policy keeps L = 1 for drafts as long as each row's last proposal)."""
    rows = batch.rows
    if not rows or not all(map(plain_row, rows)) or isinstance(batch.layers, RecurrentCache) \
            or any(type(c) not in (KVCache, RowsKVCache) for c in batch.layers):
        return False
    # a batch judges by each row's last proposal (so a row with nothing to copy does not
    # hold it off the pipelined path); a lone row asks its drafter every step, as a single
    # stream does (its policy pauses it instead)
    lone = len(rows) == 1  # (a drafter that reads verify ``outputs`` drafts from them: asked as if alone)
    drafts = [min(r.k if r.drafted is None or lone or r.drafter.outputs else r.drafted, r.depth)
              if speculate and drafting(r) else 0 for r in rows]
    return max(drafts) < 1 or batch.price.block(drafts, [r.alpha for r in rows]) == 1


def pipelined_step(batch: Batch) -> list[Step]:
    """Queue the next plain step (after the one already queued, or after this one), then
    read this one (a lone row's policy learns what the plain token cost, as a single
    stream's does)."""
    rows, cur, t0 = batch.rows, batch.inflight, time.perf_counter()
    if cur is None:
        cur = InFlight(_queue(batch, last_tokens(rows), 0), len(rows))
    feed = cur.arrays[0]
    if cur.covers < len(rows):  # rows that joined since it was queued: fed from the host
        feed = mx.concatenate([feed, last_tokens(rows[cur.covers:])])
    batch.inflight = InFlight(_queue(batch, feed, cur.covers), len(rows))
    steps = land(batch, cur)
    if len(rows) == 1 and cur.covers == 1:
        rows[0].policy.took(StepTime(0, time.perf_counter() - t0))
    return steps


def _queue(batch: Batch, tokens: mx.array, ahead: int) -> list[mx.array]:
    """``queue_plain_step`` of the batch's rows, the first ``ahead`` fed one token past their
    contexts (on a queued step's token); what a drafter wants of it (a head's features)."""
    wants = [r.drafter.feed_wants(len(r.context) - (0 if i < ahead else 1), 1) if r.drafter.outputs
             else None for i, r in enumerate(batch.rows)]
    return queue_plain_step(batch.model, batch.layers, tokens, wants if any(wants) else ())


def land(batch: Batch, cur: InFlight) -> list[Step]:
    """Read a queued plain step of the first ``cur.covers`` rows and observe it: a policy
    not drafting is told the token (as in a single stream's plain stretch); another drafter's
    proposal is made and cut as a plain verify step would (its first draft against the
    emitted token: ``rows.observe``). Where the batch's price rules out every block, only
    the row in turn (``probed``) is asked or told; the others' contexts grow alone."""
    rows = batch.rows[: cur.covers]
    steps = land_plain_step(cur.arrays, [Verify(r.context, EMPTY, r.sampler) for r in rows])
    hopeless = batch.price.hopeless(len(rows), max((r.k for r in rows if r.speculative), default=0))
    probe = None if hopeless else probed(batch, rows)
    for i, (r, s) in enumerate(zip(rows, steps)):
        if probe is not None and i != probe:  # not its turn: its drafter and policy catch
            steps[i] = observe_row(rows, i, NOTHING, s)  # up from the context when next asked
            continue
        paused = r.speculative and not r.policy.drafts
        asks = r.speculative and not paused and not hopeless
        try:  # a pipelined step drafts after it landed: a drafter's failure is its row's
            drafted = Drafted(draft_for_step(r.policy, r.context, r.depth), EMPTY) if asks else NOTHING
        except Exception as e:
            steps[i] = row_failed(rows, s, e)
            continue
        steps[i] = observe_row(rows, i, drafted, s)
        if paused and steps[i].error is None:
            r.policy.plain(r.context)
    return steps


def probed(batch: Batch, rows: Sequence[Row]) -> int | None:
    """The one row (round robin over the slots) whose drafter is asked after this plain
    step where the price rules out every block even at the rows' full depths (None: every
    row is asked). Why: at 32 rows asking every drafter cost ~10 ms of host work a step
    (profiled) for estimates no step could use; one row a step keeps evidence coming, so
    the batch drafts again once a long copy or fewer rows make a block pay
    (lab/serve-throughput-vs-mlx-lm/probe-one-row)."""
    if not batch.price.priced_out([r.depth if drafting(r) else 0 for r in rows], [r.alpha for r in rows]):
        return None
    batch.probe = (batch.probe + 1) % len(rows)
    return batch.probe
