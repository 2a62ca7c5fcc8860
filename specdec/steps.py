"""Decode steps: prefill, a plain step, a speculative step — each with one host sync.

Contract:
- ``prefill(model, cache, tokens)`` fills the cache in chunks, keeping no logits.
- ``plain_steps(...)`` yields one ``Step`` (one token) per target forward. Building the
  forward of token t+1 is queued before waiting for token t, as mlx-lm's loop does.
- ``spec_steps(...)`` yields one ``Step`` per verify forward over ``[last] + draft``: the
  kept tokens (``verify.greedy_accept`` at temperature 0, ``verify.rejection_sample`` +
  ``settle`` otherwise), after rolling the cache back past the rejected ones.
Every Step carries the target's log-probability of each emitted token (raw
``log_softmax`` of the logits, as mlx-lm reports them), with ``top_logprobs = n > 0`` the
n most likely tokens at each emitted position as ``(token, logprob)`` pairs, best first
(computed on the device only when asked, fetched in the step's one sync), and, with
``diagnostics``, the top-2 logit margin at each emitted position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import mlx.core as mx

from .drafters import Drafter
from .rollback import trim
from .sampling import Rng, SamplingParams, penalize, processed_probs
from .verify import greedy_accept, rejection_sample, settle


@dataclass
class Step:
    tokens: list[int]
    drafted: int
    accepted: int
    fed: int
    logprobs: list[float]
    margins: list[float] | None = None
    top: list[list[tuple[int, float]]] | None = None  # per emitted token, when asked


def top_entries(logp: mx.array, n: int) -> list[mx.array]:
    """Device arrays (ids, logprobs) of the ``n`` largest entries of each row of ``logp``
    (unordered: ``sorted_top`` orders them on the host, where n is tiny)."""
    ids = mx.argpartition(-logp, n - 1, axis=-1)[..., :n]
    return [ids, mx.take_along_axis(logp, ids, axis=-1)]


def sorted_top(ids: list, vals: list) -> list[tuple[int, float]]:
    return sorted(zip(ids, vals), key=lambda p: -p[1])


def top2_margin(logits: mx.array) -> mx.array:
    top2 = mx.topk(logits, 2, axis=-1)
    return mx.abs(top2[..., 0] - top2[..., 1])


def prefill(model: Any, cache: list, tokens: Sequence[int], step_size: int = 512) -> None:
    """Run ``tokens`` through the model in chunks, filling the cache (no logits kept)."""
    for i in range(0, len(tokens), step_size):
        model(mx.array(tokens[i : i + step_size])[None], cache=cache)
        mx.eval([c.state for c in cache])


def _pick(logits: mx.array, params: SamplingParams, rng: Rng | None) -> mx.array:
    if params.greedy:
        return mx.argmax(logits, axis=-1)
    return mx.random.categorical(mx.log(processed_probs(logits, params)), key=rng.next())


def plain_steps(
    model: Any,
    cache: list,
    context: Sequence[int],
    params: SamplingParams,
    rng: Rng | None,
    diagnostics: bool,
    top_logprobs: int = 0,
) -> Iterator[Step]:
    # the penalty window lives on the device so the pipelined loop never waits for it
    window = mx.array(list(context[-params.repetition_context_size :]), dtype=mx.int32)

    def forward(tok: mx.array) -> list[mx.array]:
        nonlocal window
        logits = model(tok.reshape(1, 1), cache=cache)[0, -1]
        logits = penalize(logits[None], window[None], params)[0]
        y = _pick(logits, params, rng)
        if params.repetition_penalty != 1.0:
            tail = mx.concatenate([window, y.reshape(1).astype(mx.int32)])
            window = tail[-params.repetition_context_size :]
        lse = mx.logsumexp(logits)
        out = [y, logits[y] - lse] + ([top2_margin(logits)] if diagnostics else [])
        return out + (top_entries(logits - lse, top_logprobs) if top_logprobs else [])

    cur = forward(mx.array([context[-1]]))
    mx.async_eval(*cur)
    while True:
        nxt = forward(cur[0])  # queued on the still-unevaluated token
        mx.async_eval(*nxt)
        vals = [a.tolist() for a in cur]  # waits for this step only
        margins = [vals[2]] if diagnostics else None
        top = [sorted_top(*vals[-2:])] if top_logprobs else None
        yield Step([vals[0]], 0, 0, 1, [vals[1]], margins, top)
        cur = nxt


def _verify(
    logits: mx.array, d: mx.array, drafter: Drafter, params: SamplingParams, rng: Rng | None
) -> tuple[mx.array, mx.array]:
    """Device arrays (accept (k,), fix (k+1,)) for one verify block with draft ``d``."""
    if params.greedy:
        fix = mx.argmax(logits, axis=-1)
        return d == fix[: d.shape[0]], fix
    p = processed_probs(logits, params)
    q = getattr(drafter, "last_q", None) if d.shape[0] else None
    if q is not None and q.shape[-1] != p.shape[-1]:
        # padded vocabularies (Qwen pads its embedding rows): ids beyond either table
        # have probability 0 there, so zero-padding the narrower is exact
        width = max(q.shape[-1], p.shape[-1])
        q = mx.pad(q, [(0, 0), (0, width - q.shape[-1])])
        p = mx.pad(p, [(0, 0), (0, width - p.shape[-1])])
    return rejection_sample(d, p, q, rng.next())


def spec_steps(
    model: Any,
    cache: list,
    context: list[int],
    drafter: Drafter,
    k: int,
    budget: list[int],
    params: SamplingParams,
    rng: Rng | None,
    diagnostics: bool,
    top_logprobs: int = 0,
) -> Iterator[Step]:
    """Draft, verify, roll back. ``context`` grows by the emitted tokens of each step;
    ``budget[0]`` is the number of tokens still wanted (drafting past it is waste)."""
    while True:
        kk = min(k, budget[0] - 1)
        draft = list(drafter.propose(context, kk))[:kk] if kk > 0 else []
        block = [context[-1], *draft]
        logits = model(mx.array(block)[None], cache=cache)[0]
        if params.repetition_penalty != 1.0:
            size, seq = params.repetition_context_size, context + draft
            n = len(context)  # row i has seen context + draft[:i]
            rows = [seq[max(0, n + i - size) : n + i] for i in range(len(block))]
            if min(map(len, rows)) == max(map(len, rows)):  # equal widths: one gather
                logits = penalize(logits, mx.array(rows, dtype=mx.int32), params)
            else:  # a prompt shorter than the window: rows differ in width
                logits = mx.concatenate(
                    [penalize(logits[i : i + 1], mx.array([r], dtype=mx.int32), params) for i, r in enumerate(rows)]
                )
        d = mx.array(draft, dtype=mx.int32)
        accept, fix = _verify(logits, d, drafter, params, rng)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        rows = mx.arange(len(block))
        cand = mx.concatenate([d, fix[-1:]]) if draft else fix
        arrays = [accept, fix, logp[rows, cand], logp[rows, fix]]
        if diagnostics:
            arrays.append(top2_margin(logits))
        if top_logprobs:
            arrays += top_entries(logp, top_logprobs)
        mx.eval(*arrays)
        acc, fx, lp_draft, lp_fix, *rest = (a.tolist() for a in arrays)  # the step's one sync
        mg = rest.pop(0) if diagnostics else None
        top_ids, top_vals = rest if top_logprobs else (None, None)
        if params.greedy:
            accepted, emitted = greedy_accept(draft, fx)
        else:
            accepted, emitted = settle(draft, acc, fx)
        drafter.observe(accepted)
        trim(cache, len(draft) - accepted)
        context.extend(emitted)
        logprobs = lp_draft[:accepted] + [lp_fix[accepted]]
        margins = mg[: accepted + 1] if mg is not None else None
        top = [sorted_top(top_ids[i], top_vals[i]) for i in range(accepted + 1)] if top_logprobs else None
        yield Step(emitted, len(draft), accepted, len(block), logprobs, margins, top)
