"""Token-exact parity on tiny random-weight models of each architecture (fast, many cases).

Prompts are drawn with heavy repetition so the n-gram drafter proposes often and both
acceptance and rejection (hence rollback) happen many times per run; the gemma3 model has
an 8-token window, so rotation and rollback interleave constantly. Every parity test also
asserts (``assert_speculated``) that its runs drafted, accepted and rejected: a run that
never drafts is plain decoding and would pass trivially.
"""


import pytest
from conftest import assert_speculated, cached_tiny, examples, repetitive_prompt
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cache.errors import UnsupportedCacheError
from specdec.decode.generation import Generation
from specdec.drafters import NgramDrafter
from specdec.engine import token_stream
from specdec.core.stats import SpecStats

ARCHS = ["llama", "qwen2", "gemma3"]
# the penalty tests' gemma3 cases run in `make test` only: a penalty reads the token history,
# not the cache, and the window cache's rollback under drafts is test_parity_grid's (gemma3
# cases in both suites); they were a third of this file's fast-suite time
PENALTY_ARCHS = [pytest.param(a, marks=pytest.mark.slow) if a == "gemma3" else a for a in ARCHS]
_refs: dict = {}


def run(model, prompt, drafter=None, max_tokens=48, **kw):
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens, **kw)]


def run_logged(model, prompt, drafter, max_tokens=48, **kw):
    """Tokens and the ``(block length, accepted)`` step log, cross-checked with the stats."""
    log, stats = [], SpecStats()
    out = run(model, prompt, drafter, max_tokens, step_log=log, stats=stats, **kw)
    assert stats.drafted == sum(n - 1 for n, _ in log) and stats.accepted == sum(a for _, a in log)
    return out, log


def plain(arch, prompt, max_tokens=48):
    key = (arch, tuple(prompt), max_tokens)
    if key not in _refs:
        _refs[key] = run(cached_tiny(arch), prompt, max_tokens=max_tokens)
    return _refs[key]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("n_min", [1, 2, 3])
def test_parity_grid(arch, k, n_min):
    model, logs = cached_tiny(arch), []
    for seed in (0, 1, 8):  # seed 8: 3-gram drafts that qwen2 accepts (0 and 1 it never does)
        prompt = repetitive_prompt(seed)
        out, log = run_logged(model, prompt, NgramDrafter(n_min, max(n_min, 3)), num_draft_tokens=k)
        assert out == plain(arch, prompt), (arch, k, n_min, seed)
        logs.append(log)
    assert_speculated(*logs, what=f"{arch} k={k} n_min={n_min}")


_property_logs: list = []


@settings(max_examples=examples(25), deadline=None)
@given(st.sampled_from(ARCHS), st.integers(0, 10_000), st.integers(1, 8), st.integers(1, 90))
def check_parity_property(arch, seed, k, length):
    prompt = repetitive_prompt(seed, length)
    out, log = run_logged(cached_tiny(arch), prompt, NgramDrafter(1, 3), num_draft_tokens=k)
    assert out == plain(arch, prompt)
    _property_logs.append(log)


def test_parity_property():
    """Parity on every drawn example; acceptance and rejection over the drawn examples
    together (one short prompt may legitimately never draft)."""
    _property_logs.clear()
    check_parity_property()
    assert_speculated(*_property_logs, what="hypothesis examples")


