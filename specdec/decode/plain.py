"""Plain decoding: one token per target forward, pipelined.

Contract: ``plain_steps(model, cache, context, ...)`` yields one ``step.Step`` per forward,
the cache holding ``context[:-1]`` on entry; the forward of token t+1 is queued before
waiting for token t, so the host never stalls the device. ``until()``, when given, ends the
generator with the computed token yielded unfed (the cache then holds the context but that
token). Only ``pipelined`` processors run here; ``wants(position, 1)``: what a drafter wants
of each forward (its hidden states, evaluated with the token: ``Drafter.feed_wants``). This is
the reference every speculative path must reproduce. Full contract:
docs/verify-and-rollback.md#plain-decoding. Tests: tests/decode/test_plain.py,
tests/drafters/test_gate.py (paused stretches), tests/test_engine.py (parity with speculation),
tests/drafters/test_eagle.py (``wants``).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import mlx.core as mx
from mlx_lm.generate import generation_stream

from ..core.arrays import floats, ints, scalar_float, scalar_int
from ..core.model import Model
from ..core.capture import read_forward
from ..core.processors import LogitBias, WindowProcessor, processors_for
from ..core.proposal import Wants
from ..core.sampling import KeySource, SamplingParams
from .step import Step, pick_token, sorted_top, top2_margin, top_entries


def pipelined(procs: Sequence[object], logits: mx.array, window: mx.array) -> mx.array:
    """``logits`` (1, V) through the pipelined processors (the kinds ``plain_steps`` checked)."""
    for p in procs:
        if isinstance(p, WindowProcessor):
            logits = p.apply(logits, window[None, -p.size:])
        elif isinstance(p, LogitBias):
            logits = p.add(logits)
        else:
            raise TypeError(f"{type(p).__name__} says it is pipelined but plain decoding "
                            "runs only WindowProcessor and LogitBias")
    return logits


def plain_steps(
    model: Model,
    cache: list,
    context: Sequence[int],
    params: SamplingParams,
    rng: KeySource | None,
    diagnostics: bool,
    top_logprobs: int = 0,
    until: Callable[[], bool] | None = None,
    wants: Callable[[int, int], Wants | None] | None = None,
) -> Iterator[Step]:
    procs = processors_for(params)
    if not all(p.pipelined for p in procs):
        raise ValueError("a stateful logits processor needs the host between tokens: decode "
                         "through the verify step (decode.request.Request does)")
    size = max((p.size for p in procs if isinstance(p, WindowProcessor)), default=0)
    # the penalties' window lives on the device so the pipelined loop never waits for it
    window = mx.array(list(context[-size:]) if size else [], dtype=mx.int32)
    pos = len(context) - 1  # the position the next forward feeds
    wanted: list[mx.array] = []  # what a drafter wants of the queued forwards (``wants``)

    def forward(tok: mx.array) -> list[mx.array]:
        nonlocal window, pos, wanted
        want = wants(pos, 1) if wants is not None else None
        logits, wanted = read_forward(model, lambda: model(tok.reshape(1, 1), cache=cache), [want], [1])
        logits, pos = logits[0, -1][None], pos + 1
        logits = pipelined(procs, logits, window)[0]
        y = pick_token(logits, params, rng)
        if size:
            window = mx.concatenate([window, y.reshape(1).astype(mx.int32)])[-size:]
        lse = mx.logsumexp(logits)
        out = [y, logits[y] - lse] + ([top2_margin(logits)] if diagnostics else [])
        return out + (top_entries(logits - lse, top_logprobs) if top_logprobs else [])

    def step(arrays: list[mx.array]) -> Step:
        tok = scalar_int(arrays[0])  # waits for this token only
        margins = [scalar_float(arrays[2])] if diagnostics else None
        top = [sorted_top(ints(arrays[-2]), floats(arrays[-1]))] if top_logprobs else None
        return Step(tokens=[tok], drafted=0, accepted=0, fed=1, logprobs=[scalar_float(arrays[1])],
                    margins=margins, top=top)

    with mx.stream(generation_stream):  # as mlx-lm's generate_step (not across the yields)
        cur = forward(mx.array([context[-1]]))
        mx.async_eval(*cur, *wanted)
    while True:
        if until is not None and until():
            yield step(cur)  # computed, not fed: the cache holds everything before it
            return
        with mx.stream(generation_stream):
            nxt = forward(cur[0])  # queued on the still-unevaluated token
            mx.async_eval(*nxt, *wanted)
        yield step(cur)
        cur = nxt
