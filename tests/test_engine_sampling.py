"""Speculative sampling end to end: what ``engine.token_stream`` emits is plain sampling.

tests/core/test_sampling.py checks the acceptance rule (``rejection_sample``/``resolve``) on
explicit distributions. Here the whole loop runs — drafter, verify forward, rollback, the
engine's seeded keys — on a tiny random mlx-lm llama with an 8-token vocabulary, with
every drafter kind: point masses (n-gram; a draft model at temperature 0), a draft model's
q, and draft vocabularies wider and narrower than the target's (``steps._verify``
zero-pads the narrower). Each case runs N seeded requests and records the first 3 emitted
tokens; with ``num_draft_tokens=2`` the first step can emit all three (two accepted drafts
and the bonus token), or a correction followed by later steps. A chi-square over the
8**3 joint outcomes compares the counts with the EXACT joint distribution
p(t1) p(t2 | t1) p(t3 | t1 t2), each factor the target's processed distribution
(``sampling.processed_probs``: temperature, top-p) from one batched forward over every
prefix.

Requests without a seed take rejection sampling (exact in distribution); seeded ones
take position-keyed draws (``step.SeededSampler``), checked here too.

Power: a drafter that reports a q it did not draw from (greedy drafts, softmax q) feeds a
wrong acceptance ratio through the real pipeline, and the same test must reject it; and
plain sampling must be told apart from the joint at a nearby temperature.
"""

from __future__ import annotations

import functools
from unittest import mock

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_map
from mlx_lm.models import llama
from scipy.stats import chisquare

from specdec.drafters.base import Proposal
from specdec.drafters.draft_model import DraftModelDrafter
from specdec.drafters.ngram import NgramDrafter
from specdec.engine import token_stream
from specdec.core.sampling import Rng, SamplingParams, processed_probs

V = 8  # target vocabulary: 512 joint outcomes of 3 tokens
PROMPT = [1, 2, 3, 1, 2]  # repeats, so the n-gram drafter proposes from the first step
N = 800  # seeded requests per case (~10 CPU ms each); enough for the power checks below with
# margin (measured at 800: plain vs T=0.7 p = 1.2e-8, the misreported q 4.4e-16, both < FAIL;
# at 600 the first was 1e-5, a fail of the check; 1000 cost a quarter more for no check)
K = 2  # draft tokens per step: 2 drafts + the bonus token are the 3 tokens compared
PASS, FAIL = 1e-3, 1e-6  # p-value thresholds: exact cases pass above, broken ones fall below


@functools.lru_cache(maxsize=None)
def model(seed: int, vocab: int = V):
    """A one-layer random-weight mlx-lm llama (small enough for thousands of requests)."""
    m = llama.Model(llama.ModelArgs(
        model_type="llama", num_hidden_layers=1, hidden_size=16, intermediate_size=32,
        num_attention_heads=2, num_key_value_heads=1, vocab_size=vocab, rms_norm_eps=1e-5))
    key = mx.random.key(seed)  # explicit keys: no global random state

    def init(p):
        nonlocal key
        key, sub = mx.random.split(key)
        return mx.random.normal(p.shape, key=sub) * 0.5

    m.update(tree_map(init, m.parameters()))
    mx.eval(m.parameters())
    return m


def exact_joint(params: SamplingParams) -> np.ndarray:
    """P(t1, t2, t3) under plain sampling from the target, as a (V, V, V) array."""
    seqs = mx.array([PROMPT + [a, b] for a in range(V) for b in range(V)])
    logits = model(0)(seqs)[:, -3:, :]  # rows: after the prompt, after t1, after t1 t2
    p = np.array(processed_probs(logits.reshape(-1, V), params).tolist(), np.float64)
    p = p.reshape(V, V, 3, V)
    first, second, third = p[0, 0, 0], p[:, 0, 1], p[:, :, 2]
    return first[:, None, None] * second[:, :, None] * third