@pytest.mark.parametrize("arch", ARCHS)
def test_max_tokens_inside_an_accepted_block(arch):
    # Drafts are capped at the remaining budget, so max_tokens lands on the last token a
    # step may emit; seed 8 drafts are accepted on every arch (seed 7: none on gemma3).
    prompt = repetitive_prompt(8)
    ref, logs = plain(arch, prompt), []
    for m in (1, 2, 3, 5, 8, 13):
        out, log = run_logged(cached_tiny(arch), prompt, NgramDrafter(1, 3), max_tokens=m, num_draft_tokens=8)
        assert out == ref[:m]
        logs.append(log)
    assert_speculated(*logs, what=arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_eos_ends_output_even_inside_an_accepted_block(arch):
    prompt = repetitive_prompt(3)
    ref, logs = plain(arch, prompt), []
    for p in range(1, len(ref)):
        eos = ref[p]
        if eos in ref[:p]:
            continue
        out, log = run_logged(cached_tiny(arch), prompt, NgramDrafter(1, 3), num_draft_tokens=8, eos={eos})
        assert out == ref[:p]
        logs.append(log)
    assert_speculated(*logs, what=arch)


def test_a_quantized_kv_cache_decodes_plainly_and_refuses_speculation():
    """A quantized cache rounds a verified block's keys to other levels than one-token
    steps' (lab/kv-bits-speculation: SmolLM2 at 4 bits, 2 of 9 prompts change within 64
    tokens), so speculation on it is refused before anything runs; plain decoding runs."""
    model = cached_tiny("llama", hidden=128)
    prompt = repetitive_prompt(11)
    q = dict(kv_bits=8, kv_group_size=32)
    assert len(run(model, prompt, max_tokens=8, **q)) == 8
    with pytest.raises(UnsupportedCacheError, match="not lossless under speculation.*drafter=None"):
        run(model, prompt, NgramDrafter(1, 3), num_draft_tokens=4, **q)


def test_stats_are_consistent():
    from specdec.core.stats import SpecStats

    stats = SpecStats()
    out = [e for e in token_stream(cached_tiny("llama"), repetitive_prompt(5), drafter=NgramDrafter(1, 3),
                                   max_tokens=40, num_draft_tokens=4, stats=stats)]
    assert stats.generated_tokens == len(out) == 40
    assert stats.accepted == sum(e.from_draft for e in out)
    assert stats.accepted == sum(stats.accepted_by_position)
    assert stats.drafted == sum(stats.drafted_by_position)
    assert stats.verify_steps + stats.accepted >= 40  # each step emits accepted + 1
    assert 0 < stats.p_cache <= 1


PROCESSED = {  # what the OpenAI parameters ask for, as SamplingParams
    "presence": dict(presence_penalty=1.5, presence_context_size=6),
    "frequency": dict(frequency_penalty=0.7, frequency_context_size=8),
    "bias": dict(logit_bias={3: 6.0, 7: -100.0, 11: 5.0}),
    "all": dict(logit_bias={3: 3.0}, repetition_penalty=1.2, repetition_context_size=5,
                presence_penalty=0.5, frequency_penalty=-0.4),
}


@pytest.mark.parametrize("arch", [a for a in PENALTY_ARCHS if a != "qwen2"])
@pytest.mark.parametrize("kind", sorted(PROCESSED))
def test_penalties_and_logit_bias_parity(arch, kind):
    """Presence and frequency penalties and a logit bias: every verified position is
    processed as plain decoding processes it, so speculative output equals plain output
    under the same parameters, greedy and seeded sampling alike (plain here is the
    pipelined loop, whose window lives on the device)."""
    from specdec.core.sampling import SamplingParams

    model, logs = cached_tiny(arch), []
    for temp in (0.0, 0.9):
        params = SamplingParams(temperature=temp, seed=5, **PROCESSED[kind])
        prompt = repetitive_prompt(2, 30)
        ref = run(model, prompt, sampling=params)
        if temp == 0.0:
            assert ref != run(model, prompt), f"{kind} changes nothing here: a useless test"
            for k in (1, 4):
                out, log = run_logged(model, prompt, NgramDrafter(1, 3), num_draft_tokens=k, sampling=params)
                assert out == ref
                logs.append(log)
        else:  # sampled: a plain row in the verify step draws exactly as the pipelined loop
            from specdec.decode.request import Request
            from specdec.core.processors import LogitBias

            req = Request(model, prompt, Generation(max_tokens=48, sampling=params),
                          processors=[LogitBias([(0, 0.0)])])
            req.start()
            req.prefill()
            assert [e.token for e in req.run()] == ref
    assert_speculated(*logs, what=f"{arch} {kind}")


@pytest.mark.parametrize("arch", PENALTY_ARCHS)
# 0.8 (a bonus for repeats) in the full run: each verify row's history is the property,
# the same rows for any penalty; tests/core/test_sampling.py checks the rule on logits of both signs
@pytest.mark.parametrize("penalty", [1.3, pytest.param(0.8, marks=pytest.mark.slow)])
def test_repetition_penalty_parity(arch, penalty):
    """Each verify row is penalised for exactly the history plain decoding had there."""
    from specdec.core.sampling import SamplingParams

    params = SamplingParams(repetition_penalty=penalty, repetition_context_size=6)
    model, logs = cached_tiny(arch), []
    for seed in (0, 1):
        prompt = repetitive_prompt(seed, 30 if seed else 4)  # also a prompt shorter than the window
        ref = run(model, prompt, sampling=params)
        for k in (1, 4, 8):
            out, log = run_logged(model, prompt, NgramDrafter(1, 3), num_draft_tokens=k, sampling=params)
            assert out == ref
            logs.append(log)
    assert_speculated(*logs, what=f"{arch} penalty={penalty}")


def test_every_unnamed_draft_length_is_draftspecs():
    """#45: k has one default. A caller naming no k gets DraftSpec's, whichever door it
    uses: token_stream (the row drafts that deep), the library's keywords (None: the
    value's default), the one ``Generation`` value, and `specdec cost`'s flag (before: 4
    there, 8 in DraftSpec); Request and make_request take no k of their own."""
    import inspect

    from specdec.cli import build_parser
    from specdec.decode.generation import Generation
    from specdec.decode.request import Request
    from specdec.drafters import DraftSpec
    from specdec.engine import make_request, stream_generate

    k = DraftSpec.num_draft_tokens
    log: list = []
    run(cached_tiny("llama"), [5, 6, 7] * 12, NgramDrafter(1, 3), max_tokens=24, step_log=log)
    assert max(n for n, _ in log) - 1 == k  # a period-3 prompt: the ngram drafter fills any depth
    for f in (make_request, Request.__init__):
        assert "num_draft_tokens" not in inspect.signature(f).parameters, f.__qualname__
    for f in (token_stream, stream_generate):  # None: the value's (DraftSpec's)
        assert inspect.signature(f).parameters["num_draft_tokens"].default is None, f.__qualname__
    assert Generation().k == k
    assert build_parser().parse_args(["cost"]).num_draft_tokens == k


def test_an_explicit_draft_length_reaches_the_gate_and_the_row(tmp_path, monkeypatch):
    """#45: one road for k. ``stream_generate(drafter=spec, num_draft_tokens=n)`` puts n in
    the one value's spec; the gate ``drafter_for`` builds from it is bounded by the same n
    the row drafts to (before: by the spec's own k, so n above it was silently capped), and
    a type string gets DraftSpec's default."""
    from specdec.decode.generation import Generation
    from specdec.drafters import DraftSpec
    from specdec.engine import resolve_drafter, spec_of
    from specdec.resources import drafter_for

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    gen = Generation.of(draft=spec_of(DraftSpec("suffix", num_draft_tokens=2), None), num_draft_tokens=3)
    assert gen.k == 3 and resolve_drafter(DraftSpec("suffix"), gen, model, None).k_max == 3
    assert drafter_for(DraftSpec("suffix", num_draft_tokens=2), model, None).k_max == 2
    assert drafter_for(spec_of("suffix", None), model, None).k_max == DraftSpec.num_draft_tokens
    with pytest.raises(ValueError, match="give the spec once"):  # two descriptions, never one dropped
        spec_of(DraftSpec("ngram"), Generation())


def test_ngram_bounds_given_beside_a_spec_reach_the_drafter():
    """``stream_generate(drafter=spec, ngram_min=, ngram_max=)``: the value's spec carries
    those bounds to the drafter (before: a spec's own were used and the keywords silently
    dropped); a bad pair is refused with DraftSpec's message."""
    from specdec.decode.generation import Generation
    from specdec.drafters import DraftSpec
    from specdec.resources import drafter_for

    spec = DraftSpec("ngram", gate=False, adaptive_k=False)
    d = drafter_for(Generation.of(draft=spec, ngram_min=2, ngram_max=5).draft, None, None).drafter
    assert (d.n_min, d.n_max) == (2, 5)
    d = drafter_for(spec, None, None).drafter
    assert (d.n_min, d.n_max) == (1, 3)
    with pytest.raises(ValueError, match="ngram-max"):
        Generation.of(draft=spec, ngram_min=4, ngram_max=2)
