"""The speculative loop, top-down: ``step`` is one step of every row of a batch (a single
stream is a batch of one), ``stream`` a single request's steps.

Invariant: each row's output is token for token what plain decoding of it alone gives
(greedy, seeded) or is distributed as it (unseeded sampling), whatever was drafted, priced
or batched beside it. Words: see ``specdec.decode``. Tests: tests/decode/test_loop.py,
tests/decode/test_batch.py,
tests/parity/test_parity_real.py, tests/drafters/test_gate.py, tests/test_engine.py.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Protocol

import mlx.core as mx
from mlx_lm.generate import generation_stream

from ..cache.recurrent import RecurrentCache
from ..core.model import Model
from ..core.processors import LogitsProcessor, processors_for
from ..core.proposal import Tail
from ..core.sampling import Rng, SamplingParams
from . import trace
from .batch import Batch, RowFailed
from .pipeline import land, pipelined_step, pipelines
from .plain import plain_steps
from .rows import NOTHING, Drafted, Row, drafting, observe_row, propose
from .step import SeededSampler, Step, Verify, verify_step


def step(batch: Batch, speculate: bool = True) -> list[Step]:
    """One step of every row (``speculate=False``: one token each, as the server asks while
    prompts wait for prefill). Rows that joined while a plain step was queued get their
    first Step from the next call. Runs on mlx-lm's ``generation_stream``, as its generators do."""
    batch.ride_parked()  # 0. finished rows that rode along long enough leave, together
    with mx.stream(generation_stream):
        # 1. pause: no row drafts and all are greedy -> queue the next plain step before reading this one
        if pipelines(batch, speculate):
            return pipelined_step(batch)
        if batch.inflight is not None:  # resume: the queued plain step is this call's step
            cur, batch.inflight = batch.inflight, None
            return land(batch, cur)
        rows, t_start = batch.rows, time.perf_counter()
        # 2. propose: each row's drafter, unless no block could pay at this batch size
        k = max((r.k for r in rows if r.speculative), default=0)
        speculate = speculate and not batch.price.hopeless(len(rows), k)
        drafted = [_propose(batch, i) if speculate else NOTHING for i in range(len(rows))]
        # 3. price: one block length L for the batch (a lone row drafts as it would alone)
        L = batch.price.block([len(d.verifies.tokens) for d in drafted], [r.alpha for r in rows])
        drafted = [d if len(d.verifies) < L else Drafted(d.full, d.verifies.truncated(L - 1))
                   for d in drafted]
        # 4. verify, accept, roll back: one forward over [last] + drafts (+ a drafter's tail:
        #    WeDLM's masks) of every row, one host sync, each row's cache rolled back past its
        #    first rejected draft
        verify = [Verify(r.context, d.verifies, r.sampler, r.processors, r.top_logprobs, r.diagnostics,
                         _tail(r, d) if speculate else None) for r, d in zip(rows, drafted)]
        L, t0 = max(v.block for v in verify), time.perf_counter()
        batch.propose_s = t0 - t_start  # read by a trace (``trace``): no clock of its own
        steps = verify_step(batch.model, batch.cache, verify, vocab=batch.vocab)
        # 5. observe: prices, cost gates, drafters, shapers and contexts learn the step
        batch.price.observe(len(rows), L, time.perf_counter() - t0)
        if len(rows) == 1:  # the gate prices a tail as the drafter's cost: the block without it
            rows[0].drafter.step_time(1 + len(drafted[0].verifies), time.perf_counter() - t_start)
        return [observe_row(rows, i, d, s) for i, (d, s) in enumerate(zip(drafted, steps))]


def _propose(batch: Batch, i: int) -> Drafted:
    """Row i's proposal. Beside other rows a drafter's failure is raised as that row's
    ``RowFailed`` (nothing has touched the cache, so the others step on unharmed); a
    lone row's error is raised as it is (a single stream's caller reads it)."""
    try:
        return propose(batch.rows[i], alone=len(batch.rows) == 1)
    except Exception as e:
        if len(batch.rows) == 1:
            raise
        raise RowFailed(i, e) from e


def _tail(row: Row, drafted: Drafted) -> Tail | None:
    """The tail a drafting row's drafter rides after a linear block (``drafters.wedlm``)."""
    if not drafting(row) or not drafted.verifies.is_linear:
        return None
    return row.drafter.tail(row.context, drafted.verifies.tokens)


class SingleStream(Protocol):
    """What ``stream`` reads of a prefilled request (``request.Request``, which imports
    this module: a Protocol keeps the seam typed without an import cycle)."""

    model: Model
    prompt_ids: list[int]
    sampling: SamplingParams
    rng: Rng | None
    diagnostics: bool
    top_logprobs: int
    processors: list[LogitsProcessor]

    @property
    def speculative(self) -> bool: ...
    @property
    def layers(self) -> list[Any]: ...
    def row(self) -> Row: ...


def stream(request: SingleStream) -> Iterator[Step]:
    """A single request's steps after its prefill (``request.Request``): pipelined plain
    decoding when nothing needs the host between tokens, else a batch of one that leaves
    for a pipelined plain stretch while its drafter is paused (6. pause / resume)."""
    if not request.speculative and not request.processors:
        yield from plain_steps(request.model, request.layers, request.prompt_ids, request.sampling,
                               request.rng, request.diagnostics, request.top_logprobs)
        return
    batch, row = Batch(request.model), request.row()
    batch.join(row, request.layers)
    pausable = not request.processors and all(p.pipelined for p in processors_for(request.sampling))
    tracer = trace.active()  # once per request: no trace, no cost per step
    if tracer is not None:
        tracer.begin()
    while True:
        if pausable and row.drafter.paused:  # a paused drafter may start so (the cost gate)
            layers = batch.leave(0)
            stretch = _plain_stretch(request, row, layers)
            yield from stretch if tracer is None else tracer.follow(stretch, row.drafter)
            batch.join(row, layers)
        if tracer is None:
            yield step(batch)[0]
        else:
            batch.propose_s = None
            yield tracer.step(row.drafter, lambda: step(batch)[0], lambda: batch.propose_s)


def _plain_stretch(request: SingleStream, row: Row, layers: list[Any]) -> Iterator[Step]:
    """Pipelined plain steps while the drafter is paused; the cache then holds the row's
    context but its last token again, ready for the next verify step."""
    if isinstance(layers, RecurrentCache):
        layers.settle()  # the last rollback's kept tokens, before plain forwards
    keys = row.sampler if isinstance(row.sampler, SeededSampler) else request.rng
    plain = plain_steps(request.model, layers, row.context, request.sampling, keys,
                        request.diagnostics, request.top_logprobs, until=lambda: not row.drafter.paused)
    while True:
        t0 = time.perf_counter()
        s = next(plain, None)
        if s is None:
            return
        row.drafter.step_time(0, time.perf_counter() - t0)
        row.context.extend(s.tokens)
        yield s
        row.drafter.watch(row.context)
