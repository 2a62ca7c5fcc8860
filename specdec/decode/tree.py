"""Token-tree verification: one target forward over ``[last] + tree nodes`` on an
unmodified mlx-lm model, greedy acceptance of the longest agreeing root path, and cache
compaction to exactly that path.

Contract:
- A tree is ``(tokens, parents)`` in topological order (``parents[j] < j``, ``-1`` = the
  root, i.e. the last context token), as ``drafters.base.Proposal`` holds it. The verify
  *block* is ``[last] + tokens``: block index 0 is the root, block index ``j + 1`` is
  node ``j``.
- ``tree_positions(parents)`` gives each node's depth (1..; the root is depth 0);
  ``ancestor_mask(parents)`` the block's ``(n+1, n+1)`` visibility (ancestors and self).
- ``tree_forward(model, cache, last, tokens, parents)`` returns the logits of every block
  row after ONE forward: row ``r`` equals the logits of a plain forward of the context
  plus the root path of row ``r``. Two temporary swaps make that happen inside the
  unmodified model (``tree_attention``): every attention layer's ``rope`` module is wrapped
  so each token is rotated at ``offset + depth`` (``mx.fast.rope`` takes one offset per
  batch row, so tokens move to the batch axis), and every layer cache's ``make_mask``
  returns "cache prefix + ancestors" (intersected with the sliding window, counted in
  logical positions, for windowed layers). Both are restored on exit; the model graph is
  built before that, so lazy evaluation afterwards is unaffected. Not re-entrant: one
  forward of one model at a time (the server has one inference thread).
- ``greedy_tree_accept(tokens, parents, fix)`` walks from the root taking the child whose
  token equals the target's argmax at the current row; ``rollback.compact`` then keeps the
  root and the accepted nodes in the cache (checked, for KVCache, QuantizedKVCache and
  WindowKVCache).
- ``tree_step(...)`` is one engine step over a tree proposal (one host sync).
- Sampling (temperature > 0): multi-candidate rejection sampling (SpecInfer): at each
  row on the walk the children are tried best first, each accepted with its probability
  under the residual left by its rejected elder siblings (``verify.tree_rejection_sample``,
  ``tree_kids``); every emitted token is distributed exactly as plain sampling's. This
  needs deterministic drafts: a tree carrying draft distributions (q) is verified by its
  first-child branch (``first_branch``, linear, exact). A repetition penalty penalises
  each row for the context plus its own root path (``penalized_tree_logits``).
- ``resolve_tree_budget(model, value, propose_cost=0)``: a fixed node budget, or for
  ``"auto"`` a ``tree_shape.TreeShaper`` that picks each step's budget from the drafter's
  observed per-node hit rates, the model's verify cost curve and the drafter's own cost
  per proposal; ``cut`` applies it (drafters
  return best-first trees, so the first N nodes are the best N-node tree).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, QuantizedKVCache
from mlx_lm.models.rope_utils import Llama3RoPE, SuScaledRoPE, YarnRoPE

from ..drafters.base import Proposal
from ..cache.rollback import RollbackError, WindowKVCache, compact
from ..policy.tree_shape import TreeShaper, cost_at

# RoPE modules whose __call__ hands ``offset`` straight to mx.fast.rope (so a vector of
# per-batch-row offsets is exact). Others (e.g. dynamic NTK, whose frequencies depend on
# the offset itself) are refused rather than guessed at.
ROPE_KINDS = (nn.RoPE, Llama3RoPE, SuScaledRoPE, YarnRoPE)
MAX_AUTO_NODES = 32
# ``auto`` measures the curve densely to this block length and sparsely beyond (the first
# use of a model measures it once; ``measure.cost_curve_for`` caches it on disk).
AUTO_CURVE_LEN = 17
AUTO_CURVE_EXTRA = (24, 33)
# block lengths (1 + nodes) at which tree steps are timed against linear ones
AUTO_TREE_CURVE = (3, 5, 9, 17, 25, 33)


def tree_positions(parents: Sequence[int]) -> list[int]:
    """Depth of each node (1 for children of the root).

    >>> tree_positions([-1, 0, 0, -1, 3])
    [1, 2, 2, 1, 2]
    """
    depth: list[int] = []
    for j, p in enumerate(parents):
        if not -1 <= p < j:
            raise ValueError(f"node {j}: parent {p} is not an earlier node or -1 (topological order)")
        depth.append(1 + (depth[p] if p >= 0 else 0))
    return depth


def ancestor_mask(parents: Sequence[int]) -> list[list[bool]]:
    """Visibility within the block ``[last] + nodes``: row r sees the root, its ancestors
    and itself.

    >>> [''.join('x' if v else '.' for v in row) for row in ancestor_mask([-1, 0, -1])]
    ['x...', 'xx..', 'xxx.', 'x..x']
    """
    tree_positions(parents)  # validates the order
    rows = [[True]]
    for j, p in enumerate(parents):
        parent = rows[p + 1]  # the parent's row (root = block row 0) sees our ancestors
        rows.append(parent + [False] * (j + 1 - len(parent)) + [True])
    n = len(rows)
    return [r + [False] * (n - len(r)) for r in rows]


def first_branch(proposal: Proposal) -> Proposal:
    """The tree's first-child path (drafters order children best first), as a linear
    proposal with its q rows.

    >>> first_branch(Proposal([5, 6, 7, 8], parents=(-1, -1, 0, 2))).tokens
    (5, 7, 8)
    """
    if proposal.is_linear:
        return proposal
    path, node = [], -1
    for j, p in enumerate(proposal.parents):
        if p == node:
            path.append(j)
            node = j
    q = None if proposal.q is None else proposal.q[mx.array(path)] if path else None
    return Proposal([proposal.tokens[j] for j in path], q)


def prune_tree(proposal: Proposal, max_depth: int, max_nodes: int) -> Proposal:
    """The nodes at depth <= max_depth whose ancestors are all kept, the first
    ``max_nodes`` of them in topological order (so every kept node's parent is kept).

    >>> p = prune_tree(Proposal([1, 2, 3, 4], parents=(-1, 0, 1, -1)), 2, 3)
    >>> p.tokens, p.parents
    ((1, 2, 4), (-1, 0, -1))
    """
    if proposal.is_linear:
        return proposal.truncated(min(max_depth, max_nodes))
    depth = tree_positions(proposal.parents)
    new_index: dict[int, int] = {-1: -1}
    kept: list[int] = []
    for j, p in enumerate(proposal.parents):
        if len(kept) < max_nodes and depth[j] <= max_depth and p in new_index:
            new_index[j] = len(kept)
            kept.append(j)
    if len(kept) == len(proposal.tokens):
        return proposal
    q = None if proposal.q is None or not kept else proposal.q[mx.array(kept)]
    return Proposal([proposal.tokens[j] for j in kept], q,
                    parents=[new_index[proposal.parents[j]] for j in kept])


def greedy_tree_accept(tokens: Sequence[int], parents: Sequence[int],
                       fix: Sequence[int]) -> tuple[list[int], list[int]]:
    """(accepted node indices in path order, emitted tokens). ``fix[r]`` is the target's
    argmax at block row r (row 0 follows the root, row j+1 follows node j). The emitted
    tokens are the accepted nodes' tokens plus the target's token after the last one.

    >>> greedy_tree_accept([5, 6, 7, 9], [-1, -1, 1, 2], fix=[6, 0, 7, 9, 9])
    ([1, 2, 3], [6, 7, 9, 9])
    >>> greedy_tree_accept([5, 6], [-1, -1], fix=[4, 0, 0])
    ([], [4])
    """
    children: dict[int, list[int]] = {}
    for j, p in enumerate(parents):
        children.setdefault(p, []).append(j)
    path, node = [], -1
    while True:
        want = fix[node + 1]
        nxt = next((c for c in children.get(node, ()) if tokens[c] == want), None)
        if nxt is None:
            return path, [tokens[j] for j in path] + [want]
        path.append(nxt)
        node = nxt


# ---- one forward over a tree ------------------------------------------------------------
class _TreeRoPE(nn.Module):
    """Applies the wrapped RoPE at ``offset + depth`` per token: x (1, H, L, D) moves to
    (L, H, 1, D), one batch row per token, each with its own offset."""

    def __init__(self, inner: nn.Module, depths: mx.array):
        super().__init__()
        self.inner = inner
        self.depths = depths

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        if x.shape[0] != 1 or x.shape[2] != self.depths.shape[0]:
            raise ValueError(f"tree forward: rope got shape {x.shape}, expected batch 1 and "
                             f"{self.depths.shape[0]} tokens")
        pos = (self.depths + offset).astype(mx.int32)
        y = self.inner(x.transpose(2, 1, 0, 3), offset=pos)
        return y.transpose(2, 1, 0, 3)


def _rope_owners(model: nn.Module) -> list[nn.Module]:
    owners = [m for _, m in model.named_modules() if isinstance(m.get("rope"), nn.Module)]
    if not owners:
        raise ValueError(f"{type(model).__name__}: no attention layer with a `rope` module; "
                         "token trees need mlx-lm attention layers that own their RoPE")
    for m in owners:
        if not isinstance(m["rope"], ROPE_KINDS):
            raise ValueError(f"{type(m['rope']).__name__} is not a RoPE kind tree verification "
                             f"supports ({', '.join(k.__name__ for k in ROPE_KINDS)}): "
                             "use --draft-tree-budget 0")
    return owners


def _first_key(c: Any, n: int) -> int:
    """Absolute position of the first key the layer's attention will see."""
    if isinstance(c, WindowKVCache):
        return c.start + c._drop_for(n)  # the same drop rule update_and_fetch applies
    if type(c) in (KVCache, QuantizedKVCache):
        return 0
    raise RollbackError(f"{type(c).__name__}: token trees support KVCache, QuantizedKVCache "
                        "and WindowKVCache layers only: use --draft-tree-budget 0")


def tree_mask(c: Any, depths: mx.array, anc: mx.array, n: int,
              window_size: int | None = None) -> mx.array:
    """(n, keys) bool mask of a tree block on top of cache ``c``: the cached prefix and the
    row's ancestors, each within ``window_size`` logical positions when given."""
    if n != depths.shape[0]:
        raise ValueError(f"tree mask for {n} tokens, but the tree block has {depths.shape[0]}")
    window = window_size or getattr(c, "window", None)
    first, offset = _first_key(c, n), c.offset
    q = offset + depths[:, None]  # each row's logical position
    k = mx.arange(first, offset)[None]
    prefix = mx.broadcast_to(k <= q, (n, offset - first))
    block = anc
    if window is not None:
        prefix = prefix & (k > q - window)
        block = block & (depths[:, None] - depths[None] < window)
    return mx.concatenate([prefix, block], axis=1)


@contextmanager
def tree_attention(model: nn.Module, cache: list, parents: Sequence[int]) -> Iterator[None]:
    """Within the block, the model rotates each token at its depth and masks attention to
    the prefix and its ancestors (see module doc). Restores everything on exit."""
    owners = _rope_owners(model)
    depths = mx.array([0] + tree_positions(parents), dtype=mx.int32)
    anc = mx.array(ancestor_mask(parents))
    for i, c in enumerate(cache):
        _first_key(c, 1)  # refuse unsupported layers before touching anything
        if "make_mask" in vars(c):
            raise RuntimeError(f"layer {i}: cache already in a tree forward (not re-entrant)")
    inner = [m["rope"] for m in owners]
    try:
        for m, r in zip(owners, inner):
            m.rope = _TreeRoPE(r, depths)
        for c in cache:
            c.make_mask = (lambda c: lambda N, window_size=None, **_: tree_mask(
                c, depths, anc, N, window_size))(c)
        yield
    finally:
        for m, r in zip(owners, inner):
            m.rope = r
        for c in cache:
            vars(c).pop("make_mask", None)


def tree_forward(model: nn.Module, cache: list, last: int, tokens: Sequence[int],
                 parents: Sequence[int]) -> mx.array:
    """Logits (n+1, V) of the block ``[last] + tokens`` in one forward (module doc); the
    cache then holds the whole block: follow with ``rollback.compact``."""
    if len(tokens) != len(parents):
        raise ValueError(f"{len(tokens)} tokens but {len(parents)} parents")
    with tree_attention(model, cache, parents):
        return model(mx.array([last, *tokens])[None], cache=cache)[0]


# ---- one engine step ---------------------------------------------------------------------
def tree_kids(tokens: Sequence[int], parents: Sequence[int]) -> list[list[int]]:
    """Each block row's child nodes in the order they are tried (topological = best
    first); a child repeating an earlier sibling's token is left out (a trie has none,
    and a repeat could never be accepted after its twin was rejected).

    >>> tree_kids([5, 6, 5, 7], [-1, -1, -1, 0])
    [[0, 1], [3], [], [], []]
    """
    kids: list[list[int]] = [[] for _ in range(len(tokens) + 1)]
    for j, p in enumerate(parents):
        if all(tokens[c] != tokens[j] for c in kids[p + 1]):
            kids[p + 1].append(j)
    return kids


def _sampled_pick(logits: mx.array, tokens: Sequence[int], kids: list[list[int]],
                  params: Any, rng: Any) -> tuple[mx.array, mx.array]:
    """Device arrays (pick, fix) of multi-candidate rejection sampling over the tree."""
    from ..core.sampling import processed_probs
    from ..core.verify import tree_rejection_sample

    width, vocab = max(1, max(map(len, kids))), logits.shape[-1]
    # an out-of-vocabulary child has probability 0: it is padding, never accepted
    slots = [[tokens[j] if tokens[j] < vocab else -1 for j in row] + [-1] * (width - len(row))
             for row in kids]
    return tree_rejection_sample(processed_probs(logits, params),
                                 mx.array(slots, dtype=mx.int32), rng.next())


def penalized_tree_logits(logits: mx.array, context: list[int], tokens: Sequence[int],
                          parents: Sequence[int], params: Any) -> mx.array:
    """The repetition penalty per block row: row r has seen the context and its root path."""
    from .step import penalize_rows

    if params.repetition_penalty == 1.0:
        return logits
    tree = Proposal(tokens, parents=parents)
    return penalize_rows(logits, context, [[]] + [tree.path(j) for j in range(len(tokens))], params)


def tree_step(model: Any, cache: list, context: list[int], proposal: Proposal,
              vocab: int | None, diagnostics: bool, top_logprobs: int,
              params: Any = None, rng: Any = None) -> Any:
    """Verify a tree proposal of deterministic drafts: one forward, one host sync, accept,
    compact. Greedy (``params`` None or greedy) takes the branch agreeing with the target's
    argmax; sampling runs multi-candidate rejection sampling (``verify.tree_settle``).
    Returns ``(Step, accepted node indices)``; ``context`` is not changed here."""
    from .step import Step, in_vocab, sorted_top, top2_margin, top_entries
    from ..core.verify import tree_settle

    tokens, parents = list(proposal.tokens), list(proposal.parents)
    if proposal.q is not None:
        raise ValueError("tree_step verifies deterministic drafts only: verify a tree carrying "
                         "draft distributions (q) by its first branch (tree.first_branch)")
    base = cache[0].offset
    logits = tree_forward(model, cache, context[-1], in_vocab(tokens, vocab), parents)
    if params is not None:
        logits = penalized_tree_logits(logits, context, tokens, parents, params)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    greedy = params is None or params.greedy
    kids = None if greedy else tree_kids(tokens, parents)
    pick, fix = (None, mx.argmax(logits, axis=-1)) if greedy else \
        _sampled_pick(logits, tokens, kids, params, rng)
    # each node's logprob at its parent's row; an out-of-vocabulary id is never accepted
    cand = mx.minimum(mx.array(tokens, dtype=fix.dtype), logits.shape[-1] - 1)
    arrays = [fix, logp[mx.arange(logits.shape[0]), fix], logp[mx.array(parents) + 1, cand]]
    arrays += [] if greedy else [pick]
    arrays += [top2_margin(logits)] if diagnostics else []
    arrays += top_entries(logp, top_logprobs) if top_logprobs else []
    mx.eval(*arrays)
    fx, lp_fix, lp_node, *rest = (a.tolist() for a in arrays)  # the one sync
    if greedy:
        path, emitted = greedy_tree_accept(tokens, parents, fx)
    else:
        path, emitted = tree_settle(tokens, kids, rest.pop(0), fx)
    compact(cache, base, [0] + [j + 1 for j in path])
    rows = [0] + [j + 1 for j in path]  # the block row each emitted token was predicted at
    logprobs = [lp_node[j] for j in path] + [lp_fix[rows[-1]]]
    margins = None
    if diagnostics:
        m = rest.pop(0)
        margins = [m[r] for r in rows]
    top = [sorted_top(rest[0][r], rest[1][r]) for r in rows] if top_logprobs else None
    step = Step(emitted, len(tokens), len(path), len(tokens) + 1, logprobs, margins, top,
                depth=proposal.depth)
    return step, path


# ---- the node budget ---------------------------------------------------------------------
def resolve_tree_budget(model: Any, value: int | str, *,
                        propose_cost: float = 0.0) -> tuple[int, TreeShaper | None]:
    """(node budget, shaper): an integer budget is fixed (0 = linear drafts); ``"auto"``
    asks the drafter for up to ``MAX_AUTO_NODES`` nodes and lets a ``TreeShaper`` on the
    model's (cached) verify cost curve pick how many to verify at each step, counting
    ``propose_cost`` (seconds, the drafter's own cost per proposal) in every step."""
    if value == "auto":
        from ..measure import cost_curve_for, tree_overhead_for

        cost = cost_curve_for(model, AUTO_CURVE_LEN, extra=AUTO_CURVE_EXTRA)
        # a tree block costs a linear block of its length times the measured overhead
        over = tree_overhead_for(model, AUTO_TREE_CURVE)
        tree_cost = {L: cost_at(cost, L) * r for L, r in over.items()}
        return MAX_AUTO_NODES, TreeShaper(cost, MAX_AUTO_NODES, tree_cost,
                                          propose_cost=propose_cost)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"draft tree budget must be an integer >= 0 or 'auto', got {value!r}")
    return value, None


def cut(proposal: Proposal, max_depth: int, max_nodes: int) -> Proposal:
    """The first ``max_nodes`` nodes of a (best-first) proposal, at most ``max_depth`` deep."""
    if proposal.is_linear:
        return proposal.truncated(min(max_depth, max_nodes))
    return prune_tree(proposal, max_depth, max_nodes)
