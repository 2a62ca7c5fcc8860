"""Token-exact parity on tiny random-weight models of each architecture (fast, many cases).

Prompts are drawn with heavy repetition so the n-gram drafter proposes often and both
acceptance and rejection (hence rollback) happen many times per run; the gemma3 model has
an 8-token window, so rotation and rollback interleave constantly.
"""

import random

import pytest
from conftest import TINY_VOCAB, cached_tiny
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.drafters import NgramDrafter
from specdec.engine import token_stream

ARCHS = ["llama", "qwen2", "gemma3"]
_refs: dict = {}


def run(model, prompt, drafter=None, max_tokens=48, **kw):
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens, **kw)]


def plain(arch, prompt, max_tokens=48):
    key = (arch, tuple(prompt), max_tokens)
    if key not in _refs:
        _refs[key] = run(cached_tiny(arch), prompt, max_tokens=max_tokens)
    return _refs[key]


def repetitive_prompt(seed, length=40):
    rng = random.Random(seed)
    motif = [rng.randrange(TINY_VOCAB) for _ in range(rng.randint(2, 6))]
    out = []
    while len(out) < length:
        out += motif if rng.random() < 0.7 else [rng.randrange(TINY_VOCAB)]
    return out[:length]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("n_min", [1, 2, 3])
def test_parity_grid(arch, k, n_min):
    model = cached_tiny(arch)
    for seed in range(3):
        prompt = repetitive_prompt(seed)
        out = run(model, prompt, NgramDrafter(n_min, max(n_min, 3)), num_draft_tokens=k)
        assert out == plain(arch, prompt), (arch, k, n_min, seed)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ARCHS), st.integers(0, 10_000), st.integers(1, 8), st.integers(1, 90))
def test_parity_property(arch, seed, k, length):
    prompt = repetitive_prompt(seed, length)
    out = run(cached_tiny(arch), prompt, NgramDrafter(1, 3), num_draft_tokens=k)
    assert out == plain(arch, prompt)


@pytest.mark.parametrize("arch", ARCHS)
def test_max_tokens_inside_an_accepted_block(arch):
    prompt = repetitive_prompt(7)
    ref = plain(arch, prompt)
    for m in (1, 2, 3, 5, 8, 13):
        assert run(cached_tiny(arch), prompt, NgramDrafter(1, 3), max_tokens=m, num_draft_tokens=8) == ref[:m]


@pytest.mark.parametrize("arch", ARCHS)
def test_eos_ends_output_even_inside_an_accepted_block(arch):
    prompt = repetitive_prompt(3)
    ref = plain(arch, prompt)
    for p in range(1, len(ref)):
        eos = ref[p]
        if eos in ref[:p]:
            continue
        out = run(cached_tiny(arch), prompt, NgramDrafter(1, 3), num_draft_tokens=8, eos={eos})
        assert out == ref[:p]


def test_quantized_kv_cache_parity():
    model = cached_tiny("llama", hidden=128)
    prompt = repetitive_prompt(11)
    q = dict(kv_bits=8, kv_group_size=32)
    ref = run(model, prompt, **q)
    assert run(model, prompt, NgramDrafter(1, 3), num_draft_tokens=4, **q) == ref


def test_stats_are_consistent():
    from specdec.stats import SpecStats

    stats = SpecStats()
    out = [e for e in token_stream(cached_tiny("llama"), repetitive_prompt(5), drafter=NgramDrafter(1, 3),
                                   max_tokens=40, num_draft_tokens=4, stats=stats)]
    assert stats.generated_tokens == len(out) == 40
    assert stats.accepted == sum(e.from_draft for e in out)
    assert stats.accepted == sum(stats.accepted_by_position)
    assert stats.drafted == sum(stats.drafted_by_position)
    assert stats.verify_steps + stats.accepted >= 40  # each step emits accepted + 1
    assert 0 < stats.p_cache <= 1


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("penalty", [1.3, 0.8])
def test_repetition_penalty_parity(arch, penalty):
    """Each verify row is penalised for exactly the history plain decoding had there."""
    from specdec.sampling import SamplingParams

    params = SamplingParams(repetition_penalty=penalty, repetition_context_size=6)
    model = cached_tiny(arch)
    for seed in (0, 1):
        prompt = repetitive_prompt(seed, 30 if seed else 4)  # also a prompt shorter than the window
        ref = run(model, prompt, sampling=params)
        for k in (1, 4, 8):
            assert run(model, prompt, NgramDrafter(1, 3), num_draft_tokens=k, sampling=params) == ref
