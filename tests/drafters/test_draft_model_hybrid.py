"""Draft models with recurrent layers (issue #35): tiny random-weight hybrid and SSM drafts
(``hybrid_tiny``) drafting for a target of the same family (itself: full acceptance; its
weights plus noise: partial acceptance; other weights: rejection at position 0), for an
attention-only target and beside one, against plain decoding.

What is checked: greedy parity for sampled k in 1..8; self-draft acceptance; the draft's
cache after a roll-back equal array for array to one fed the kept tokens one at a time;
a stop inside a block; follow-up prompts (back to the prompt's mark, or rebuilt); seeded
sampling with a coupled draft; chains, token trees and the batcher (the CLI and the server:
test_draft_model_hybrid_serve.py).
"""


import mlx.core as mx
import pytest
from conftest import cached_tiny
from hybrid_tiny import VOCAB, build, cached
from mlx.utils import tree_map
from cache.test_recurrent import _arrays

from specdec.cache.recurrent import RecurrentCache
from specdec.cache.rollback import make_cache, prefill
from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.drafters.draft_model import DraftModelDrafter
from specdec.drafters.spec import DraftResources, DraftSpec, build_drafter
from specdec.engine import token_stream

ARCHS = ["lfm2", "qwen3_next", "qwen3_5", "mamba2"]
PROMPT = [(7 * i) % 13 + 3 for i in range(6)] * 4
N = 24
_plain: dict = {}
_near: dict = {}


def run(model, prompt=PROMPT, drafter=None, max_tokens=N, **kw):
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens, **kw)]


def plain(model, prompt=PROMPT, max_tokens=N, **kw):
    key = (id(model), tuple(prompt), max_tokens, repr(sorted(kw.items())))
    if key not in _plain:
        _plain[key] = run(model, prompt, None, max_tokens, **kw)
    return _plain[key]


