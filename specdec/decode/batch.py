"""Continuous batching with per-row speculation: the running requests decode in one forward.

Contract:
- ``Row`` is one request's decode state: its context (prompt + emitted tokens), drafter,
  draft depth ``k``, sampling parameters with its own seeded key stream, and ``budget``
  (tokens still wanted, kept up to date by the caller's ``engine.Emitter``).
- ``Batch(model, cost)`` holds the rows and their KV cache as ``batch_cache.RowsKVCache``
  layers (mlx-lm's ``BatchKVCache``: left-padded, one RoPE offset per row, so the model
  classes run unmodified; plus masked holes for per-row rollback).
  ``batchable(model, kv_bits)`` says why a model cannot batch (None when it can): every
  layer must be a full-attention ``KVCache`` (sliding windows and quantized KV have no
  per-row rollback here).
- ``join(row, layers)`` adds a row whose single-request cache layers (``KVCache``, e.g.
  a ``PromptCache``'s) hold exactly ``row.context[:-1]``; ``leave(i)`` removes row i
  and returns its cache as single-request ``KVCache`` layers holding exactly what it
  held (``row.context[:-1]``), for the prefix store.
- ``step()`` runs one forward over every row and returns one ``steps.Step`` per row:
  row i feeds ``[last] + draft_i``, padded with token 0 to the step's block length L
  (padding is computed and thrown away), verifies its own draft exactly as it would
  alone (greedy: the longest agreeing prefix plus the target's token; sampling:
  rejection sampling on the row's own key stream; a row without a drafter samples as
  plain decoding does), and is rolled back by its own amount (``batch_cache.trim_rows``).
  One host sync per step for all rows. Tree budgets are not used here: a batched row
  verifies its drafter's linear proposal (the output is the same; trees are a
  single-request feature).
- Block length: one row drafts as it would alone. With several rows, L maximises the
  expected emitted tokens of all rows over the cost of a B x L block (``choose_block``),
  so a full batch speculates only as far as that pays and L = 1 is plain batching. The
  cost is the verify cost curve (one sequence, a 256-token context) corrected online
  (``learn``): each block length keeps, per batch size class, a running ratio of the
  step times it took to what the curve predicted, because a batch's rows attend over longer, padded contexts than
  the curve's, which makes long blocks dearer than it says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from ..drafters.base import Drafter, NoDrafter, Proposal
from ..cache.batch_cache import RowsKVCache, trim_rows
from ..cache.rollback import make_cache
from ..core.sampling import Rng, SamplingParams
from .step import Step, _Fetched, _pick, _verify, draft_for_step, in_vocab, penalize_block
from ..core.verify import greedy_accept, settle

# lengths of the verify cost curve past 16 that price a batch's block (B rows x L)
BATCH_COST_LENGTHS = (24, 32, 48, 64, 96, 128)


@dataclass
class Row:
    context: list[int]
    drafter: Drafter
    k: int
    params: SamplingParams
    budget: list[int]
    rng: Rng | None = None
    top_logprobs: int = 0
    alpha: float = 0.5  # running estimate of the per-token acceptance probability

    @property
    def speculative(self) -> bool:
        return not isinstance(self.drafter, NoDrafter)


def batchable(model: Any, kv_bits: int | None) -> str | None:
    """None when the model's cache can be batched here, else why not."""
    if kv_bits is not None:
        return "a quantized KV cache (--kv-bits) has no batched rollback"
    kinds = {type(c).__name__ for c in make_cache(model, rollback=False)}
    if kinds != {"KVCache"}:
        return f"the model's cache layers are {sorted(kinds)}; batching needs full-attention KVCache"
    return None


def expected_tokens(drafted: int, alpha: float) -> float:
    """Expected emitted tokens of a step drafting ``drafted`` tokens, each accepted with
    probability ``alpha`` given its predecessors were (plus the target's own token).

    >>> expected_tokens(0, 0.9), round(expected_tokens(2, 0.5), 2)
    (1.0, 1.75)
    """
    return sum(alpha**j for j in range(drafted + 1))


def choose_block(drafts: Sequence[int], alphas: Sequence[float], cost: Callable[[int], float]) -> int:
    """The block length L (1 + drafted tokens per row) that maximises the rows' expected
    emitted tokens per second, a row drafting ``min(L - 1, drafts[i])``; ``cost(n)`` is
    the seconds of a forward of n tokens (B rows x L).

    >>> choose_block([4, 0], [0.9, 0.5], lambda n: 1.0)  # a flat cost: draft all
    5
    >>> choose_block([4, 4], [0.9, 0.9], lambda n: float(n))  # every token costs: none
    1
    """
    rows = len(drafts)

    def rate(L: int) -> float:
        gain = sum(expected_tokens(min(L - 1, d), a) for d, a in zip(drafts, alphas))
        return gain / cost(rows * L)

    return max(range(1, max(drafts, default=0) + 2), key=rate)


def curve_cost(curve: dict[int, float]) -> Callable[[int], float]:
    """``cost(n)`` from a measured {length: seconds} curve: linear between measured
    lengths, extended along the last segment beyond them.

    >>> curve_cost({1: 1.0, 2: 1.5, 4: 2.0})(3), curve_cost({1: 1.0, 2: 1.5, 4: 2.0})(6)
    (1.75, 2.5)
    """
    xs = sorted(curve)
    if len(xs) < 2:
        raise ValueError("a cost curve needs at least two lengths")

    def cost(n: int) -> float:
        hi = next((i for i, x in enumerate(xs) if x >= n), len(xs) - 1)
        lo_x, hi_x = xs[max(hi - 1, 0)], xs[max(hi, 1)]
        t = (n - lo_x) / (hi_x - lo_x)
        return curve[lo_x] + t * (curve[hi_x] - curve[lo_x])

    return cost


