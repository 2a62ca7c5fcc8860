"""Exact sampling: speculative steps draw every token from the target's distribution.

Small explicit distributions with exact expected frequencies (chi-square, fixed seeds,
enough samples that a wrong acceptance rule fails), then the real model's own next-token
distributions, then seeded reproducibility end to end.
"""

import mlx.core as mx
import numpy as np
import pytest
from scipy.stats import chisquare

from specdec.core.sampling import SamplingParams, processed_probs
from specdec.core.trees import tree_kids
from specdec.core.verify import rejection_sample, resolve, tree_rejection_sample, tree_resolve

N = 10_000
P = np.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], np.float32)
Q = np.array([[0.1, 0.6, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]], np.float32)


def sample_steps(p, draft_fn, q=None, n=N, seed=0):
    """Run n independent verify steps; returns the emitted token lists."""
    key = mx.random.key(seed)
    out = []
    for _ in range(n):
        key, k1, k2 = mx.random.split(key, 3)
        draft = draft_fn(k1)
        acc, recovered = rejection_sample(mx.array(draft), mx.array(p), None if q is None else mx.array(q), k2)
        out.append(resolve(draft, acc.tolist(), recovered.tolist())[1])
    return out


def expected(probs, n):
    probs = np.asarray(probs, np.float64)
    return probs / probs.sum() * n


def check_first_two(emitted, p, d0):
    first = np.bincount([e[0] for e in emitted], minlength=4)
    assert chisquare(first, expected(P[0], len(emitted))).pvalue > 1e-3, first
    seconds = [e[1] for e in emitted if e[0] == d0 and len(e) > 1]
    counts = np.bincount(seconds, minlength=4)
    # given first == d0 (which the draft proposed), the next token must follow p[1]
    assert chisquare(counts, expected(p[1], len(seconds))).pvalue > 1e-3, counts


# 10,000 steps a case: the fast suite keeps the likely first draft (d0) and the engine's
# point masses end to end (tests/test_engine_sampling.py, ngram); the unlikely drafts
# (d1, d2) run in the full suite
@pytest.mark.parametrize("d", [[0, 3], pytest.param([2, 1], marks=pytest.mark.slow),
                               pytest.param([3, 3], marks=pytest.mark.slow)])
def test_point_mass_drafts_give_the_target_distribution(d):
    emitted = sample_steps(P, lambda key: d)
    check_first_two(emitted, P, d[0])


def test_draft_model_q_gives_the_target_distribution():
    # the drafts sampled from q, as a draft model does: all N pairs in one draw per
    # position (their own key, independent of the verify steps' keys)
    columns = [mx.random.categorical(mx.log(mx.array(q)), num_samples=N, key=k).tolist()
               for q, k in zip(Q, mx.random.split(mx.random.key(1)))]
    drafts = iter(zip(*columns))
    emitted = sample_steps(P, lambda key: list(next(drafts)), q=Q)
    first = np.bincount([e[0] for e in emitted], minlength=4)
    assert chisquare(first, expected(P[0], N)).pvalue > 1e-3, first


def test_repetition_penalty_matches_mlx_lm_rule():
    from specdec.core.sampling import penalize

    logits = mx.array([[2.0, -2.0, 1.0], [2.0, -2.0, 1.0]])
    out = penalize(logits, mx.array([[0, 1], [2, 2]]), SamplingParams(repetition_penalty=2.0))
    assert out.tolist() == [[1.0, -4.0, 1.0], [2.0, -2.0, 0.5]]


@pytest.mark.parametrize("kw", [
    dict(temperature=0.7, top_k=3),
    dict(temperature=1.0, top_p=0.5),
    dict(temperature=1.3, min_p=0.1),
    dict(temperature=0.9, top_p=0.9, min_p=0.05, top_k=5),  # all three: mlx-lm's order matters
])
def test_processed_probs_is_what_mlx_lm_samples_from(kw):
    """Draws from mlx-lm's own sampler (``make_sampler``, fed log-probabilities as its
    generate loop does) follow ``processed_probs``: same filters, order and temperature."""
    from mlx_lm.sample_utils import make_sampler

    n, params = 20_000, SamplingParams(**kw)
    logits = mx.array(np.random.default_rng(0).normal(size=10).astype(np.float32) * 2)
    logprobs = logits - mx.logsumexp(logits)
    p = np.array(processed_probs(logits[None], params).tolist()[0], np.float64)
    sampler = make_sampler(temp=params.temperature, top_p=kw.get("top_p", 0.0),
                           min_p=params.min_p, top_k=params.top_k)
    mx.random.seed(1)  # mlx-lm's sampler takes no key: it draws from mlx's global state
    counts = np.bincount(sampler(mx.broadcast_to(logprobs, (n, 10))).tolist(), minlength=10)
    assert counts[p == 0].sum() == 0, (counts, p)  # nothing we filter out is ever drawn
    keep = p > 0
    assert chisquare(counts[keep], expected(p[keep], n)).pvalue > 1e-3, (counts, p)
    # power: the unfiltered softmax(logits / T) is told apart from the same draws
    plain = np.array(mx.softmax(logits / params.temperature).tolist(), np.float64)
    assert chisquare(counts, expected(plain, n)).pvalue < 1e-6


def test_sampling_params_validate():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1).validate()
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(temperature=1, top_p=0).validate()


# a tree: the root tries tokens 1, 2, 0 in turn (node 0 = token 1 has child token 3)
TREE_TOKENS, TREE_PARENTS = [1, 2, 0, 3], [-1, -1, -1, 0]
TREE_P = np.stack([P[0], P[1], P[2], P[2], P[2]])  # block rows: root, after each node


