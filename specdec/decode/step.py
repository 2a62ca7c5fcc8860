"""Decode steps: prefill, a plain step, a speculative step — one host sync per step
(a draft model's proposal adds its own; see ``drafters.draft_model``).

Contract:
- ``prefill(model, cache, tokens)`` fills the cache in chunks, keeping no logits.
- ``plain_steps(...)`` yields one ``Step`` (one token) per target forward. Building the
  forward of token t+1 is queued before waiting for token t, as mlx-lm's loop does.
- ``spec_steps(...)`` yields one ``Step`` per verify forward over ``[last] + draft``: the
  kept tokens (``verify.greedy_accept`` at temperature 0, ``verify.rejection_sample`` +
  ``settle`` otherwise), after rolling the cache back past the rejected ones. With
  ``tree_budget`` > 0 a drafter's ``propose_tree(context, k, budget)`` may return a token
  tree (at most k deep, at most ``tree_budget`` nodes), verified in one forward
  (``tree.tree_step``: greedy accepts the longest agreeing root path, sampling runs
  multi-candidate rejection sampling down the tree; the repetition penalty gives each
  node its own root path's window; the cache is compacted to the accepted path). A tree
  carrying draft distributions (q) verifies its first-child branch linearly, which is
  exact (``tree.first_branch``). With ``tree_budget`` = 0 a tree is refused, never flattened.
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

from ..drafters.base import Drafter, Proposal
from ..cache.rollback import trim
from .tree import cut, first_branch, prune_tree, tree_step
from ..policy.tree_shape import TreeShaper
from ..core.sampling import Rng, SamplingParams, penalize, processed_probs
from ..core.verify import greedy_accept, rejection_sample, settle


@dataclass
class Step:
    tokens: list[int]
    drafted: int
    accepted: int
    fed: int
    logprobs: list[float]
    margins: list[float] | None = None
    top: list[list[tuple[int, float]]] | None = None  # per emitted token, when asked
    depth: int | None = None  # a tree's depth (None: a linear draft, depth = drafted)


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
    logits: mx.array, proposal: Proposal, params: SamplingParams, rng: Rng | None
) -> tuple[mx.array, mx.array]:
    """Device arrays (accept (k,), fix (k+1,)) for one verify block of ``proposal``."""
    d = mx.array(proposal.tokens, dtype=mx.int32)
    if params.greedy:
        fix = mx.argmax(logits, axis=-1)
        return d == fix[: d.shape[0]], fix
    p = processed_probs(logits, params)
    q = proposal.q
    if q is not None and q.shape[-1] != p.shape[-1]:
        # padded vocabularies (Qwen pads its embedding rows): ids beyond either table
        # have probability 0 there, so zero-padding the narrower is exact
        width = max(q.shape[-1], p.shape[-1])
        q = mx.pad(q, [(0, 0), (0, width - q.shape[-1])])
        p = mx.pad(p, [(0, 0), (0, width - p.shape[-1])])
    return rejection_sample(d, p, q, rng.next())


def penalize_block(logits: mx.array, context: list[int], draft: Sequence[int],
                   params: SamplingParams) -> mx.array:
    """Apply the repetition penalty to each row of a verify block: row i has seen
    ``context + draft[:i]``."""
    return penalize_rows(logits, context, [list(draft[:i]) for i in range(len(draft) + 1)], params)


def penalize_rows(logits: mx.array, context: list[int], seen: Sequence[Sequence[int]],
                  params: SamplingParams) -> mx.array:
    """The repetition penalty per block row: row i has seen ``context + seen[i]`` (a linear
    draft's prefixes, or a tree node's root path), so each row gets its own window."""
    if params.repetition_penalty == 1.0:
        return logits
    size = params.repetition_context_size
    rows = [(context[-size:] + list(s))[-size:] for s in seen]
    if min(map(len, rows)) == max(map(len, rows)):  # equal widths: one gather
        return penalize(logits, mx.array(rows, dtype=mx.int32), params)
    # a prompt shorter than the window: rows differ in width
    return mx.concatenate(
        [penalize(logits[i : i + 1], mx.array([r], dtype=mx.int32), params) for i, r in enumerate(rows)]
    )


@dataclass
class _Fetched:
    """The host copies of one verify step's device results (the step's one sync)."""

    accept: list[bool]
    fix: list[int]
    lp_draft: list[float]  # logprob of each drafted token, then of the bonus candidate
    lp_fix: list[float]
    margins: list[float] | None
    top: tuple[list, list] | None

    @classmethod
    def fetch(cls, logits: mx.array, proposal: Proposal, accept: mx.array, fix: mx.array,
              diagnostics: bool, top_logprobs: int) -> "_Fetched":
        arrays = cls.arrays(logits, proposal, accept, fix, diagnostics, top_logprobs)
        mx.eval(*arrays)
        return cls.from_host([a.tolist() for a in arrays], diagnostics, top_logprobs)  # the one sync

    @staticmethod
    def arrays(logits: mx.array, proposal: Proposal, accept: mx.array, fix: mx.array,
               diagnostics: bool, top_logprobs: int) -> list[mx.array]:
        """The device arrays a step's host side needs (a batch evaluates all rows' at once)."""
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        rows = mx.arange(logits.shape[0])
        # an out-of-vocabulary draft id (see in_vocab) is rejected; its logprob is unused
        drafted = mx.minimum(mx.array(proposal.tokens, dtype=fix.dtype), logits.shape[-1] - 1)
        cand = mx.concatenate([drafted, fix[-1:]])
        arrays = [accept, fix, logp[rows, cand], logp[rows, fix]]
        arrays += [top2_margin(logits)] if diagnostics else []
        return arrays + (top_entries(logp, top_logprobs) if top_logprobs else [])

    @classmethod
    def from_host(cls, lists: list[list], diagnostics: bool, top_logprobs: int) -> "_Fetched":
        acc, fx, lp_draft, lp_fix, *rest = lists
        margins = rest.pop(0) if diagnostics else None
        return cls(acc, fx, lp_draft, lp_fix, margins, tuple(rest) if top_logprobs else None)

    def step(self, emitted: list[int], drafted: int, accepted: int) -> Step:
        n = accepted + 1
        logprobs = self.lp_draft[:accepted] + [self.lp_fix[accepted]]
        margins = self.margins[:n] if self.margins is not None else None
        top = [sorted_top(self.top[0][i], self.top[1][i]) for i in range(n)] if self.top else None
        return Step(emitted, drafted, accepted, drafted + 1, logprobs, margins, top)


def in_vocab(draft: list[int], vocab: int | None) -> list[int]:
    """The draft as the target may be fed it: a draft model with a wider (padded)
    vocabulary can sample ids the target has no embedding for. The target gives them
    probability 0, so verification rejects them whatever they are fed as; feeding them
    would read past the embedding table, so a valid id (0) stands in.

    >>> in_vocab([5, 9, 2], 8)
    [5, 0, 2]
    """
    if vocab is None or all(t < vocab for t in draft):
        return draft
    return [t if t < vocab else 0 for t in draft]


def draft_for_step(drafter: Drafter, context: Sequence[int], k: int,
                   tree_budget: int = 0) -> Proposal:
    """The drafter's proposal for this step, at most ``k`` tokens deep (none when k < 1);
    with ``tree_budget`` > 0 a tree of at most that many nodes (``propose_tree`` when the
    drafter has it)."""
    if k < 1:
        return Proposal()
    tree = tree_budget > 0 and hasattr(drafter, "propose_tree")
    proposal = drafter.propose_tree(context, k, tree_budget) if tree else drafter.propose(context, k)
    if not isinstance(proposal, Proposal):
        raise TypeError(f"{type(drafter).__name__}.propose returned {type(proposal).__name__}, "
                        "not a specdec.drafters.Proposal")
    if not proposal.is_linear:
        if tree_budget < 1:
            raise ValueError(f"drafter {drafter.name!r} proposed a token tree; set a draft tree "
                             "budget (--draft-tree-budget) to verify trees")
        return prune_tree(proposal, k, tree_budget)
    return proposal.truncated(k)


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
    tree_budget: int = 0,
    shaper: TreeShaper | None = None,
) -> Iterator[Step]:
    """Draft, verify, accept, roll back, emit. ``context`` grows by the emitted tokens of
    each step; ``budget[0]`` is the number of tokens still wanted (drafting past it is
    waste). ``tree_budget``: max tree nodes per step (0 = linear drafts only); with a
    ``shaper`` (``--draft-tree-budget auto``) each step verifies only the first
    ``shaper.budget()`` nodes of the drafter's best-first proposal, and the shaper learns
    from the whole proposal against what was emitted."""
    vocab = getattr(getattr(model, "args", None), "vocab_size", None)
    while True:
        full = draft_for_step(drafter, context, min(k, budget[0] - 1), tree_budget)
        proposal = cut(full, full.depth, shaper.budget(full.parents)) if shaper and full else full
        if not proposal.is_linear and proposal.q is not None:
            # draft distributions on a tree: its best branch is verified (exact, linear)
            proposal = first_branch(proposal)
        if proposal.is_linear:
            step = linear_step(model, cache, context, proposal, params, rng, vocab,
                               diagnostics, top_logprobs)
        else:
            step, _ = tree_step(model, cache, context, proposal, vocab, diagnostics, top_logprobs,
                                params, rng)
        if proposal:
            drafter.observe(step.accepted)
        if shaper and full:
            shaper.update(full.tokens, full.parents, step.tokens)
        context.extend(step.tokens)
        yield step


def linear_step(model: Any, cache: list, context: list[int], proposal: Proposal,
                params: SamplingParams, rng: Rng | None, vocab: int | None,
                diagnostics: bool, top_logprobs: int) -> Step:
    """One verify forward of a linear draft, rolled back past its rejected tokens."""
    draft = list(proposal.tokens)
    logits = model(mx.array([context[-1], *in_vocab(draft, vocab)])[None], cache=cache)[0]
    logits = penalize_block(logits, context, draft, params)
    accept, fix = _verify(logits, proposal, params, rng)
    got = _Fetched.fetch(logits, proposal, accept, fix, diagnostics, top_logprobs)
    if params.greedy:
        accepted, emitted = greedy_accept(draft, got.fix)
    else:
        accepted, emitted = settle(draft, got.accept, got.fix)
    trim(cache, len(draft) - accepted)
    return got.step(emitted, len(draft), accepted)
