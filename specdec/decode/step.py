"""The one verify step: every speculative path (single stream, batch, token tree, sharded
target) runs ``verify_step``, and ``verify_forward`` inside it is the only place a verify
block goes through the target. ``Sampler``s turn a row's block of logits into its accepted
path and emitted tokens; ``queue_plain_step`` / ``land_plain_step`` are the pipelined
plain step of a batch.

Invariant: a row's emitted tokens are what plain decoding of its context gives (greedy,
seeded) or are distributed as them (rejection sampling), and its cache afterwards holds
its context plus the accepted path, nothing else (checked on every cache kind).
Tests: tests/decode/test_step.py, tests/core/test_sampling.py, tests/decode/test_step_seeded.py, tests/decode/test_tree_attention.py.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar, cast

import mlx.core as mx
import mlx.nn as nn

from ..cache.batch_cache import roll_back
from ..cache.recurrent import RecurrentCache
from ..core.arrays import ints, nested
from ..core.model import Model
from ..core.proposal import Proposal, Returned, Wants
from ..core.processors import LogitsProcessor
from ..core.sampling import KeySource, PositionKeys, Rng, SamplingParams, draw_token, processed_probs, seeded_tokens
from ..core.trees import greedy_tree_accept, tree_kids
from ..core.verify import greedy_accept, rejection_sample, resolve, tree_rejection_sample, tree_resolve
from ..core.capture import capture_layers, read_forward
from .tree_attention import tree_attention


@dataclass(kw_only=True)
class Step:
    """One row's result of one step: the ``tokens`` emitted (the ``accepted`` drafts and
    one token of the target's), of ``drafted`` draft tokens, ``fed`` block rows."""

    tokens: list[int]
    drafted: int
    accepted: int
    fed: int
    logprobs: list[float]
    margins: list[float] | None = None
    top: list[list[tuple[int, float]]] | None = None  # per emitted token, when asked
    depth: int | None = None  # a tree's depth (None: a linear draft, depth = drafted)
    # set when this row failed after its tokens were computed (its drafter's next proposal,
    # its processors' update): that row's request ends with it, the batch steps on
    error: BaseException | None = None


# ---- samplers: how a row's block of logits becomes emitted tokens ------------------------
class Sampler:
    """``decide`` builds a row's device arrays (no sync); ``resolve`` reads their host copies
    and returns (accepted node indices in path order, emitted tokens)."""

    def decide(self, logits: mx.array, proposal: Proposal) -> list[mx.array]:
        raise NotImplementedError

    def resolve(self, proposal: Proposal, host: list[list]) -> tuple[list[int], list[int]]:
        raise NotImplementedError


class Greedy(Sampler):
    """Temperature 0: the longest draft path agreeing with the target's argmax."""

    def decide(self, logits, proposal):
        return [mx.argmax(logits, axis=-1)]

    def resolve(self, proposal, host):
        recovered = host[0]
        if proposal.is_linear:
            accepted, emitted = greedy_accept(proposal.tokens, recovered)
            return list(range(accepted)), emitted
        return greedy_tree_accept(proposal.tokens, proposal.parents, recovered)


class RejectionSampler(Sampler):
    """Exact speculative sampling: ``verify.rejection_sample`` for a linear draft (with the
    draft's q when it has one), multi-candidate rejection down a tree of point masses."""

    def __init__(self, params: SamplingParams, rng: Rng):
        self.params, self.rng = params, rng

    def decide(self, logits, proposal):
        p = processed_probs(logits, self.params)
        if not proposal.is_linear:
            kids = tree_kids(proposal.tokens, proposal.parents)
            width, vocab = max(1, max(map(len, kids))), logits.shape[-1]
            # an out-of-vocabulary child has probability 0: it is padding, never accepted
            slots = [[proposal.tokens[j] if proposal.tokens[j] < vocab else -1 for j in row]
                     + [-1] * (width - len(row)) for row in kids]
            pick, recovered = tree_rejection_sample(p, mx.array(slots, dtype=mx.int32), self.rng.next())
            return [recovered, pick]
        q = proposal.q
        if q is not None and q.shape[-1] != p.shape[-1]:
            # padded vocabularies (Qwen pads its embedding rows): ids beyond either table
            # have probability 0 there, so zero-padding the narrower is exact
            width = max(q.shape[-1], p.shape[-1])
            q = mx.pad(q, [(0, 0), (0, width - q.shape[-1])])
            p = mx.pad(p, [(0, 0), (0, width - p.shape[-1])])
        accept, recovered = rejection_sample(mx.array(proposal.tokens, dtype=mx.int32), p, q, self.rng.next())
        return [recovered, accept]

    def resolve(self, proposal, host):
        recovered, verdict = host
        if proposal.is_linear:
            accepted, emitted = resolve(proposal.tokens, verdict, recovered)
            return list(range(accepted)), emitted
        return tree_resolve(proposal.tokens, tree_kids(proposal.tokens, proposal.parents), verdict, recovered)


