"""Speculation on models with recurrent state (issue #25): tiny random-weight hybrid and
pure-SSM models of every family mlx-lm ships (``hybrid_tiny``), against plain decoding.

What is checked: greedy parity with the real drafters and k in 1..16; forced full
acceptance (an oracle proposing the plain output); rejection at position 0 and mid-block;
seeded sampling; a stop inside an accepted block; the restored cache compared
array-for-array with one fed the kept tokens; a negative control (trimming only the
attention layers) that diverges; trees refused; the prompt cache reused exactly or rebuilt.
"""

import mlx.core as mx
import pytest
from hybrid_tiny import ARCHS, VOCAB, cached
from mlx_lm.models.cache import ArraysCache

from specdec.cache import replay
from specdec.cache.prompt_cache import make_prompt_cache
from specdec.cache.recurrent import RecurrentCache
from specdec.cache.rollback import RollbackError, make_cache, prefill, trim
from specdec.core.proposal import Proposal
from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.decode.step import Greedy, Verify, verify_step
from specdec.drafters.base import Drafter
from specdec.drafters.spec import DraftSpec, build_drafter
from specdec.engine import token_stream

PROMPT = [(7 * i) % 13 + 3 for i in range(6)] * 4  # repetitive: n-gram and suffix drafts
N = 24
_plain: dict = {}


def run(model, prompt=PROMPT, drafter=None, max_tokens=N, **kw):
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens, **kw)]


def plain(arch, prompt=PROMPT, max_tokens=N, **kw):
    key = (arch, tuple(prompt), max_tokens, tuple(sorted(kw.items())))
    if key not in _plain:
        _plain[key] = run(cached(arch), prompt, None, max_tokens, **kw)
    return _plain[key]


class Oracle(Drafter):
    """Proposes the plain output (``truth``), with the token at draft position ``miss``
    replaced by a wrong one (None: never), so the verifier accepts exactly what we choose."""

    name = "oracle"

    def __init__(self, truth, prompt_len, miss=None):
        self.truth, self.n, self.miss = truth, prompt_len, miss

    def propose(self, context, k):
        ahead = list(self.truth[len(context) - self.n:][:k])
        if self.miss is not None and self.miss < len(ahead):
            ahead[self.miss] = (ahead[self.miss] + 1) % VOCAB
        return Proposal(ahead)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 3, 8, 16])