class Batch:
    """See the module docstring."""

    def __init__(self, model: Any, cost: Callable[[int], float] | None = None, learn: bool = True):
        self.model, self.cost, self.learn = model, cost, learn
        # (batch size class, block length) -> observed / predicted step time
        self.ratio: dict[tuple[int, int], float] = {}
        self.vocab = getattr(getattr(model, "args", None), "vocab_size", None)
        self.rows: list[Row] = []
        self.cache: list[RowsKVCache] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, row: Row, layers: list[Any]) -> None:
        held = {c.offset for c in layers}
        if any(type(c) is not KVCache for c in layers) or held != {len(row.context) - 1}:
            raise ValueError(f"a joining row needs KVCache layers holding its context but the "
                             f"last token ({len(row.context) - 1}); got {sorted(held)}")
        merged = [RowsKVCache.from_kv(c) for c in layers]
        if self.cache is None:
            self.cache = merged
        else:
            for c, m in zip(self.cache, merged):
                c.extend(m)  # right-aligns both: the shorter side gets left padding
        self.rows.append(row)

    def leave(self, i: int) -> list[KVCache]:
        out = [c.extract(i) for c in self.cache]
        del self.rows[i]
        if not self.rows:
            self.cache = None
            return out
        keep = [j for j in range(len(self.rows) + 1) if j != i]
        for c in self.cache:
            c.filter(keep)  # also drops the padding every remaining row shares
        return out

    def step(self, speculate: bool = True) -> list[Step]:
        """One forward over every row; ``speculate=False`` makes every row a one-token
        step (the server does so while prompts wait for prefill: each decode step delays
        them all by its full duration)."""
        rows = self.rows
        props = [self._propose(r) if speculate else Proposal() for r in rows]
        if len(rows) > 1 and self.cost is not None:
            L = choose_block([len(p.tokens) for p in props], [r.alpha for r in rows], self._cost(len(rows)))
            props = [p.truncated(L - 1) for p in props]
        L = 1 + max(len(p.tokens) for p in props)
        t0 = time.perf_counter()
        block = [[r.context[-1], *in_vocab(list(p.tokens), self.vocab)] + [0] * (L - 1 - len(p.tokens))
                 for r, p in zip(rows, props)]
        logits = self.model(mx.array(block), cache=self.cache)
        arrays = [self._row_arrays(logits[i, : 1 + len(p.tokens)], r, p)
                  for i, (r, p) in enumerate(zip(rows, props))]
        mx.eval(*(a for row in arrays for a in row))
        if self.learn and self.cost is not None and len(rows) > 1:
            seen = (time.perf_counter() - t0) / self.cost(len(rows) * L)
            key = (len(rows).bit_length(), L)
            self.ratio[key] = seen if key not in self.ratio else 0.8 * self.ratio[key] + 0.2 * seen
        steps = [self._finish(r, p, [a.tolist() for a in row]) for r, p, row in zip(rows, props, arrays)]
        trim_rows(self.cache, L, [1 + s.accepted for s in steps])
        return steps

    def _cost(self, rows: int) -> Callable[[int], float]:
        """The curve's cost of a ``rows`` x L block, times the ratio observed at L for
        batches of about this size (sizes 2, 3-4, 5-8, ...: a ratio learnt on few rows
        says little about many), at the nearest shorter observed L until L is seen."""
        size = rows.bit_length()

        def cost(n: int) -> float:
            L = n // rows
            seen = [b for s, b in self.ratio if s == size and b <= L]
            return self.cost(n) * (self.ratio[(size, max(seen))] if seen else 1.0)

        return cost

    def _propose(self, row: Row) -> Proposal:
        if not row.speculative:
            return Proposal()
        return draft_for_step(row.drafter, row.context, min(row.k, row.budget[0] - 1))

    @staticmethod
    def _row_arrays(logits: mx.array, row: Row, proposal: Proposal) -> list[mx.array]:
        logits = penalize_block(logits, row.context, list(proposal.tokens), row.params)
        if row.speculative:
            accept, fix = _verify(logits, proposal, row.params, row.rng)
        else:  # as plain decoding samples, so a seeded request reproduces under batching
            accept, fix = mx.zeros((0,), mx.bool_), _pick(logits[0], row.params, row.rng).reshape(1)
        return _Fetched.arrays(logits, proposal, accept, fix, False, row.top_logprobs)

    @staticmethod
    def _finish(row: Row, proposal: Proposal, lists: list[list]) -> Step:
        got, draft = _Fetched.from_host(lists, False, row.top_logprobs), list(proposal.tokens)
        if row.params.greedy:
            accepted, emitted = greedy_accept(draft, got.fix)
        else:
            accepted, emitted = settle(draft, got.accept, got.fix)
        if draft:
            row.drafter.observe(accepted)
            row.alpha = 0.8 * row.alpha + 0.2 * accepted / len(draft)
        row.context.extend(emitted)
        return got.step(emitted, len(draft), accepted)