def sample_counts(params: SamplingParams, drafter, seeded: bool = False, **kw) -> np.ndarray:
    """Counts of the first 3 tokens over N requests 0..N-1 (drafter(i) builds request i's
    drafter, or None for plain decoding). Unseeded requests (``seeded`` False) run
    rejection sampling, the path of a request without a seed; their key stream is still
    ``Rng(i)``'s (patched in), so every run is reproducible. Seeded requests (seed i) run
    position-keyed sampling (``step.SeededSampler``)."""
    counts = np.zeros((V, V, V), np.int64)
    for seed in range(N):
        sampling = SamplingParams(params.temperature, params.top_p, seed=seed if seeded else None)
        with mock.patch("specdec.decode.request.Rng", lambda s, i=seed: Rng(i if s is None else s)):
            toks = [e.token for e in token_stream(model(0), PROMPT, drafter=drafter(seed), max_tokens=3,
                                                   num_draft_tokens=K, sampling=sampling, **kw)]
        assert len(toks) == 3 and all(0 <= t < V for t in toks), toks
        counts[tuple(toks)] += 1
    return counts


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value of counts against probs; outcomes expected fewer than 5 times
    are pooled into one cell. An outcome of probability 0 that occurred fails outright."""
    counts, probs = counts.ravel(), probs.ravel() / probs.sum()
    impossible = probs == 0
    assert counts[impossible].sum() == 0, f"emitted outcomes of probability 0: {np.flatnonzero(counts * impossible)}"
    expected = probs * counts.sum()
    big = expected >= 5
    small = ~big & ~impossible
    obs = np.append(counts[big], counts[small].sum())
    exp = np.append(expected[big], expected[small].sum())
    return chisquare(obs, exp).pvalue


class GreedyDraftsSoftmaxQ(DraftModelDrafter):
    """A broken drafter: it proposes the draft model's argmax but reports the softmax it
    did not draw from, so the verifier accepts with the wrong ratio p(x)/q(x)."""

    def _pick(self, logits, key):
        tok, q = super()._pick(logits, key)
        return (mx.argmax(logits, axis=-1) if key is not None else tok), q


class BranchyDrafter(NgramDrafter):
    """Deterministic token trees drawn from the context: three distinct root children, two
    and one grandchildren under the first two (the drafts are often wrong: V = 8)."""

    def propose_tree(self, context, k, budget):
        import random

        a, b, c = random.Random(hash(tuple(context))).sample(range(V), 3)
        tokens, parents = [a, b, c, (a + 1) % V, (a + 2) % V, (b + 3) % V], [-1, -1, -1, 0, 0, 1]
        return Proposal(tokens[:budget], parents=parents[:budget])


T1 = SamplingParams(temperature=1.0)
FILTERED = SamplingParams(temperature=0.8, top_p=0.9)  # some outcomes have probability 0

CASES = {
    # point masses: proposals that depend on the (sampled) context, often wrong
    "ngram": (T1, lambda seed: NgramDrafter()),
    # point masses that are often right: the target's own argmax chain
    "argmax-drafts": (FILTERED, lambda seed: DraftModelDrafter(model(0), temperature=0.0)),
    # a draft model's q: another random model, sampled at its own temperature (q is
    # positive where the filtered p is 0); unfiltered q: the two cases below
    "draft-q-filtered": (FILTERED, lambda seed: DraftModelDrafter(model(1), temperature=1.3, seed=seed)),
    # vocabulary widths differ: the draft proposes ids the target cannot emit (wider),
    # or puts no mass on some of the target's ids (narrower)
    "wider-draft": (T1, lambda seed: DraftModelDrafter(model(2, V + 4), temperature=1.0, seed=seed)),
    "narrower-draft": (T1, lambda seed: DraftModelDrafter(model(3, V - 2), temperature=1.0, seed=seed)),
}


# N requests a case (~8 s each): the fast suite keeps the often-wrong point masses (ngram;
# a draft model's q: tests/core/test_sampling.py); the often-right argmax chain under top-p,
# the q and the vocabulary-width cases run in the slow one
SLOW_CASES = ("argmax-drafts", "draft-q-filtered", "wider-draft", "narrower-draft")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES
                                  else c for c in CASES])
def test_speculative_sampling_emits_the_exact_joint_distribution(case):
    params, drafter = CASES[case]
    counts = sample_counts(params, drafter)
    p = chi2_pvalue(counts, exact_joint(params))
    assert p > PASS, f"{case}: first 3 tokens differ from plain sampling (p = {p:.2e})"


# the draft-model cases: test_seeded.py (= plain); slow: the fast suite's seeded check is
# tests/decode/test_step_seeded.py (every drafter's seeded run equals plain token for token)
@pytest.mark.slow
@pytest.mark.parametrize("case", ["ngram"])
def test_seeded_speculative_sampling_emits_the_exact_joint_distribution(case):
    """Seeded requests (position-keyed draws, drafts accepted when equal to them) through
    the engine: plain sampling's joint, a draft model's q playing no part."""
    params, drafter = CASES[case]
    p = chi2_pvalue(sample_counts(params, drafter, seeded=True), exact_joint(params))
    assert p > PASS, f"seeded {case}: first 3 tokens differ from plain sampling (p = {p:.2e})"


# slow: the fast suite keeps multi-candidate rejection sampling on explicit distributions
# (tests/core/test_sampling.py, with its power check) and greedy tree parity through the engine
@pytest.mark.slow
@pytest.mark.parametrize("params", [T1, FILTERED], ids=["t1", "top-p"])
def test_sampled_token_trees_emit_the_exact_joint_distribution(params):
    """Multi-candidate rejection sampling through the engine: trees of deterministic drafts
    (siblings tried in turn, subtrees below the first two) give plain sampling's joint."""
    counts = sample_counts(params, lambda seed: BranchyDrafter(), tree_budget=8)
    p = chi2_pvalue(counts, exact_joint(params))
    assert p > PASS, f"token trees: first 3 tokens differ from plain sampling (p = {p:.2e})"


