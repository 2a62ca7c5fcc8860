"""The draft-model drafter: parity with plain greedy decoding, draft-cache bookkeeping,
vocabulary checks and the sampling interface (the proposal's ``q``), on real (tiny random
and packaged) models.

Tiny models: the target is ``tiny_model(arch, 0)``; a "near" draft is the same weights plus
small noise, so drafts are sometimes fully accepted and sometimes rejected part-way (both
rollback paths run); a "far" draft has unrelated weights, so almost everything is
rejected. gemma3's sliding window is 8 tokens, far shorter than prompt + output.
"""

import random

import mlx.core as mx
import numpy as np
import pytest
from conftest import (SHARED_TOKENS, TINY_VOCAB, assert_stats_speculated, cached_tiny, plain_reference,
                      real_model, requires_model, tiny_model)
from mlx.utils import tree_map

from specdec.drafters.draft_model import DraftModelDrafter, check_tokenizers_match
from specdec.engine import generate, token_stream
from specdec.core.stats import SpecStats

ARCHS = ["llama", "qwen2", "gemma3"]
_refs: dict = {}
_near: dict = {}


def run(model, prompt, drafter=None, max_tokens=40, stats=None, **kw):
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens,
                                          stats=stats, **kw)]


def plain(arch, prompt, max_tokens=40):
    key = (arch, tuple(prompt), max_tokens)
    if key not in _refs:
        _refs[key] = run(cached_tiny(arch), prompt, max_tokens=max_tokens)
    return _refs[key]


def near_draft(arch, noise=0.02):
    """The target's weights plus seeded noise (explicit key: no global random state)."""
    if (arch, noise) not in _near:
        m = tiny_model(arch, 0)
        key = [mx.random.key(5)]

        def perturb(p):
            key[0], sub = mx.random.split(key[0])
            return p + noise * mx.random.normal(p.shape, key=sub)

        m.update(tree_map(perturb, m.parameters()))
        mx.eval(m.parameters())
        _near[(arch, noise)] = m
    return _near[(arch, noise)]


def prompt_of(seed, length=20):
    rng = random.Random(seed)
    return [rng.randrange(TINY_VOCAB) for _ in range(length)]


def assert_bookkeeping(drafter):
    """The draft cache holds exactly ``cached_tokens``: every layer's offset agrees."""
    n = len(drafter.cached_tokens)
    assert all(c.offset == n for c in drafter.cache)


# ---- greedy parity on tiny models -------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_self_draft_is_fully_accepted(arch):
    target = cached_tiny(arch)
    prompt = prompt_of(1)
    stats = SpecStats()
    drafter = DraftModelDrafter(target)  # same weights, its own cache
    assert run(target, prompt, drafter, stats=stats) == plain(arch, prompt)
    assert stats.acceptance_rate == 1.0 and stats.drafted > 0
    assert drafter.stats["accepted"] == drafter.stats["drafted"] == stats.drafted
    assert_bookkeeping(drafter)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_near_draft_parity_with_partial_acceptance(arch, k):
    accepted = drafted = full = 0
    for seed in range(3):
        prompt, stats = prompt_of(seed), SpecStats()  # stats are per request
        drafter = DraftModelDrafter(near_draft(arch))
        out = run(cached_tiny(arch), prompt, drafter, num_draft_tokens=k, stats=stats)
        assert out == plain(arch, prompt)
        assert_bookkeeping(drafter)
        accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
        full += stats.accepted_by_position[k - 1]
    # Both rollback paths ran: some proposals fully accepted, some rejected part-way.
    assert 0 < accepted < drafted and full > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_far_draft_parity_with_rejections(arch):
    stats = SpecStats()
    prompt = prompt_of(2)
    out = run(cached_tiny(arch), prompt, DraftModelDrafter(tiny_model(arch, seed=7)), stats=stats)
    assert out == plain(arch, prompt)
    # an unrelated draft is rejected (nearly) always: rollback of whole drafts; the near
    # draft tests cover partial acceptance
    assert stats.drafted > 0 and stats.accepted < stats.drafted