def near(arch, noise=0.02):
    """The target's weights plus seeded noise: drafts accepted in part, often in full."""
    if arch not in _near:
        m, key = build(arch, 0), [mx.random.key(5)]

        def perturb(p):
            key[0], sub = mx.random.split(key[0])
            return p + noise * mx.random.normal(p.shape, key=sub)

        m.update(tree_map(perturb, m.parameters()))
        mx.eval(m.parameters())
        _near[arch] = m
    return _near[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_self_draft_is_accepted(arch):
    stats, drafter = SpecStats(), DraftModelDrafter(cached(arch))
    assert run(cached(arch), drafter=drafter, num_draft_tokens=5, stats=stats) == plain(cached(arch))
    assert isinstance(drafter.cache, RecurrentCache)
    assert stats.drafted > 0 and stats.acceptance_rate > 0.9
    assert drafter.stats["rebuilds"] == 1


@pytest.mark.parametrize("arch,ks", [("lfm2", (1, 4, 8)), ("qwen3_next", (2, 7)),
                                     ("qwen3_5", (3, 6)), ("mamba2", (1, 5, 8))])
def test_parity_partial_and_rejected(arch, ks):
    """A near draft (partial and full acceptance: every roll-back length) and an unrelated
    one (rejected at position 0 nearly always) both leave the output plain."""
    target = cached(arch)
    for k in ks:
        s_near, s_far = SpecStats(), SpecStats()
        assert run(target, drafter=DraftModelDrafter(near(arch)), num_draft_tokens=k,
                   stats=s_near) == plain(target), (arch, k)
        assert 0 < s_near.accepted < s_near.drafted
        assert run(target, drafter=DraftModelDrafter(cached(arch, 1)), num_draft_tokens=k,
                   stats=s_far) == plain(target), (arch, k)
        assert s_far.accepted_by_position[0] < s_far.drafted_by_position[0]


def _fed_one_at_a_time(model, prompt, tokens):
    """A cache fed ``prompt[:-1]`` as the drafter prefills it, then ``tokens`` one by one."""
    ref = make_cache(model, recurrent=True)
    prefill(model, ref, prompt[:-1])
    for t in tokens:
        model(mx.array([[t]]), cache=ref)
    return ref


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("accept", [0, 2, "all"])
def test_restored_state_equals_feeding_the_accepted_tokens(arch, accept):
    """After a 4-token proposal of which the target accepts ``accept`` (then its own
    token), the draft's roll-back leaves every layer's arrays equal to a cache fed the
    accepted tokens one at a time (the drafter fed them so: bit for bit); after the next
    proposal too (its first block holds 1 or 2 tokens: close, not bitwise)."""
    model = near(arch)
    drafter = DraftModelDrafter(model)
    drafter.begin(PROMPT)
    draft = list(drafter.propose(PROMPT, 4).tokens)
    a = 4 if accept == "all" else accept
    ctx = PROMPT + draft[:a] + [(draft[a] + 1) % VOCAB if a < 4 else 7]
    keep = drafter.sync(ctx, 4)  # the roll-back the next propose starts with
    assert keep == len(PROMPT) + min(a, 3) == len(drafter.cached_tokens)
    ref = _fed_one_at_a_time(model, PROMPT, [PROMPT[-1], *draft[:min(a, 3)]])
    assert drafter.cache.positions() == ref.positions() == {keep}
    for x, y in zip(_arrays(drafter.cache), _arrays(ref), strict=True):
        assert mx.array_equal(x, y).item()
    draft2 = list(drafter.propose(ctx, 3).tokens)
    ref = _fed_one_at_a_time(model, PROMPT, (ctx + draft2[:-1])[len(PROMPT) - 1:])
    assert drafter.cached_tokens == ctx + draft2[:-1]
    for x, y in zip(_arrays(drafter.cache), _arrays(ref), strict=True):
        assert x.shape == y.shape and mx.allclose(x, y, atol=1e-4, rtol=1e-4).item()
    assert drafter.stats["rebuilds"] == 1


@pytest.mark.parametrize("arch", ["lfm2", "mamba2"])
def test_stop_inside_a_block_then_follow_up_prompts(arch):
    """An EOS inside an accepted block ends the request; the same drafter then serves a
    follow-up prompt that shares the first prompt (back to its mark: no rebuild, fewer
    tokens fed) and one that diverges inside it (rebuilt: a recurrent state cannot be
    trimmed), each equal to plain decoding."""
    target, drafter = cached(arch), DraftModelDrafter(cached(arch))
    truth = plain(target)
    stop = next(i for i in range(3, N) if truth[i] not in truth[:i])
    out = run(target, drafter=drafter, num_draft_tokens=8, eos={truth[stop]})
    assert out == truth[:stop]
    follow = PROMPT + out[:2] + [1, 2]
    fed = drafter.stats["fed"]
    assert run(target, follow, drafter, num_draft_tokens=4) == plain(target, follow)
    assert drafter.stats["rebuilds"] == 1 and drafter.stats["fed"] - fed < len(follow)
    other = PROMPT[:5] + [1, 2, 3]
    assert run(target, other, drafter, num_draft_tokens=4) == plain(target, other)
    assert drafter.stats["rebuilds"] == 2


@pytest.mark.parametrize("arch", ["lfm2", "qwen3_5"])
def test_seeded_sampling_with_a_coupled_draft(arch):
    """A seeded request's draft model (``build_drafter``: coupled to the request's keys)
    leaves the output equal to plain seeded sampling; drafting for itself it is always
    accepted (the same draws); an uncoupled sampling draft is exact too."""
    target = cached(arch)
    spec = DraftSpec("model", draft_model="tiny", num_draft_tokens=4, gate=False)
    for seed in (3, 4):
        sp = SamplingParams(temperature=0.8, seed=seed)
        ref = plain(target, sampling=sp)
        for draft in (target, near(arch)):
            stats = SpecStats()
            drafter = build_drafter(spec, DraftResources(draft=(draft, None)), temperature=0.8, seed=seed)
            assert run(target, drafter=drafter, sampling=sp, stats=stats) == ref
            assert stats.drafted > 0 and (draft is not target or stats.acceptance_rate == 1.0)
        loose = DraftModelDrafter(near(arch), temperature=0.8, seed=9)
        assert run(target, drafter=loose, sampling=sp) == ref


def test_chain_model_suffix_on_a_hybrid_pair():
    target = cached("qwen3_next")
    spec = DraftSpec("model,suffix", draft_model="tiny", num_draft_tokens=5, gate=False)
    stats = SpecStats()
    drafter = build_drafter(spec, DraftResources(draft=(near("qwen3_next"), None)))
    assert run(target, drafter=drafter, num_draft_tokens=5, stats=stats) == plain(target)
    assert stats.accepted > 0


@pytest.mark.parametrize("arch", ["lfm2", "qwen3_5", "mamba2"])
def test_attention_target_with_a_hybrid_draft_and_trees(arch):
    """A llama target (same 64 ids) drafted for by a hybrid model: linear drafts and token
    trees (the draft's chain plus its top alternatives; the chain rolls back by marks)."""
    target = cached_tiny("llama")
    for tree in (0, 6):
        stats = SpecStats()
        out = run(target, drafter=DraftModelDrafter(cached(arch)), num_draft_tokens=4,
                  tree_budget=tree, stats=stats)
        assert out == plain(target) and stats.drafted > 0


def test_batch_rows_each_with_a_hybrid_draft(monkeypatch):
    """The batcher drafts row by row, each row's draft model with its own cache: several
    rows of an attention target, each drafted for by a hybrid model, equal decoding alone."""
    from decode import test_batch
    from conftest import repetitive_prompt

    monkeypatch.setitem(test_batch.DRAFTERS, "hybrid", lambda: DraftModelDrafter(cached("lfm2")))
    model = cached_tiny("llama")
    reqs = [(j, repetitive_prompt(s, 20 + 5 * s), "hybrid", 12, SamplingParams())
            for j, s in ((0, 0), (0, 1), (2, 2))]
    got, blocks = test_batch.run_batch(model, reqs, lambda n: 1.0)
    assert [g for g in got] == [plain(model, p, m) for _, p, _, m, _ in reqs]
    assert max(blocks) > 1


@pytest.mark.parametrize("arch", ["qwen3_next", "mamba2"])
def test_hybrid_target_with_an_attention_draft(arch):
    stats = SpecStats()
    out = run(cached(arch), drafter=DraftModelDrafter(cached_tiny("llama")), num_draft_tokens=6,
              stats=stats)
    assert out == plain(cached(arch)) and stats.drafted > 0


def test_negative_control_marks_that_keep_the_recurrent_state_diverge(monkeypatch):
    """A roll-back that trims only the draft's attention layers (its recurrent states keep
    the rejected drafts) changes what it drafts: the restored-state test would see it,
    and the draft's proposals differ from a fresh drafter's on the same context."""
    from specdec.cache.marks import StepMarks

    def attention_only(self, position, at):
        for c in self.cache.attention:
            c.trim(at - position)
        return position

    model, prompt = near("lfm2"), PROMPT
    honest = DraftModelDrafter(model)
    honest.begin(prompt)
    draft = list(honest.propose(prompt, 4).tokens)
    ctx = prompt + [(draft[0] + 1) % VOCAB]  # rejected at position 0
    want = list(honest.propose(ctx, 4).tokens)
    monkeypatch.setattr(StepMarks, "back_to", attention_only)
    broken = DraftModelDrafter(model)
    broken.begin(prompt)
    assert list(broken.propose(prompt, 4).tokens) == draft
    assert list(broken.propose(ctx, 4).tokens) != want


def test_a_hybrid_target_refuses_trees_from_a_hybrid_draft():
    with pytest.raises(ValueError, match="recurrent layers"):
        run(cached("lfm2"), drafter=DraftModelDrafter(cached("lfm2")), tree_budget=4)


# The CLI and the server with a hybrid draft: tests/drafters/test_draft_model_hybrid_serve.py
# (`specdec generate --draft-model ... --compare` parity for qwen3_next, lfm2 and mamba2 with
# near drafts, and `specdec serve` answering 16 concurrent chats as that CLI does). Its CLI runs
# replaced this file's own `generate --compare` per family (a self draft and an unrelated one:
# 6 processes, 22 s on CI; in-process, test_self_draft_is_accepted and
# test_parity_partial_and_rejected hold those acceptances) and its server a self-drafting one
# compared with draft_type none (6 s).