class PlainSampler(Sampler):
    """An unseeded row that does not speculate samples as plain decoding does (one key
    per token)."""

    def __init__(self, params: SamplingParams, rng: Rng):
        self.params, self.rng = params, rng

    def decide(self, logits, proposal):
        if proposal:
            raise ValueError("a plain row verifies no drafts")
        return [pick_token(logits[0], self.params, self.rng).reshape(1)]

    def resolve(self, proposal, host):
        return [], [host[0][0]]


class SeededSampler(Greedy):
    """A seeded request: the token at output position t is plain sampling's draw with the
    key of position t (``sampling.PositionKeys``), so a draft is accepted exactly when it
    equals that draw, as greedy accepts a draft equal to the argmax. Block row r (a tree
    node's row included) is drawn with the key of its depth below the root, counted from
    the request's first output token: the output is plain seeded sampling's, token for
    token, whatever was drafted, batched or alone. A draft's q plays no part.

    The sampler counts the output positions itself (a row's sampler is made with the
    row, before its first token), advancing by what each step emits."""

    def __init__(self, params: SamplingParams, rng: Rng):
        self.params, self.keys, self.position = params, PositionKeys(rng), 0

    def decide(self, logits, proposal):
        depths = [0] + node_depths(proposal)
        keys = [self.keys.at(self.position + d) for d in depths]
        return [seeded_tokens(logits, self.params, keys)]

    def resolve(self, proposal, host):
        path, emitted = super().resolve(proposal, host)
        self.position += len(emitted)
        self.keys.release(self.position)
        return path, emitted

    def next(self) -> mx.array:
        """The key of the next output position, taken by plain decoding (a paused row's
        pipelined stretch draws each token with its position's key, as here)."""
        key = self.keys.at(self.position)
        self.position += 1
        self.keys.release(self.position)
        return key


def node_depths(proposal: Proposal) -> list[int]:
    """Each node's depth below the root (1 for the root's children).

    >>> node_depths(Proposal([5, 6, 8], parents=(-1, 0, 0))), node_depths(Proposal([1, 2]))
    ([1, 2, 2], [1, 2])
    """
    if proposal.is_linear:
        return list(range(1, len(proposal) + 1))
    depth: list[int] = []
    for p in proposal.parent_ids:  # topological order: a parent's depth is known
        depth.append(1 + (depth[p] if p >= 0 else 0))
    return depth


def pick_token(logits: mx.array, params: SamplingParams, rng: KeySource | None) -> mx.array:
    """Plain decoding's choice from one row of (processed) logits: the t-th call of a
    request draws with its Rng's t-th key, the key ``PositionKeys.at(t)`` gives."""
    if params.greedy:
        return mx.argmax(logits, axis=-1)
    return draw_token(logits, params, _need_rng(rng).next())


_K = TypeVar("_K", bound=KeySource)


def _need_rng(rng: _K | None) -> _K:
    if rng is None:
        raise ValueError("a sampled request (temperature > 0) draws with an Rng: pass one")
    return rng


