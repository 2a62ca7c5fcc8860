"""Position-keyed seeded sampling (issue #24 part 4): with a seed, the token at output
position t is plain sampling's draw with the key of position t, so speculative output is
token-identical to plain seeded sampling whatever the drafter, its history, the batch or
the tree; and the draw is a sample of the processed distribution (chi-square over seeds
against a brute-force oracle on a small vocabulary)."""

import mlx.core as mx
import numpy as np
import pytest
from conftest import TINY_VOCAB, assert_speculated, cached_tiny, repetitive_prompt
from scipy.stats import chisquare
from decode.test_batch import run_batch
from drafters.test_draft_model import near_draft
from decode.test_tree_attention import TruthTreeDrafter

from specdec.core.proposal import Proposal
from specdec.core.sampling import PositionKeys, Rng, SamplingParams, draw_token
from specdec.core.stats import SpecStats
from specdec.decode.step import SeededSampler, sampler_for
from specdec.drafters import NgramDrafter
from specdec.drafters.draft_model import DraftModelDrafter
from specdec.drafters.suffix import SuffixDrafter, SuffixHistory
from specdec.engine import token_stream

PARAMS = [dict(temperature=0.6), dict(temperature=0.9, top_p=0.9, top_k=20), dict(temperature=0.5, min_p=0.1)]


def run(model, prompt, params, drafter=None, max_tokens=40, **kw):
    log = []
    out = [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens,
                                         sampling=params, step_log=log, **kw)]
    return out, log


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_seeded_output_equals_plain_for_every_drafter(arch):
    """ngram, suffix (with a history that changes between requests), a draft model with
    its own sampling, and token trees around the plain output: every seeded run equals
    plain seeded sampling (``draft_type: none``) token for token."""
    model, draft, logs, trees = cached_tiny(arch), near_draft(arch), {}, []
    history = SuffixHistory()
    for i, kw in enumerate(PARAMS):
        params = SamplingParams(seed=11 + i, **kw)
        prompt = repetitive_prompt(i, 40)
        ref, _ = run(model, prompt, params)
        other, _ = run(model, prompt, SamplingParams(seed=99, **kw))
        assert ref != other  # the seed matters: it really sampled
        drafters = {
            "ngram": (NgramDrafter(1, 3), {}),
            "suffix": (SuffixDrafter(history=history), {}),
            "draft model": (DraftModelDrafter(draft, temperature=kw["temperature"], seed=3), {}),
            "tree": (TruthTreeDrafter(ref, TINY_VOCAB, seed=i), {"tree_budget": 8}),
        }
        trees.append(drafters["tree"][0])
        for name, (drafter, extra) in drafters.items():
            out, log = run(model, prompt, params, drafter, num_draft_tokens=4, **extra)
            assert out == ref, (arch, name, kw)
            logs.setdefault(name, []).append(log)
        history.add(other)  # the next request's suffix drafts change: its output must not
        history.add(ref)
    for name, runs in logs.items():
        assert_speculated(*runs, what=f"seeded {arch} {name}")
    # trees really branched: steps accepted a non-first child (its row keyed by its depth)
    assert sum(d.trees for d in trees) and sum(d.non_first for d in trees) and sum(d.misses for d in trees)


def test_seeded_rows_in_a_batch_equal_plain_alone():
    """Batched rows (speculative and plain, seeded, with an unseeded row beside them)
    each give plain seeded sampling's tokens."""
    model = cached_tiny("llama")
    params = [SamplingParams(temperature=0.7, seed=s) for s in (3, 4, 5)]
    reqs = [(0, repetitive_prompt(10, 30), "ngram", 24, params[0]),
            (0, repetitive_prompt(11, 20), "suffix", 24, params[1]),
            (1, repetitive_prompt(12, 25), "none", 20, params[2]),
            (2, repetitive_prompt(13, 30), "ngram", 10, SamplingParams(temperature=0.7))]
    got, blocks = run_batch(model, reqs, lambda n: 1.0)
    assert max(blocks) > 1  # rows speculated in the batch
    for (_, prompt, _, m, p), toks in zip(reqs[:3], got):
        assert toks == run(model, prompt, p, max_tokens=m)[0]


def test_seeded_sampler_keys_rows_by_depth_and_counts_positions():
    """Row r of a tree is drawn with the key of its node's depth; after a step the
    sampler's position advances by what it emitted, and released keys are refused."""
    params, logits = SamplingParams(temperature=1.0, seed=1), mx.random.normal((4, 16), key=mx.random.key(0))
    tree = Proposal([3, 4, 5], parents=(-1, -1, 0))  # depths 1, 1, 2
    sampler = sampler_for(params, Rng(1), speculative=True)
    assert isinstance(sampler, SeededSampler)
    recovered = sampler.decide(logits, tree)[0].tolist()
    keys = PositionKeys(Rng(1))
    want = [draw_token(logits[r], params, keys.at(d)).item() for r, d in enumerate([0, 1, 1, 2])]
    assert recovered == want
    path, emitted = sampler.resolve(tree, [recovered])
    assert sampler.position == len(emitted)
    with pytest.raises(ValueError, match="released"):
        sampler.keys.at(0)



