"""Continuous batching with per-row speculation: the running requests decode in one forward.

Contract:
- ``Row`` is one request's decode state: its context (prompt + emitted tokens), drafter,
  draft depth ``k``, tree budget and shaper, its ``step.Sampler`` (with the request's own
  seeded key stream) and logits processors, and ``budget`` (tokens still wanted, kept up
  to date by the request's lifecycle, ``request.Request``).
- ``Batch(model, cost)`` holds the rows and their cache. One row keeps its request's own
  cache layers, of any kind ``rollback.make_cache`` builds (full attention, sliding
  window, quantized): a single request is a batch of one. When a second row joins, every
  layer becomes a ``batch_cache.RowsKVCache`` (mlx-lm's ``BatchKVCache``: left-padded, one
  RoPE offset per row, so the model classes run unmodified; plus masked holes for
  per-row rollback), which needs full-attention ``KVCache`` layers:
  ``batchable(model, kv_bits)`` says why a model cannot batch (None when it can).
- ``join(row, layers)`` adds a row whose cache layers hold exactly ``row.context[:-1]``;
  ``join_rows(rows, layers)`` adds several at once from one batch cache
  (``batch_cache.prefill_rows``: prompts prefilled together). ``leave(i)`` removes row
  i and returns its cache layers holding exactly what it held (``row.context[:-1]``),
  copied out of the batch, for the prompt cache or the prefix store; ``leave_rows``
  removes several. Each join and leave of a batched cache copies it once (mlx-lm's
  ``extend``/``filter``), so rows arriving or finishing together go together;
  ``park_rows`` (the server's) copies finished rows out at once but keeps their slots,
  parked, until a quarter of the batch can leave in one copy, a row joins, or they have
  cost ``PARK_STEPS`` steps' worth of rows (about what their gather costs).
- ``step()`` drafts for every row, runs ``step.verify_step`` (one forward, one host
  sync, each row verified and rolled back by its own amount: the output of each row is
  what it would be alone) and observes: the drafter and the tree shaper learn from what
  was accepted, the context grows by the emitted tokens. A row's token tree is verified
  only while it is alone in the batch; with several rows a row verifies its linear
  proposal (the output is the same).
- Block length: one row drafts as it would alone. With several rows, L maximises the
  expected emitted tokens of all rows over the cost of a B x L block (``choose_block``),
  so a full batch speculates only as far as that pays and L = 1 is plain batching: a
  block is chosen only when its predicted cost per emitted token is below plain
  batching's. Each row's acceptance estimate (``Row.alpha``) learns from every step it
  drafts, verified or not: a draft cut from a plain step is compared with the token the
  step emitted there (what verifying it would have accepted), so the estimate follows
  the row's text while the batch decodes plainly. The
  cost is the verify cost curve (one sequence, a 256-token context) corrected online
  (``learn``): each block length keeps, per batch size class, a running ratio of the
  step times it took to what the curve predicted, because a batch's rows attend over longer, padded contexts than
  the curve's, which makes long blocks dearer than it says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import KVCache

from ..cache.batch_cache import RowsKVCache
from ..cache.recurrent import RecurrentCache
from ..cache.rollback import make_cache, trim
from ..core.proposal import EMPTY, Proposal
from ..core.sampling import Rng, SamplingParams
from ..core.trees import cut, first_branch, prune_tree
from ..core.vocab import vocab_size
from ..drafters.base import Drafter, NoDrafter
from ..policy.block import choose_block
from ..policy.tree_shape import TreeShaper
from ..core.processors import LogitsProcessor, processors_for
from .step import Greedy, Sampler, Step, Verify, land_plain_step, queue_plain_step, sampler_for, verify_step

# lengths of the verify cost curve past 16 that price a batch's block (B rows x L)
BATCH_COST_LENGTHS = (24, 32, 48, 64, 96, 128)
# parked rows leave once they have cost this many steps' worth of rows: their gather
# costs 1-2 steps at 32 rows x 576 tokens (scripts/batch_leave_cost.py)
PARK_STEPS = 2.0


class RowFailed(Exception):
    """Row ``row`` failed before the step touched the cache: it alone should leave."""

    def __init__(self, row: int, error: BaseException):
        super().__init__(f"row {row}: {type(error).__name__}: {error}")
        self.row, self.error = row, error


@dataclass
class Row:
    context: list[int]
    drafter: Drafter
    k: int
    params: SamplingParams
    budget: list[int]
    rng: Rng | None = None
    top_logprobs: int = 0
    diagnostics: bool = False
    tree_budget: int = 0  # max tree nodes per step (0: linear drafts)
    shaper: TreeShaper | None = None  # "auto": each step's node count
    extra: Sequence[LogitsProcessor] = ()  # beyond what params ask for (a grammar)
    alpha: float = 0.5  # running estimate of the per-token acceptance probability
    parked: bool = False  # finished, its slot kept until enough rows leave together
    drafted: int | None = None  # the length of the drafter's last proposal (None: none yet)
    sampler: Sampler = field(init=False)
    processors: list[LogitsProcessor] = field(init=False)

    def __post_init__(self) -> None:
        if self.rng is None and not self.params.greedy:
            raise ValueError("a sampled row needs its request's Rng")
        self.sampler = sampler_for(self.params, self.rng, self.speculative)
        self.processors = processors_for(self.params) + list(self.extra)

    @property
    def speculative(self) -> bool:
        return not isinstance(self.drafter, NoDrafter)


def batchable(model: Any, kv_bits: int | None) -> str | None:
    """None when the model's cache can be batched here, else why not."""
    if kv_bits is not None:
        return "a quantized KV cache (--kv-bits) has no batched rollback"
    layers = make_cache(model, rollback=False, recurrent=True)
    if isinstance(layers, RecurrentCache):
        return ("the model has recurrent layers (a hybrid): their states roll back one "
                "request at a time")
    kinds = {type(c).__name__ for c in layers}
    if kinds != {"KVCache"}:
        return f"the model's cache layers are {sorted(kinds)}; batching needs full-attention KVCache"
    return None