def sampler_for(params: SamplingParams, rng: Rng | None, speculative: bool) -> Sampler:
    """Greedy; seeded (plain or speculative rows alike: position-keyed draws); unseeded
    rejection sampling (exact in distribution) or plain sampling."""
    if params.greedy:
        return Greedy()
    rng = _need_rng(rng)
    if params.seed is not None:
        return SeededSampler(params, rng)
    return RejectionSampler(params, rng) if speculative else PlainSampler(params, rng)


# ---- the step ----------------------------------------------------------------------------
@dataclass
class Verify:
    """One row of a verify step: its context (prompt + emitted; the last token is the block's
    root, not yet fed), its proposal (a tree of deterministic drafts only alone), its
    sampler and processors, what to report, and what its drafter ``wants`` from the forward
    (a tail riding after the block, never kept, linear proposals only; hidden states)."""

    context: list[int]
    proposal: Proposal
    sampler: Sampler
    processors: Sequence[LogitsProcessor] = ()
    top_logprobs: int = 0
    diagnostics: bool = False
    wants: Wants | None = None

    @property
    def block(self) -> int:
        """Block rows fed: the root, the drafts, the tail."""
        return 1 + len(self.proposal.tokens) + (len(self.wants.tail) if self.wants else 0)

    def seen(self) -> list[list[int]]:
        """Per block row, the drafted tokens before it (a prefix or a root path)."""
        p = self.proposal
        return [[]] + [p.path(j) for j in range(len(p.tokens))]


def in_vocab(draft: Sequence[int], vocab: int | None) -> list[int]:
    """The draft as the target may be fed it: a draft model with a wider (padded)
    vocabulary can sample ids the target has no embedding for. The target gives them
    probability 0, so verification rejects them whatever they are fed as; feeding them
    would read past the embedding table, so a valid id (0) stands in.

    >>> in_vocab([5, 9, 2], 8)
    [5, 0, 2]
    """
    if vocab is None or all(t < vocab for t in draft):
        return list(draft)
    return [t if t < vocab else 0 for t in draft]


def verify_forward(model: Model, cache: list, blocks: Sequence[Sequence[int]] | mx.array,
                   parents: Sequence[int] | None = None) -> mx.array:
    """Logits (B, L, V) of one forward over B blocks of equal length L (``[last] +
    drafts``, padded; host lists, or a device array for a pipelined plain step);
    ``parents`` makes the single block a token tree (``tree_attention``: row r sees the
    cache and its own ancestors, at position offset + depth)."""
    if isinstance(cache, RecurrentCache):
        if parents is not None or len(blocks) != 1:
            raise ValueError("models with recurrent layers verify one request's linear draft "
                             "at a time (no token trees, no batched rows)")
        # the pre-block states a rollback returns to; the last rollback's kept tokens go first
        fed = cache.begin(ints(blocks[0]) if isinstance(blocks, mx.array) else blocks[0])
        try:
            logits = model(mx.array([fed]), cache=cache)
        finally:  # the forward is built: its recorded rows are all there is to replay
            cache.end_block()
        return logits[:, len(fed) - len(blocks[0]):]
    scope = tree_attention(cast("nn.Module", model), cache, parents) if parents is not None else nullcontext()
    with scope:
        ids = blocks if isinstance(blocks, mx.array) else mx.array([list(b) for b in blocks])
        return model(ids, cache=cache)


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


def _row_arrays(logits: mx.array, row: Verify) -> tuple[list[mx.array], list[mx.array], list[mx.array]]:
    """One row's device arrays: (logprobs [node logprobs at their parents' rows, then each
    block row's own token's], the sampler's arrays, the extras asked for [margins, top
    ids, top logprobs])."""
    seen = row.seen() if row.processors else []
    for proc in row.processors:
        logits = proc(logits, row.context, seen)
    decided = row.sampler.decide(logits, row.proposal)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    p = row.proposal
    recovered = decided[0].astype(mx.int32)  # every sampler's first array: each row's own token
    lp_own = mx.take_along_axis(logp, recovered[:, None], axis=-1)[:, 0]
    if p:  # each node's logprob at its parent's row; an out-of-vocabulary id is never accepted
        parents = mx.array(list(p.parents or range(-1, len(p.tokens) - 1)), dtype=mx.int32)
        cand = mx.minimum(mx.array(p.tokens, dtype=mx.int32), logp.shape[-1] - 1)
        lp_own = mx.concatenate([logp[parents + 1, cand], lp_own])
    extras = [top2_margin(logits)] if row.diagnostics else []
    extras += top_entries(logp, row.top_logprobs) if row.top_logprobs else []
    return [lp_own], decided, extras