def test_a_coupled_draft_model_draws_with_the_targets_noise():
    """A seeded request's draft model (``coupled``, as ``build_drafter`` makes it with a
    seed) draws output position t with the target's key of t: a draft equal to the target
    then has every draft accepted, and a near one far more than with its own keys; the
    output is plain seeded sampling's either way."""
    from drafters.test_draft_model import near_draft as near

    model, params = cached_tiny("llama"), SamplingParams(temperature=0.8, seed=4)
    rates = {}
    for name, draft, coupled in (("same", near("llama", 0.0), True), ("near", near("llama"), True),
                                 ("near, own keys", near("llama"), False)):
        drafted = accepted = 0
        for i in range(3):
            prompt, stats = repetitive_prompt(i, 30), SpecStats()
            ref, _ = run(model, prompt, params, max_tokens=32)
            drafter = DraftModelDrafter(draft, temperature=0.8, seed=4, coupled=coupled)
            out, _ = run(model, prompt, params, drafter, max_tokens=32, num_draft_tokens=4, stats=stats)
            assert out == ref, name
            drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
        rates[name] = accepted / drafted
    assert rates["same"] == 1.0
    assert rates["near"] > 3 * rates["near, own keys"], rates


# ---- the distribution: chi-square over seeds against a brute-force oracle --------------
LOGITS = np.log(np.array([0.30, 0.22, 0.16, 0.12, 0.09, 0.06, 0.03, 0.02], np.float64))
ORACLE_PARAMS = [dict(temperature=1.0), dict(temperature=0.7, top_p=0.75),
                 dict(temperature=1.3, top_k=5), dict(temperature=0.9, min_p=0.25)]


def oracle(logits, temperature, top_p=1.0, top_k=0, min_p=0.0):
    """The processed distribution by brute force (no ties here): mlx-lm's top-p keeps the
    most likely tokens until their mass reaches top_p, min-p those at least min_p times
    the most likely, top-k the k most likely; then softmax(log p / T) over what is kept."""
    p = np.exp(logits - np.logaddexp.reduce(logits))
    order = np.argsort(-p)
    keep = np.ones_like(p, bool)
    if top_p < 1:
        mass = np.cumsum(p[order])
        keep[order[np.searchsorted(mass, top_p - 1e-12) + 1:]] = False
    if min_p > 0:
        keep &= p >= min_p * p.max()
    if top_k:
        keep[order[top_k:]] = False
    w = np.where(keep, np.exp(np.log(p) / temperature), 0.0)
    return w / w.sum()


@pytest.mark.parametrize("kw", ORACLE_PARAMS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_seeded_draws_over_seeds_follow_the_processed_distribution(kw):
    """Over 3000 seeds, the first two output tokens of a speculative step (a linear draft
    whose first token is the likeliest) follow the oracle: the first exactly, the second
    given the first was accepted; and the test has power (the unprocessed distribution
    fails it where the processing changes anything)."""
    n, draft = 3000, Proposal([0])
    logits = mx.array(np.stack([LOGITS, LOGITS[::-1].copy()]).astype(np.float32))
    firsts, seconds = [], []
    for seed in range(n):
        params = SamplingParams(seed=seed, **kw)
        s = SeededSampler(params, Rng(seed))
        _, emitted = s.resolve(draft, [a.tolist() for a in s.decide(logits, draft)])
        firsts.append(emitted[0])
        if len(emitted) > 1:
            seconds.append(emitted[1])
    for got, row in ((firsts, LOGITS), (seconds, LOGITS[::-1].copy())):
        want = oracle(row, **kw)
        support = np.nonzero(want)[0]
        counts = np.bincount(got, minlength=len(row))
        assert counts[want == 0].sum() == 0
        assert chisquare(counts[support], want[support] / want.sum() * len(got)).pvalue > 1e-3
    raw = oracle(LOGITS, 1.0)
    if kw != dict(temperature=1.0):
        assert chisquare(np.bincount(firsts, minlength=8), raw * n).pvalue < 1e-6


def test_plain_draw_is_the_gumbel_argmax_of_its_key():
    """The premise that makes any drafter's accepted token plain sampling's: mlx's
    categorical is argmax(logits + Gumbel noise of its key), so a position's draw is a
    function of (key, distribution) alone."""
    x = mx.log(mx.softmax(mx.random.normal((50,), key=mx.random.key(1)) * 3))
    for s in range(50):
        k = mx.random.key(s)
        assert mx.random.categorical(x, key=k).item() == mx.argmax(x + mx.random.gumbel(shape=(50,), key=k)).item()


@pytest.mark.slow  # SmolLM2, 5 short generations (~10 s alone, more on a loaded machine)
def test_library_seeded_text_is_the_same_for_every_drafter(smollm):
    """``specdec.generate`` and ``stream_generate`` on SmolLM2: one text per seed whatever
    the drafter (a text the answer copies, so drafts are accepted)."""
    from specdec import generate

    model, tok = smollm
    prompt = "def area(w, h):\n    return w * h\n\n" * 4 + "def volume(w, h, d):\n"
    kw = dict(max_tokens=24, temperature=0.7, top_p=0.95, seed=5, chat=False)
    from specdec import DraftSpec

    ref = generate(model, tok, prompt, drafter=None, **kw)
    for drafter in ("ngram", "suffix"):  # drafting every step (ungated), so drafts are verified
        out = generate(model, tok, prompt, drafter=DraftSpec(drafter, num_draft_tokens=4, gate=False), **kw)
        assert out.tokens == ref.tokens, drafter
        # generate joins stream_generate's texts (engine.collect): the streamed text, checked
        # here rather than by a sixth generation (a streamed ngram run, ~3 CPU s)
        assert out.text == ref.text, drafter
        assert out.stats.accepted > 0, drafter
    # the defaults (suffix under the cost gate: plain stretches and drafts) give the same text
    assert generate(model, tok, prompt, **kw).tokens == ref.tokens
    assert generate(model, tok, prompt, drafter=None, **{**kw, "seed": 6}).tokens != ref.tokens
