"""The speculative loop, top-down: ``step`` is one step of every row of a batch (a single
stream is a batch of one), ``stream`` a single request's steps.

Invariant: each row's output is token for token what plain decoding of it alone gives
(greedy, seeded) or is distributed as it (unseeded sampling), whatever was drafted, priced
or batched beside it. Words: see ``specdec.decode``. Tests: tests/decode/test_loop.py,
tests/decode/test_batch.py, tests/decode/test_trace.py,
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
from ..core.sampling import Rng, SamplingParams
from ..policy.drafting import StepTime
from . import trace
from .batch import Batch, RowFailed
from .generation import Generation
from .pipeline import land, pipelined_step, pipelines
from .plain import plain_steps
from .rows import NOTHING, Drafted, Row, observe_row, propose, wants
from .step import SeededSampler, Step, Verify, verify_step


def step(batch: Batch, speculate: bool = True) -> list[Step]:
    """One step of every row (``speculate=False``: one token each, as the server asks while
    prompts wait for prefill). Rows that joined while a plain step was queued get their
    first Step from the next call. Runs on mlx-lm's ``generation_stream``, as its generators do."""
    batch.ride_parked()  # 0. finished rows that rode along long enough leave, together
    with mx.stream(generation_stream):
        # 1. no row drafts and all are greedy -> queue the next plain step before reading this one
        if pipelines(batch, speculate):
            return pipelined_step(batch)
        if batch.inflight is not None:  # resume: the queued plain step is this call's step
            cur, batch.inflight = batch.inflight, None
            return land(batch, cur)
        rows, t_start = batch.rows, time.perf_counter()
        # 2. propose: each row's policy (its drafter), unless no block could pay at this batch size
        k = max((r.k for r in rows if r.speculative), default=0)
        speculate = speculate and not batch.price.hopeless(len(rows), k)
        drafted = [_propose(batch, i) if speculate else NOTHING for i in range(len(rows))]
        # 3. price: one block length L for the batch (a lone row drafts as it would alone)
        L = batch.price.block([len(d.verifies.tokens) for d in drafted], [r.alpha for r in rows])
        drafted = [d if len(d.verifies) < L else Drafted(d.full, d.verifies.truncated(L - 1))
                   for d in drafted]
        # 4. verify, accept, roll back: one forward over [last] + drafts of every row (+ what
        #    its drafter wants of it: tokens riding after, hidden states), one host sync, each
        #    row's cache rolled back past its first rejected draft
        verify = [Verify(r.context, d.verifies, r.sampler, r.processors, r.gen.top_logprobs, r.gen.diagnostics,
                         wants(r, d, speculate)) for r, d in zip(rows, drafted)]
        L, t0 = max(v.block for v in verify), time.perf_counter()
        steps = verify_step(batch.model, batch.layers, verify, vocab=batch.vocab)
        # 5. observe: prices, policies, drafters, shapers and contexts learn the step (a lone
        #    row's policy its time: the block without what rode after it, as the drafter's cost)
        t1 = time.perf_counter()
        batch.price.observe(len(rows), L, t1 - t0)
        if len(rows) == 1:
            rows[0].policy.took(StepTime(1 + len(drafted[0].verifies), t1 - t_start, t0 - t_start))
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


class SingleStream(Protocol):
    """What ``stream`` reads of a prefilled request (``request.Request``, which imports
    this module: a Protocol keeps the seam typed without an import cycle)."""

    model: Model
    prompt_ids: list[int]
    gen: Generation  # its sampling, top_logprobs and diagnostics are the stream's
    sampling: SamplingParams
    rng: Rng | None
    processors: list[LogitsProcessor]

    @property
    def speculative(self) -> bool: ...
    @property
    def layers(self) -> list[Any]: ...
    def row(self) -> Row: ...


def stream(request: SingleStream) -> Iterator[Step]:
    """A single request's steps after its prefill (``request.Request``): pipelined plain
    decoding when nothing needs the host between tokens, else a batch of one (a trace, when
    one is on, follows its steps and its policy: ``trace``)."""
    if not request.speculative and not request.processors:
        yield from plain_steps(request.model, request.layers, request.prompt_ids, request.sampling,
                               request.rng, request.gen.diagnostics, request.gen.top_logprobs)
        return
    row = request.row()
    tracer = trace.active()  # once per request: no trace, no cost per step
    steps = _steps(request, row)
    yield from steps if tracer is None else tracer.follow(steps, row.policy)


def _steps(request: SingleStream, row: Row) -> Iterator[Step]:
    """A batch of one that leaves for a pipelined plain stretch while its policy drafts
    nothing (6. pause / resume)."""
    batch = Batch(request.model)
    batch.join(row, request.layers)
    pausable = not request.processors and all(p.pipelined for p in processors_for(request.sampling))
    while True:
        if pausable and not row.policy.drafts:  # k = 0 for now: plain, pipelined, until it drafts
            layers = batch.leave(0)
            yield from _plain_stretch(request, row, layers)
            batch.join(row, layers)
        yield step(batch)[0]


def _plain_stretch(request: SingleStream, row: Row, layers: list[Any]) -> Iterator[Step]:
    """Pipelined plain steps until the row's policy drafts again; the cache then holds the
    row's context but its last token again, ready for the next verify step."""
    if isinstance(layers, RecurrentCache):
        layers.settle()  # the last rollback's kept tokens, before plain forwards
    keys = row.sampler if isinstance(row.sampler, SeededSampler) else request.rng
    wants = row.drafter.feed_wants if row.drafter.outputs else None  # a head's features
    plain = plain_steps(request.model, layers, row.context, request.sampling, keys,
                        request.gen.diagnostics, request.gen.top_logprobs, until=lambda: row.policy.drafts,
                        wants=wants)
    while True:
        t0 = time.perf_counter()
        s = next(plain, None)
        if s is None:
            return
        row.policy.took(StepTime(0, time.perf_counter() - t0))
        row.context.extend(s.tokens)
        yield s
        row.policy.plain(row.context)