@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_prefill_and_long_drafts(arch):
    # A 4-token prefill chunk splits the prompt; k=9 exceeds max_trim=2, so window caches
    # must be rebuilt with enough rollback slack.
    prompt = prompt_of(3, length=30)
    drafter, stats = DraftModelDrafter(near_draft(arch), prefill_step_size=4, max_trim=2), SpecStats()
    assert run(cached_tiny(arch), prompt, drafter, num_draft_tokens=9, stats=stats) == plain(arch, prompt)
    assert_stats_speculated(stats, arch)
    assert_bookkeeping(drafter)


@pytest.mark.parametrize("arch", ARCHS)
def test_consecutive_requests_reuse_or_rebuild_the_cache(arch):
    target, drafter = cached_tiny(arch), DraftModelDrafter(near_draft(arch))
    p1, p2 = prompt_of(10), prompt_of(11)
    assert p1[0] != p2[0]
    out1 = run(target, p1, drafter)
    assert out1 == plain(arch, p1) and drafter.stats["rebuilds"] == 1
    # Nothing shared: a new request, a fresh cache. It runs long enough (160 tokens) for
    # gemma3's window caches to drop positions far behind their window.
    out2 = run(target, p2, drafter, max_tokens=160)
    assert out2 == plain(arch, p2, 160) and drafter.stats["rebuilds"] == 2
    # A follow-up turn extends request 2. Full-attention caches roll back to the shared
    # prefix and feed only the rest; a window cache has dropped that prefix (its trim is
    # refused) and rebuilds.
    p3 = p2 + out2[:12] + prompt_of(12, 5)
    fed = drafter.stats["fed"]
    assert run(target, p3, drafter) == plain(arch, p3)
    windowed = arch == "gemma3"
    assert drafter.stats["rebuilds"] == (3 if windowed else 2)
    fresh = DraftModelDrafter(near_draft(arch))
    run(target, p3, fresh)
    reused = drafter.stats["fed"] - fed
    assert reused == fresh.stats["fed"] if windowed else reused <= fresh.stats["fed"] - len(p2) - 12
    # The same prompt again (rolls back past the whole output), then the first one.
    assert run(target, p3, drafter) == plain(arch, p3)
    assert run(target, p1, drafter) == out1
    assert_bookkeeping(drafter)


def test_cache_holds_context_plus_all_but_the_last_draft_token():
    drafter = DraftModelDrafter(near_draft("llama"))
    ctx = prompt_of(4)
    drafter.begin(ctx)
    draft = list(drafter.propose(ctx, 4).tokens)
    assert len(draft) == 4 and drafter.cached_tokens == ctx + draft[:-1]
    assert_bookkeeping(drafter)
    # Target accepts 2 and corrects the third: the next propose trims the rejected tail.
    drafter.observe(2)
    ctx2 = ctx + draft[:2] + [(draft[2] + 1) % TINY_VOCAB]
    draft2 = list(drafter.propose(ctx2, 3).tokens)
    assert drafter.cached_tokens == ctx2 + draft2[:-1] and drafter.stats["rebuilds"] == 1
    assert_bookkeeping(drafter)
    # Target accepts everything: the unfed last draft token and the bonus are fed together.
    drafter.observe(3)
    ctx3 = ctx2 + draft2 + [1]
    drafter.propose(ctx3, 2)
    assert drafter.cached_tokens[: len(ctx3)] == ctx3 and drafter.stats["rebuilds"] == 1
    assert_bookkeeping(drafter)
    with pytest.raises(ValueError, match="accepted 3 of a 2-token proposal"):
        drafter.observe(3)
    assert not drafter.propose(ctx3, 0) and not drafter.propose([], 3)