class Batch:
    """See the module docstring."""

    def __init__(self, model: Any, cost: Callable[[int], float] | None = None, learn: bool = True,
                 vocab: int | None = None):
        self.model, self.cost, self.learn = model, cost, learn
        # (batch size class, block length) -> observed / predicted step time
        self.ratio: dict[tuple[int, int], float] = {}
        self.vocab = vocab if vocab is not None else vocab_size(model)
        self.rows: list[Row] = []
        self.cache: list[Any] | None = None
        self._inflight: InFlight | None = None  # a plain step queued, not yet read
        self._parked_cost = 0.0  # steps' worth of rows the parked slots have taken so far

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def queued(self) -> bool:
        """Whether a pipelined plain step is queued on the device (see ``step``)."""
        return self._inflight is not None

    def join(self, row: Row, layers: list[Any]) -> None:
        held = layers.positions() if isinstance(layers, RecurrentCache) else {c.offset for c in layers}
        if held != {len(row.context) - 1}:
            raise ValueError(f"a joining row needs cache layers holding its context but the "
                             f"last token ({len(row.context) - 1}); got {sorted(held)}")
        if self.cache is None:  # alone: the request's own layers (the same list), any kind
            self.cache = layers
            self.rows.append(row)
            return
        self._check_batchable([row])
        if any(type(c) is not KVCache for c in layers):
            kinds = sorted({type(c).__name__ for c in (*self.cache, *layers)})
            raise ValueError(f"cannot batch cache layers {kinds}: batching needs full-attention KVCache")
        self._add([row], [RowsKVCache.from_kv(m) for m in layers])

    def join_rows(self, rows: list[Row], layers: list[RowsKVCache]) -> None:
        """Add several rows at once, their cache one ``RowsKVCache`` per layer whose row i
        holds exactly ``rows[i].context[:-1]`` (``batch_cache.prefill_rows``): one copy of
        the batch cache for all of them."""
        want = [len(r.context) - 1 for r in rows]
        for c in layers:
            held = [c._idx - p - h for p, h in zip(c.pads, c.holes)] if isinstance(c, RowsKVCache) else None
            if held != want:
                raise ValueError(f"joining rows need batch cache layers holding each row's context "
                                 f"but the last token ({want}); got {held}")
        if self.cache is None:
            self._check_batchable(rows)
            self.cache, self.rows = layers, list(rows)
            return
        self._add(rows, layers)

    def _check_batchable(self, new: Sequence[Row]) -> None:
        if len(self.rows) + len(new) > 1 and any(r.tree_budget for r in (*self.rows, *new)):
            raise ValueError("token trees (a draft tree budget) are verified one request at a time")

    def _add(self, rows: Sequence[Row], layers: list[RowsKVCache]) -> None:
        self._check_batchable(rows)
        self._unpark()  # the join copies the batch cache anyway: parked rows leave first
        if any(type(c) not in (KVCache, RowsKVCache) for c in self.cache):
            kinds = sorted({type(c).__name__ for c in self.cache})
            raise ValueError(f"cannot batch cache layers {kinds}: batching needs full-attention KVCache")
        if not isinstance(self.cache[0], RowsKVCache):
            self.cache = [RowsKVCache.from_kv(c) for c in self.cache]
        for c, m in zip(self.cache, layers):
            c.extend(m)  # right-aligns both: the shorter side gets left padding
        self.rows.extend(rows)

    def leave(self, i: int) -> list[Any]:
        return self.leave_rows([i])[0]

    def leave_rows(self, indices: Sequence[int]) -> list[list[Any]]:
        """Remove rows ``indices`` (one copy of the batch cache for all of them); returns
        each one's cache layers, in the order asked, holding exactly its ``context[:-1]``."""
        out = self._extract(indices)
        self._drop(indices)
        return out

    def park_rows(self, indices: Sequence[int]) -> tuple[list[list[Any]], list[int]]:
        """``leave_rows`` for finished rows, without copying the batch cache for each:
        returns their cache layers (as ``leave_rows``) and the row indices that left the
        batch now. A batched row's layers are copied out at once, but its slot stays,
        ``parked`` (a greedy one-token row whose output nobody reads), until parked rows
        are a quarter of the batch, a row joins, no other row is left or they have ridden
        along for ``PARK_STEPS`` steps' worth of rows (``step``); then they all leave in
        one copy. Why: each leave copies every remaining row's cache (0.3-0.5 s
        at 32 rows of 576 tokens, more than a step: ``scripts/batch_leave_cost.py``), and
        speculative rows finish on different steps; a parked row costs one row of a step."""
        out = self._extract(indices)
        if not isinstance(self.cache[0], RowsKVCache):
            self._drop(indices)
            return out, list(indices)
        for i in indices:
            self.rows[i] = _parked(self.rows[i])
        parked = [j for j, r in enumerate(self.rows) if r.parked]
        if 4 * len(parked) < len(self.rows):
            return out, []
        return out, self._unpark()

    def _unpark(self) -> list[int]:
        """Every parked row leaves (one copy of the batch cache); returns their indices."""
        parked = [j for j, r in enumerate(self.rows) if r.parked]
        if parked:
            self._drop(parked)
        self._parked_cost = 0.0
        return parked

    def _extract(self, indices: Sequence[int]) -> list[list[Any]]:
        lone = not isinstance(self.cache[0], RowsKVCache)  # a lone row's own layers
        out = [self.cache] if lone else [[c.extract(i) for c in self.cache] for i in indices]
        if self._inflight is not None:  # the queued step fed them one token more
            for i, layers in zip(indices, out):
                if i < self._inflight.covers:
                    trim(layers, 1)
        if not lone:  # copied now: a lazy slice would keep the whole batch buffer alive
            mx.eval([c.state for layers in out for c in layers])
        return out

    def _drop(self, indices: Sequence[int]) -> None:
        gone = set(indices)
        keep = [j for j in range(len(self.rows)) if j not in gone]
        if self._inflight is not None:
            self._inflight = self._inflight.kept([j for j in keep if j < self._inflight.covers])
        self.rows = [self.rows[j] for j in keep]
        if not self.rows:
            self.cache = None
        else:
            for c in self.cache:
                c.filter(keep)  # also drops the padding every remaining row shares

    def step(self, speculate: bool = True) -> list[Step]:
        """One verify step over every row; ``speculate=False`` makes every row a one-token
        step (the server does so while prompts wait for prefill: each decode step delays
        them all by its full duration).

        When every row decodes plainly and greedily this step (``_pipelines``), the step
        is pipelined as ``plain.plain_steps`` is: the next step is queued on the device
        before this one is read. Rows that joined while a step was queued (the last
        rows) get their first Step from the next call: the list is then shorter than
        the batch. The step's work runs on mlx-lm's ``generation_stream``, as mlx-lm's
        generators do (measured a few per cent faster on CPU than the default stream).
        Parked rows that have ridden along for ``PARK_STEPS`` steps' worth of rows leave
        first (the rows then are the batch's rows after it)."""
        parked = sum(r.parked for r in self.rows)
        if parked:
            self._parked_cost += parked / len(self.rows)
            if self._parked_cost >= PARK_STEPS:
                self._unpark()
        with mx.stream(generation_stream):
            return self._step(speculate)

    def _step(self, speculate: bool) -> list[Step]:
        if self._pipelines(speculate):
            return self._pipelined()
        if self._inflight is not None:  # the queued plain step is this call's step
            cur, self._inflight = self._inflight, None
            return self._land(cur)
        rows, t_start = self.rows, time.perf_counter()
        speculate = speculate and not self._hopeless(rows)
        drafts = [self._propose_row(i) if speculate else (EMPTY, EMPTY) for i in range(len(rows))]
        props = [p for _, p in drafts]
        if len(rows) > 1 and self.cost is not None:
            L = choose_block([len(p.tokens) for p in props], [r.alpha for r in rows], self._cost(len(rows)))
            props = [p.truncated(L - 1) for p in props]
        L = 1 + max(len(p.tokens) for p in props)
        t0 = time.perf_counter()
        steps = verify_step(self.model, self.cache, [
            Verify(r.context, p, r.sampler, r.processors, r.top_logprobs, r.diagnostics)
            for r, p in zip(rows, props)], vocab=self.vocab)
        if self.learn and self.cost is not None and len(rows) > 1:
            seen = (time.perf_counter() - t0) / self.cost(len(rows) * L)
            key = (len(rows).bit_length(), L)
            self.ratio[key] = seen if key not in self.ratio else 0.8 * self.ratio[key] + 0.2 * seen
        if len(rows) == 1:  # a single stream: the drafter (the cost gate) learns what a step costs
            rows[0].drafter.step_time(L, time.perf_counter() - t_start)
        for r, (full, _), p, s in zip(rows, drafts, props, steps):
            self._observe(r, full, p, s)
        return steps

    def _pipelines(self, speculate: bool) -> bool:
        """Whether this step is plain for every row and the next may be queued before it
        is read: each row greedy with nothing beyond the argmax to compute, full-attention
        layers, and no row drafting (none asked, a paused cost gate, or blocks priced out:
        ``choose_block`` keeps L = 1 for drafts as long as each row's last proposal)."""
        rows = self.rows
        if not rows or not all(map(_plain_row, rows)) or isinstance(self.cache, RecurrentCache) \
                or any(type(c) not in (KVCache, RowsKVCache) for c in self.cache):
            return False
        # a batch judges by each row's last proposal (so a row with nothing to copy does
        # not hold it off the pipelined path); a lone row asks its drafter every step, as
        # a single stream does (its cost gate pauses it instead)
        lone = len(rows) == 1
        drafts = [min(r.k if r.drafted is None or lone else r.drafted, r.budget[0] - 1)
                  if speculate and _drafts(r) else 0 for r in rows]
        if max(drafts) < 1:
            return True
        if len(rows) == 1 or self.cost is None:
            return False
        return choose_block(drafts, [r.alpha for r in rows], self._cost(len(rows))) == 1

    def _pipelined(self) -> list[Step]:
        """Queue the next plain step (after the one already queued, or after this one),
        then read this one (a lone row's drafter learns what the plain token cost, as a
        single stream's does)."""
        rows, cur, t0 = self.rows, self._inflight, time.perf_counter()
        if cur is None:
            cur = InFlight(queue_plain_step(self.model, self.cache, _last_tokens(rows)), len(rows))
        feed = cur.arrays[0]
        if cur.covers < len(rows):  # rows that joined since it was queued: fed from the host
            feed = mx.concatenate([feed, _last_tokens(rows[cur.covers:])])
        self._inflight = InFlight(queue_plain_step(self.model, self.cache, feed), len(rows))
        steps = self._land(cur)
        if len(rows) == 1 and cur.covers == 1:
            rows[0].drafter.step_time(0, time.perf_counter() - t0)
        return steps

    def _land(self, cur: "InFlight") -> list[Step]:
        """Read a queued plain step of the first ``cur.covers`` rows and observe it: a
        paused drafter watches the token (as in a single stream's plain stretch), another
        drafter's proposal is made and cut as a plain verify step would (its first draft
        against the emitted token: ``_observe``)."""
        rows = self.rows[: cur.covers]
        steps = land_plain_step(cur.arrays, [Verify(r.context, EMPTY, r.sampler) for r in rows])
        hopeless = self._hopeless(rows)
        for r, s in zip(rows, steps):
            watch = r.speculative and r.drafter.paused
            full = draft_for_step(r.drafter, r.context, min(r.k, r.budget[0] - 1)) \
                if r.speculative and not watch and not hopeless else EMPTY
            self._observe(r, full, EMPTY, s)
            if watch:
                r.drafter.watch(r.context)
        return steps

    def _hopeless(self, rows: Sequence[Row]) -> bool:
        """Whether no block could pay at this batch size even if every draft were accepted:
        then a plain step asks no drafter (32 suffix rows' proposals cost host time every
        step for an acceptance estimate no step can use; a row drafts again once the
        batch is small enough, as ``_land`` asks afresh each step)."""
        if len(rows) < 2 or self.cost is None:
            return False
        k = max((r.k for r in rows if r.speculative), default=0)
        return k == 0 or choose_block([k] * len(rows), [1.0] * len(rows), self._cost(len(rows))) == 1

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

    def _propose_row(self, i: int) -> tuple[Proposal, Proposal]:
        """Row i's proposal. Beside other rows, a drafter's failure is raised as that row's
        ``RowFailed`` (nothing has touched the cache yet, so the others step on unharmed);
        a lone row's error is raised as it is (a single stream's caller reads it)."""
        try:
            return self._propose(self.rows[i])
        except Exception as e:
            if len(self.rows) == 1:
                raise
            raise RowFailed(i, e) from e

    def _propose(self, row: Row) -> tuple[Proposal, Proposal]:
        """(the drafter's whole proposal, what this step verifies of it)."""
        if not row.speculative:
            return EMPTY, EMPTY
        tree = row.tree_budget if len(self.rows) == 1 else 0
        full = draft_for_step(row.drafter, row.context, min(row.k, row.budget[0] - 1), tree)
        proposal = cut(full, full.depth, row.shaper.budget(full.parents)) if row.shaper and full else full
        if not proposal.is_linear and proposal.q is not None:
            # draft distributions on a tree: its best branch is verified (exact, linear)
            proposal = first_branch(proposal)
        return full, proposal

    @staticmethod
    def _observe(row: Row, full: Proposal, proposal: Proposal, step: Step) -> None:
        if row.speculative:
            row.drafted = len(full.tokens)
        if proposal:
            row.drafter.observe(step.accepted)
            row.alpha = 0.8 * row.alpha + 0.2 * step.accepted / len(proposal)
        elif full:  # drafted but cut to nothing (a plain step): would its first draft have held?
            row.alpha = 0.8 * row.alpha + 0.2 * (full.tokens[0] == step.tokens[0])
        if row.shaper and full:
            row.shaper.update(full.tokens, full.parents, step.tokens)
        for proc in row.processors:
            proc.accept(step.tokens)
        row.context.extend(step.tokens)