def test_parity_oracle_partial(arch, k):
    """Every step accepts some and rejects the rest (miss at k // 2): partial rollback."""
    truth, stats = plain(arch), SpecStats()
    out = run(cached(arch), drafter=Oracle(truth, len(PROMPT), miss=k // 2), num_draft_tokens=k,
              stats=stats)
    assert out == truth
    assert stats.drafted > 0 and stats.accepted < stats.drafted


@pytest.mark.parametrize("arch", ARCHS)
def test_forced_full_acceptance_and_rejection_at_zero(arch):
    truth = plain(arch)
    full, zero = SpecStats(), SpecStats()
    assert run(cached(arch), drafter=Oracle(truth, len(PROMPT)), num_draft_tokens=5, stats=full) == truth
    assert full.drafted > 0 and full.accepted == full.drafted
    assert run(cached(arch), drafter=Oracle(truth, len(PROMPT), miss=0), num_draft_tokens=5,
               stats=zero) == truth
    assert zero.drafted > 0 and zero.accepted == 0


@pytest.mark.parametrize("draft_type", ["ngram", "suffix", "ngram,suffix", "grammar,suffix"])
@pytest.mark.parametrize("arch", ["qwen3_next", "lfm2", "mamba2", "falcon_h1"])
def test_parity_real_drafters(arch, draft_type):
    stats = SpecStats()
    drafter = build_drafter(DraftSpec(draft_type, num_draft_tokens=6, ngram_min=1, gate=False))
    assert run(cached(arch), drafter=drafter, num_draft_tokens=6, stats=stats) == plain(arch)
    assert stats.drafted > 0


@pytest.mark.slow
def test_sampled_tokens_equal_plain_seed_for_seed():
    """Seeded requests at temperature 1 over 100 seeds: speculative decoding with partial
    rollbacks of the recurrent state emits plain seeded sampling's tokens exactly (the
    position-keyed seed contract, tests/decode/test_step_seeded.py), so its distribution is
    plain's. This replaced a histogram of the 4th token over 300 seeds (total variation
    within sampling noise + 0.08 of a second plain histogram): equal tokens imply it, and a
    rollback error shifting >= 8 % of draws, which that one needed to see, fails here with
    probability >= 1 - 0.92**100 > 0.9997, in 200 runs instead of 900."""
    model, n = cached("qwen3_next"), 100
    truth = plain("qwen3_next")
    base, spec, stats = [], [], []
    for seed in range(n):
        sp = SamplingParams(temperature=1.0, seed=seed)
        base.append(run(model, drafter=None, max_tokens=4, num_draft_tokens=3, sampling=sp))
        stats.append(SpecStats())  # one a request: a request's stats count toward its max_tokens
        spec.append(run(model, drafter=Oracle(truth, len(PROMPT), miss=1), max_tokens=4,
                        num_draft_tokens=3, sampling=sp, stats=stats[-1]))
    assert spec == base
    assert len({tuple(t) for t in base}) > n // 2  # it really sampled: the seeds differ
    drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
    assert drafted > accepted > 0, (drafted, accepted)  # drafts accepted and rolled back


def _leaves(cache):
    for layer in cache:
        yield from (layer.caches if hasattr(layer, "caches") else [layer])


def _arrays(cache):
    """Every array a cache holds, valid positions only, in layer order."""
    out = []
    for c in _leaves(cache):
        if isinstance(c, ArraysCache):
            out += list(c.cache)
        else:
            out += [c.keys[..., : c.offset, :], c.values[..., : c.offset, :]]
    return out


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("accept", [0, 2, 5])
@pytest.mark.parametrize("kind", ["replay", "refeed"])
def test_restored_state_equals_feeding_the_kept_tokens(arch, accept, kind):
    """After a verify step that keeps ``accept`` drafts, every layer's arrays equal those of
    a cache fed the prompt and then the kept tokens one at a time, whichever way the
    rewind rebuilt the recurrent states: ``replay`` (the default: each recurrent layer
    rerun on its kept rows, nothing left pending) or ``refeed`` (the kept tokens pending)."""
    model, truth = cached(arch), plain(arch)
    draft = list(truth[:accept]) + [(truth[accept] + 1) % VOCAB] + [1, 2]
    cache = make_cache(model, recurrent=True)
    assert cache.kind == "replay"
    cache.kind = kind
    prefill(model, cache, PROMPT[:-1])
    step = verify_step(model, cache, [Verify(list(PROMPT), Proposal(draft), Greedy())])[0]
    assert step.accepted == accept and step.tokens == truth[: accept + 1]
    assert cache.last_rollback == kind
    assert len(cache.pending) == (0 if kind == "replay" else accept + 1)
    ref = make_cache(model, recurrent=True)
    prefill(model, ref, PROMPT[:-1])
    for t in [PROMPT[-1], *truth[:accept]]:
        model(mx.array([[t]]), cache=ref)
    assert cache.positions() == ref.positions() == {len(PROMPT) + accept}
    got, want = _arrays(cache), _arrays(ref)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()


def test_negative_control_trimming_only_attention_diverges(monkeypatch):
    """Rolling back only the attention layers (the recurrent state keeps the rejected
    drafts) must change the output: the test above would catch a silent no-op."""
    arch = "qwen3_next"
    truth = plain(arch)

    def attention_only(self, n):
        for c in self.attention:
            c.trim(n)
        for c in self.states:  # positions agree, but the states still hold the rejected drafts
            c.offset -= n
        self._snap, self._fed = None, []
        return n

    monkeypatch.setattr(RecurrentCache, "rewind", attention_only)
    out = run(cached(arch), drafter=Oracle(truth, len(PROMPT), miss=1), num_draft_tokens=4)
    assert out != truth


@pytest.mark.parametrize("arch", ["qwen3_next", "mamba2"])
def test_negative_control_a_replay_that_skips_the_kept_rows_diverges(monkeypatch, arch):
    """The replay must run the recurrent layers on the kept rows: giving them back their
    pre-block state and nothing more (the kept tokens lost from the recurrent state, the
    positions still agreeing) must change the output."""
    truth = plain(arch)

    def lost(recorder, call, fed, kept, memo):  # positions advance as a rerun would, the state does not
        for a in (*call.args, *call.kwargs.values()):
            if isinstance(a, ArraysCache):
                a.offset += kept

    monkeypatch.setattr(replay.Recorder, "rerun", lost)
    out = run(cached(arch), drafter=Oracle(truth, len(PROMPT), miss=1), num_draft_tokens=4)
    assert out != truth


def test_rollback_is_checked():
    model = cached("qwen3_next")
    cache = make_cache(model, recurrent=True)
    prefill(model, cache, PROMPT)
    with pytest.raises(RollbackError, match="last verify block"):
        trim(cache, 1)  # no block fed since the prefill: nothing to go back to
    with pytest.raises(Exception, match="cannot roll back"):
        make_cache(model)  # without recurrent=True, refused as before


@pytest.mark.parametrize("budget", [4, "auto"])
def test_trees_refused(budget):
    """"auto" too, before it measures a tree step (which cannot roll back: issue #35)."""
    with pytest.raises(ValueError, match="recurrent layers.*--draft-tree-budget 0"):
        run(cached("lfm2"), drafter=build_drafter(DraftSpec("ngram", gate=False)), tree_budget=budget)


@pytest.mark.parametrize("arch", ["qwen3_next", "mamba2"])
def test_prompt_cache_extends_restores_or_rebuilds(arch):
    model = cached(arch)
    pc = make_prompt_cache(model, max_draft_tokens=8)
    drafter = lambda: build_drafter(DraftSpec("ngram", ngram_min=1, gate=False))  # noqa: E731
    first = run(model, drafter=drafter(), prompt_cache=pc, num_draft_tokens=4)
    assert first == plain(arch)
    reply = PROMPT + [5, 9] + first  # shares the prompt, not the reply: back to the checkpoint
    s2 = SpecStats()
    out = run(model, reply, drafter(), prompt_cache=pc, num_draft_tokens=4, stats=s2)
    assert out == plain(arch, reply) and s2.cached_tokens == len(PROMPT) - 1
    turn2 = reply + out + [5, 9, 5]  # extends what is cached exactly
    s3 = SpecStats()
    assert run(model, turn2, drafter(), prompt_cache=pc, num_draft_tokens=4, stats=s3) == plain(arch, turn2)
    assert s3.cached_tokens > len(reply)
    other = PROMPT[:10] + [1, 2, 3]  # diverges inside the cached part: rebuilt, not trimmed
    s4 = SpecStats()
    assert run(model, other, drafter(), prompt_cache=pc, num_draft_tokens=4, stats=s4) == plain(arch, other)
    assert s4.cached_tokens == 0


def test_draft_model_and_ngram_mod_drafters():
    """An attention-only draft model drafting for a hybrid target (its own cache rolls back
    as before), and the ngram-mod drafter (hybrid draft models: ``test_hybrid_draft``)."""
    from conftest import cached_tiny

    from specdec.drafters.draft_model import DraftModelDrafter
    from specdec.drafters.ngram_mod import NgramModTable
    from specdec.drafters.spec import DraftResources

    arch, stats = "lfm2", SpecStats()
    drafter = DraftModelDrafter(cached_tiny("llama"), max_trim=7)
    assert run(cached(arch), drafter=drafter, num_draft_tokens=6, stats=stats) == plain(arch)
    assert stats.drafted > 0
    table = NgramModTable(4096, 3)
    mod = build_drafter(DraftSpec("ngram-mod", num_draft_tokens=6, gate=False), DraftResources(table=table))
    assert run(cached(arch), drafter=mod, num_draft_tokens=6) == plain(arch)


def test_distributed_refuses_hybrids():
    from specdec.distributed import DistributedError, shard

    with pytest.raises(DistributedError, match="recurrent layers"):
        shard(cached("lfm2"), None)