def sample_tree(children_rule, n=N, seed=0):
    kids = tree_kids(TREE_TOKENS, TREE_PARENTS)
    slots = mx.array([[TREE_TOKENS[j] for j in r] + [-1] * (3 - len(r)) for r in kids])
    key, out = mx.random.key(seed), []
    for _ in range(n):
        key, sub = mx.random.split(key)
        pick, recovered = children_rule(mx.array(TREE_P), slots, sub)
        out.append(tree_resolve(TREE_TOKENS, kids, pick.tolist(), recovered.tolist())[1])
    return out


def naive_rule(p, children, key):
    """A wrong tree rule: each child accepted with its unrenormalised p (the residual left
    by rejected elder siblings ignored)."""
    pick, recovered = tree_rejection_sample(p, children, key)
    pc = mx.take_along_axis(p, mx.maximum(children, 0), axis=-1) * (children >= 0)
    u = mx.random.uniform(shape=pc.shape, key=key)
    acc = u < pc
    return mx.min(mx.where(acc, mx.arange(3)[None], 3), axis=-1), recovered


def tree_counts_fit(emitted):
    first = np.bincount([e[0] for e in emitted], minlength=4)
    ok = chisquare(first, expected(P[0], len(emitted))).pvalue > 1e-3
    for tok, row in ((1, P[1]), (2, P[2])):  # after node token 1: its row; after token 2: a leaf
        nxt = np.bincount([e[1] for e in emitted if e[0] == tok], minlength=4)
        ok &= chisquare(nxt, expected(row, nxt.sum())).pvalue > 1e-3
    return ok


def test_tree_rejection_sampling_gives_the_target_distribution_and_the_test_has_power():
    """Several deterministic candidates per row (SpecInfer's recursive rejection): the first
    token follows p at the root whichever child is tried first, the next one follows the
    row of the node taken; the same test rejects the rule without renormalisation."""
    assert tree_counts_fit(sample_tree(tree_rejection_sample, n=4000))
    assert not tree_counts_fit(sample_tree(naive_rule, n=2000))


def test_tree_rejection_sampling_takes_the_last_child_when_children_hold_all_mass():
    p = mx.array([[0.0, 0.7, 0.3, 0.0]])
    for seed in range(50):
        pick, _ = tree_rejection_sample(p, mx.array([[1, 2]]), mx.random.key(seed))
        assert pick.item() in (0, 1)


@pytest.mark.slow
def test_real_model_speculative_step_matches_the_target_distribution(smollm):
    """On SmolLM2's real logits: the token emitted after a speculative step is distributed
    as the target's own processed next-token distribution (first and second position)."""
    from specdec.cache.rollback import make_cache, trim
    from specdec.cache.rollback import prefill
    from specdec.core.text import encode_prompt

    model, tok = smollm
    ids = encode_prompt(tok, "Name a color.")
    cache = make_cache(model)
    prefill(model, cache, ids[:-1])
    params = SamplingParams(temperature=1.0, top_k=4)
    probe = processed_probs(model(mx.array([ids[-1:]]), cache=cache)[0], params)
    top = np.argsort(-np.array(probe.tolist()[0]))[:2].tolist()
    draft = [top[1], top[0]]  # a plausible but not-most-likely first draft token
    trim(cache, 1)
    logits = model(mx.array([[ids[-1], *draft]]), cache=cache)[0]
    p = np.array(processed_probs(logits, params).tolist(), np.float64)
    key = mx.random.key(1)
    emitted = []
    # sampled over the columns that hold mass (top_k=4: a few of 49152) and mapped back: the
    # same distributions, and each of the 6000 samples costs a fifth of a full-vocab one
    cols = np.nonzero(p.any(axis=0))[0]
    draft_mx = mx.array([int(np.searchsorted(cols, t)) for t in draft])
    assert cols[np.array(draft_mx)].tolist() == draft  # both draft tokens hold mass
    p_mx = mx.array(p[:, cols].astype(np.float32))
    for _ in range(6000):
        key, sub = mx.random.split(key)
        acc, recovered = rejection_sample(draft_mx, p_mx, None, sub)
        emitted.append(resolve(draft, acc.tolist(), cols[recovered.tolist()].tolist())[1])
    support = np.nonzero(p[0])[0]
    first = np.array([sum(e[0] == t for e in emitted) for t in support])
    assert chisquare(first, expected(p[0][support], len(emitted))).pvalue > 1e-3
    seconds = [e[1] for e in emitted if e[0] == draft[0] and len(e) > 1]
    s_support = np.nonzero(p[1])[0]
    counts = np.array([sum(s == t for s in seconds) for t in s_support])
    assert chisquare(counts, expected(p[1][s_support], len(seconds))).pvalue > 1e-3


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_greedy_is_unchanged(smollm):
    from specdec.engine import generate

    model, tok = smollm
    prompt = "Write a haiku about the sea."
    kw = dict(drafter="ngram", max_tokens=16, temperature=0.8, top_p=0.95)
    a = generate(model, tok, prompt, seed=7, **kw)
    b = generate(model, tok, prompt, seed=7, **kw)
    c = generate(model, tok, prompt, seed=8, **kw)
    # tokens exactly; logprobs to float noise: the cost gate prices drafts on what steps
    # really take (wall clock), so the second run may verify blocks of other lengths, and
    # a block's length moves a logprob by ~1e-6 (CI saw 2e-6)
    assert a.tokens == b.tokens and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert a.tokens != c.tokens
    assert all(lp <= 0 for lp in a.logprobs)
    g0 = generate(model, tok, prompt, drafter=None, max_tokens=16)
    g1 = generate(model, tok, prompt, drafter="ngram", max_tokens=16, temperature=0.0, seed=3)
    assert g0.tokens == g1.tokens