def test_recurrent_draft_rolls_back_exactly():
    """A recurrent draft (mamba, whose layers do not count positions) rolls back by marks
    (``cache.marks``); hybrid drafts in depth: ``test_hybrid_draft``. A cache that cannot
    roll back at all (attention sinks) is still refused at construction."""
    from mlx_lm.models import mamba
    from mlx_lm.models.cache import RotatingKVCache

    from specdec.cache.rollback import UnsupportedCacheError

    draft = mamba.Model(mamba.ModelArgs(
        model_type="mamba", vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64,
        state_size=4, num_hidden_layers=1, conv_kernel=4, use_bias=False, use_conv_bias=True,
        time_step_rank=4))
    prompt, stats = prompt_of(5), SpecStats()
    assert run(cached_tiny("llama"), prompt, DraftModelDrafter(draft), stats=stats) == plain("llama", prompt)
    assert stats.drafted > 0

    class Sinks:
        def make_cache(self):
            return [RotatingKVCache(max_size=8, keep=4)]

    with pytest.raises(UnsupportedCacheError, match="keep=4"):
        DraftModelDrafter(Sinks())


# ---- sampling interface -----------------------------------------------------------------
def test_q_rows_are_distributions_and_sampling_is_seeded():
    model = cached_tiny("qwen2")
    contexts = [prompt_of(5), prompt_of(5) + [3, 4], prompt_of(6)]

    def drafts(seed, global_seed):
        mx.random.seed(global_seed)  # the drafter must not depend on global random state
        d = DraftModelDrafter(model, temperature=0.8, seed=seed)
        out = []
        for i, ctx in enumerate(contexts):
            if i != 1:  # contexts[1] continues contexts[0]; the others start a request
                d.begin(ctx)
            proposal = d.propose(ctx, 5)
            toks, q = list(proposal.tokens), np.array(proposal.q)
            assert q.shape == (5, TINY_VOCAB)
            np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-5)
            assert all(q[i, t] > 0 for i, t in enumerate(toks))
            out.append((toks, q))
        return out

    a, b, c = drafts(3, 0), drafts(3, 1), drafts(4, 0)
    for (ta, qa), (tb, qb) in zip(a, b):
        assert ta == tb
        np.testing.assert_array_equal(qa, qb)
    assert [t for t, _ in a] != [t for t, _ in c]
    greedy = DraftModelDrafter(model)
    assert greedy.propose(contexts[0], 5).q is None


def test_sampled_first_token_follows_q():
    model = cached_tiny("llama")
    d = DraftModelDrafter(model, temperature=1.5, seed=0)
    ctx, counts, n = prompt_of(8), np.zeros(TINY_VOCAB), 600
    d.begin(ctx)
    for _ in range(n):
        proposal = d.propose(ctx, 1)
        counts[proposal.tokens[0]] += 1
    q = np.array(proposal.q[0])
    assert d.stats["rebuilds"] == 1  # the same context reuses the cache every time
    # Every token's frequency within 4 binomial standard deviations of q (seeded: no flake).
    assert (np.abs(counts / n - q) <= 4 * np.sqrt(q * (1 - q) / n) + 1 / n).all()


def test_sampling_drafter_keeps_greedy_parity():
    # A greedy target stays exact whatever the draft proposes.
    prompt = prompt_of(9)
    drafter, stats = DraftModelDrafter(near_draft("gemma3"), temperature=1.0, seed=1), SpecStats()
    assert run(cached_tiny("gemma3"), prompt, drafter, stats=stats) == plain("gemma3", prompt)
    assert_stats_speculated(stats, "sampling draft")


# ---- vocabulary checks and real models --------------------------------------------------
@pytest.mark.slow
def test_tokenizer_mismatch_is_refused():
    qwen, qtok = real_model("qwen2.5-coder-0.5b")
    _, stok = real_model("smollm2-135m")
    msg = r"sizes differ \(target 49152, draft 151936\).*first difference at id 0"
    with pytest.raises(ValueError, match=msg):
        DraftModelDrafter(qwen, target_tokenizer=stok, draft_tokenizer=qtok)
    check_tokenizers_match(qtok, qtok)
    # Same tokenizer but a draft with too few vocabulary rows to score every token.
    with pytest.raises(ValueError, match="64 vocabulary rows"):
        DraftModelDrafter(cached_tiny("llama"), target_tokenizer=stok, draft_tokenizer=stok)