# slow (N plain requests): the fast suite's ngram case above checks the same oracle
# (exact_joint) against the engine's output; the full run keeps this check of the check
@pytest.mark.slow
def test_plain_sampling_matches_the_oracle_and_the_test_has_power():
    """The oracle is right (plain sampling agrees with it), and N samples tell it apart
    from the joint at a nearby temperature."""
    counts = sample_counts(T1, lambda seed: None)
    assert chi2_pvalue(counts, exact_joint(T1)) > PASS
    assert chi2_pvalue(counts, exact_joint(SamplingParams(temperature=0.7))) < FAIL


@pytest.mark.slow  # with the power check of plain sampling above: the full run's
def test_a_drafter_misreporting_q_is_caught():
    """The same end-to-end test with a wrong acceptance ratio (a drafter whose q is not the
    distribution of its drafts) must fail."""
    counts = sample_counts(T1, lambda seed: GreedyDraftsSoftmaxQ(model(1), temperature=1.0, seed=seed))
    assert chi2_pvalue(counts, exact_joint(T1)) < FAIL


class Fed:
    """The target model, recording the largest token id it is fed (delegates the rest)."""

    def __init__(self, m):
        self.m, self.max_id = m, -1

    def __getattr__(self, name):
        return getattr(self.m, name)

    def __call__(self, x, cache=None):
        self.max_id = max(self.max_id, mx.max(x).item())
        return self.m(x, cache=cache)


def test_a_wider_draft_vocabulary_never_reaches_the_target():
    """A draft model with a padded vocabulary samples ids the target has no embedding
    for: they must be rejected without being fed (``steps.in_vocab``)."""
    target = Fed(model(0))
    for seed in range(50):
        drafter = DraftModelDrafter(model(2, V + 4), temperature=1.0, seed=seed)
        list(token_stream(target, PROMPT, drafter=drafter, max_tokens=3, num_draft_tokens=K,
                          sampling=SamplingParams(temperature=1.0, seed=seed)))
    assert target.max_id < V, f"the target (vocabulary {V}) was fed id {target.max_id}"