def plain_greedy(row: Verify) -> bool:
    """Whether a row needs nothing beyond the argmax and logprobs (``_greedy_arrays``)."""
    return (type(row.sampler) is Greedy and not row.processors and not row.top_logprobs
            and not row.diagnostics and row.proposal.is_linear)


def _greedy_arrays(logits: mx.array, rows: Sequence[Verify]) -> list[mx.array]:
    """For greedy rows (``plain_greedy``) of a block (B', L, V): the argmax of every block
    row, the logprob of each, and each draft token's logprob at the row before it; the
    same values ``_row_arrays`` gives one row at a time."""
    L = logits.shape[1]
    recovered = mx.argmax(logits, axis=-1).astype(mx.int32)
    lse = mx.logsumexp(logits, axis=-1)
    lp_own = mx.take_along_axis(logits, recovered[..., None], axis=-1)[..., 0] - lse
    if L == 1:
        return [recovered, lp_own]
    cand = mx.minimum(mx.array([[*r.proposal.tokens] + [0] * (L - 1 - len(r.proposal)) for r in rows],
                               dtype=mx.int32), logits.shape[-1] - 1)
    lp_draft = mx.take_along_axis(logits[:, :-1], cand[..., None], axis=-1)[..., 0] - lse[:, :-1]
    return [recovered, lp_own, lp_draft]


def _greedy_host(host: list[list], rows: Sequence[Verify]) -> list[tuple[list, list, list]]:
    """``_greedy_arrays``' host copies as each row's (logprobs, decided, extras)."""
    out: list[tuple[list, list, list]] = []
    for i, r in enumerate(rows):
        n = len(r.proposal)
        drafts = host[2][i][:n] if n else []
        out.append(([drafts + host[1][i][: n + 1]], [host[0][i][: n + 1]], []))
    return out


def _returned(logits: mx.array, hidden: dict[int, mx.array], i: int, row: Verify,
              wants: Wants) -> Returned:
    """Row i's part of the forward its drafter ``wants``: its tail's logits, the block rows'
    hidden states of the layers it named."""
    n = 1 + len(row.proposal)
    return Returned(logits[i, n:row.block] if wants.tail else None,
                    {j: hidden[j][i, :n] for j in wants.layers})


def _decide(logits: mx.array, rows: Sequence[Verify],
            hidden: dict[int, mx.array]) -> list[tuple[list, list, list]]:
    """Every row's (logprobs, sampler arrays, extras) as host lists, after one sync:
    greedy rows together (``_greedy_arrays``) when there are several, the others one by
    one (``_row_arrays``); what drafters want of the forward is read in the same sync."""
    fast = [i for i, r in enumerate(rows) if plain_greedy(r)]
    fast = fast if len(fast) > 1 else []
    rest = sorted(set(range(len(rows))) - set(fast))
    batched = _greedy_arrays(logits if len(fast) == len(rows) else logits[mx.array(fast)],
                             [rows[i] for i in fast]) if fast else []
    arrays = [_row_arrays(logits[i, : 1 + len(rows[i].proposal)], rows[i]) for i in rest]
    wanted = [a for i, r in enumerate(rows) if r.wants  # read in this same sync
              for a in r.wants.read(_returned(logits, hidden, i, r, r.wants))]
    mx.eval(*batched, *(a for row in arrays for part in row for a in part), *wanted)
    host: list[Any] = [None] * len(rows)
    for i, h in zip(fast, _greedy_host([nested(a) for a in batched], [rows[i] for i in fast])):
        host[i] = h
    for i, row in zip(rest, arrays):
        host[i] = [[a.tolist() for a in part] for part in row]
    return host