def draft_for_step(drafter: Drafter, context: Sequence[int], k: int,
                   tree_budget: int = 0) -> Proposal:
    """The drafter's proposal for this step, at most ``k`` tokens deep (none when k < 1);
    with ``tree_budget`` > 0 a tree of at most that many nodes (``propose_tree``)."""
    if k < 1:
        return EMPTY
    proposal = drafter.propose_tree(context, k, tree_budget) if tree_budget > 0 else drafter.propose(context, k)
    if not isinstance(proposal, Proposal):
        raise TypeError(f"{type(drafter).__name__}.propose returned {type(proposal).__name__}, "
                        "not a specdec.drafters.Proposal")
    if not proposal.is_linear:
        if tree_budget < 1:
            raise ValueError(f"drafter {drafter.name!r} proposed a token tree; set a draft tree "
                             "budget (--draft-tree-budget) to verify trees")
        return prune_tree(proposal, k, tree_budget)
    return proposal.truncated(k)


@dataclass
class InFlight:
    """A plain step queued for the first ``covers`` rows of a batch: device arrays
    [argmax (covers, 1), its logprob (covers, 1)] (``step.queue_plain_step``)."""

    arrays: list[Any]
    covers: int

    def kept(self, rows: list[int]) -> "InFlight | None":
        """The step for rows ``rows`` of it only (None: none)."""
        if not rows:
            return None
        index = mx.array(rows)
        return InFlight([a[index] for a in self.arrays], len(rows))


def _parked(row: Row) -> Row:
    """A finished row's stand-in: greedy, one token a step, nothing drafted or checked."""
    return Row([row.context[-1]], NoDrafter(), 0, SamplingParams(), [1], parked=True)


def _drafts(row: Row) -> bool:
    """Whether the row's drafter may propose this step (a paused cost gate will not)."""
    return row.speculative and not row.drafter.paused


def _plain_row(row: Row) -> bool:
    return (type(row.sampler) is Greedy and not row.processors and not row.top_logprobs
            and not row.diagnostics and not row.tree_budget)


def _last_tokens(rows: Sequence[Row]) -> mx.array:
    return mx.array([[r.context[-1]] for r in rows], dtype=mx.int32)