@pytest.mark.slow
def test_qwen05_drafting_for_itself_equals_plain_decoding():
    model, tok = real_model("qwen2.5-coder-0.5b")
    prompt = "Write a Python function that returns the square of x."
    # 12 tokens: a full block of the default k (8) and a cut one; 24 decoded the 0.5B twice as long
    ref = generate(model, tok, prompt, drafter=None, max_tokens=12)
    drafter = DraftModelDrafter(model, target_tokenizer=tok, draft_tokenizer=tok)
    out = generate(model, tok, prompt, drafter=drafter, max_tokens=12)
    assert out.tokens == ref.tokens and out.text == ref.text  # token for token, full length
    assert out.stats.acceptance_rate == 1.0 and out.stats.drafted > 0


@pytest.mark.slow
def test_a_disagreeing_real_draft_is_rejected_often_and_output_stays_plain():
    """SmolLM2 target, a perturbed copy of SmolLM2 as the draft (seeded noise on every
    attention weight): the two disagree often, so verification rejects and rolls back; the
    output is still the target's plain greedy decoding, token for token."""
    from specdec.loader import load
    from specdec.prompts import parity_prompts

    model, tok = real_model("smollm2-135m")
    draft, dtok = load("smollm2-135m")  # a second copy: its weights are changed below
    key = [mx.random.key(11)]

    def perturb(p):
        key[0], sub = mx.random.split(key[0])
        return p + 0.25 * p.std() * mx.random.normal(p.shape, key=sub) if p.ndim > 1 else p

    # attention only: noise on all 135M weights cost 7 CPU s, on the 26M attention weights 1.2
    for layer in draft.model.layers:
        layer.self_attn.update(tree_map(perturb, layer.self_attn.parameters()))
    mx.eval(draft.parameters())
    # open_story (39 tokens), not demo_colorsys (476): each model's prefill is one forward
    # of the prompt, and k 2, not the default 8: a rejected draft wastes k draft forwards.
    # Measured: 12 of 13 steps reject, 3 drafts accepted in 16 tokens (CPU 26 s -> 6.5 s).
    prompt = parity_prompts()["open_story"]
    # the reference: the first 16 tokens of the session's shared 48-token one (tests/parity's)
    ref = plain_reference("smollm2-135m", prompt, SHARED_TOKENS)
    drafter = DraftModelDrafter(draft, target_tokenizer=tok, draft_tokenizer=dtok)
    out = generate(model, tok, prompt, drafter=drafter, max_tokens=16, num_draft_tokens=2)
    assert out.tokens == ref.tokens[:16] and ref.text.startswith(out.text) and out.text
    rejected_steps = sum(1 for fed, acc in out.steps if acc < fed - 1)
    assert out.stats.accepted > 0 and rejected_steps >= 3, out.steps
    del draft, drafter
    mx.clear_cache()


@pytest.mark.slow
@requires_model("qwen2.5-coder-1.5b")
def test_qwen_05b_drafts_for_15b_with_greedy_parity():
    target, ttok = real_model("qwen2.5-coder-1.5b")
    draft, dtok = real_model("qwen2.5-coder-0.5b")
    drafter = DraftModelDrafter(draft, target_tokenizer=ttok, draft_tokenizer=dtok)
    # A prompt on which the two models part ways now and then (about 60 % accepted), so
    # real rejections and rollbacks happen; on code-copying prompts they agree throughout.
    prompt = "What is 17 times 23? Explain step by step."
    ref = generate(target, ttok, prompt, drafter=None, max_tokens=40)
    out = generate(target, ttok, prompt, drafter=drafter, max_tokens=40)
    assert out.tokens == ref.tokens and out.text == ref.text
    assert 0 < out.stats.accepted < out.stats.drafted