def _finish(row: Verify, lps: list[float], decided: list[list], extras: list[list]) -> tuple[Step, list[int]]:
    """(the row's Step, the block indices its cache keeps)."""
    p, n = row.proposal, len(row.proposal.tokens)
    path, emitted = row.sampler.resolve(p, decided)
    rows = [0] + [j + 1 for j in path]  # the block row each emitted token was predicted at
    logprobs = [lps[j] for j in path] + [lps[n + rows[-1]]]
    margins = [extras[0][r] for r in rows] if row.diagnostics else None
    top = extras[-2:] if row.top_logprobs else None
    top = [sorted_top(top[0][r], top[1][r]) for r in rows] if top else None
    step = Step(tokens=emitted, drafted=n, accepted=len(path), fed=row.block, logprobs=logprobs,
                margins=margins, top=top, depth=None if p.is_linear else p.depth)
    return step, rows


def verify_step(model: Model, cache: list, rows: Sequence[Verify], *,
                vocab: int | None = None) -> list[Step]:
    """One step of B rows, in order: 1. one ``verify_forward`` over every row's ``[last] +
    proposal + tail`` (padded with token 0; a tree under ``tree_attention``; the layers drafters
    want captured: ``core.capture``, undone after); 2. each row's
    processors, block row r seeing the context plus the drafts before it; 3. each row's
    ``Sampler`` decides on the device (greedy rows with nothing else to compute together:
    ``_greedy_arrays``); 4. one host sync (``_decide``; wants read in it); 5. each row's accepted path and
    emitted tokens; 6. ``batch_cache.roll_back`` keeps each row's root and accepted path;
    7. a ``Step`` per row (log-probabilities are raw ``log_softmax``, as mlx-lm reports)."""
    trees = [r for r in rows if not r.proposal.is_linear]
    if trees and (len(rows) > 1 or trees[0].proposal.q is not None
                  or (trees[0].wants is not None and trees[0].wants.tail)):
        raise ValueError("a token tree is verified alone, of deterministic drafts and with no "
                         "tail after it (verify a tree with draft distributions by its first branch)")
    L = max(r.block for r in rows)
    blocks = [[r.context[-1], *in_vocab(r.proposal.tokens, vocab), *(r.wants.tail if r.wants else ())]
              + [0] * (L - r.block) for r in rows]
    layers = sorted({j for r in rows if r.wants for j in r.wants.layers})
    tree = trees[0].proposal.parents if trees else None
    # a captured tree: its swaps first (capture's stand-in layers hide the attention they wrap)
    outer = tree_attention(cast("nn.Module", model), cache, tree) if tree and layers else nullcontext()
    with outer, capture_layers(model, layers) if layers else nullcontext() as captured:
        logits = verify_forward(model, cache, blocks, None if layers else tree)
    # a recurrent cache replays its kept tokens first: the block is the forward's last L rows
    hidden = {j: h[:, h.shape[1] - L:] for j, h in captured.hidden.items()} \
        if captured is not None else {}
    host = _decide(logits, rows, hidden)
    done = [_finish(r, lps[0], decided, extras) for r, (lps, decided, extras) in zip(rows, host)]
    roll_back(cache, L, [kept for _, kept in done])
    return [s for s, _ in done]


def queue_plain_step(model: Model, cache: list, tokens: mx.array,
                     wants: Sequence[Wants | None] = ()) -> list[mx.array]:
    """One plain greedy step of every row, queued without waiting: ``tokens`` (B, 1) in
    (host ids or the previous step's argmax), [argmax (B, 1), its logprob (B, 1)] out,
    their evaluation started (``mx.async_eval``) with what row i's drafter ``wants[i]``."""
    logits, wanted = read_forward(model, lambda: verify_forward(model, cache, tokens), wants,
                                  [1] * len(wants))
    arrays = _greedy_arrays(logits, ())
    mx.async_eval(*arrays, *wanted)
    return arrays


def land_plain_step(arrays: list[mx.array], rows: Sequence[Verify]) -> list[Step]:
    """The rows' Steps of a queued plain step (waits for it: the step's one sync)."""
    host = _greedy_host([nested(a) for a in arrays], rows)
    return [_finish(r, lps[0], decided, extras)[0] for r, (lps, decided, extras) in zip(rows, host)]
