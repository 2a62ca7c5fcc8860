"""``specdec.decode.request``: the ``Generation`` value's checks, and ``feed`` ending the output
at EOS (not emitted), at ``max_tokens`` or inside an accepted block, with its stats (a tiny
random-weight model; steps written by hand)."""

from __future__ import annotations

import pytest
from conftest import cached_tiny

from specdec.core.sampling import SamplingParams
from specdec.decode.generation import Generation
from specdec.decode.request import Request
from specdec.drafters import DraftSpec
from specdec.decode.step import Step


def step(tokens, accepted=0, drafted=0):
    return Step(tokens=tokens, drafted=drafted, accepted=accepted, fed=drafted + 1,
                logprobs=[-0.5] * len(tokens))


def started(eos=(), **kw):
    r = Request(cached_tiny("llama"), [1, 2, 3], Generation(**kw), eos=eos)
    r.start()
    assert r.prefill()
    return r


@pytest.mark.parametrize("args, message", [
    ((0, 4, 512, 0), "max_tokens must be >= 1, got 0"),
    ((8, 0, 512, 0), "num-draft-tokens must be an integer >= 1, got 0"),
    ((8, 4, 0, 0), "prefill_step_size must be >= 1, got 0"),
    ((8, 4, 512, 101), r"top_logprobs must be in \[0, 100\], got 101"),
    ((8, 4, 512, -1), r"top_logprobs must be in \[0, 100\], got -1"),
])
def test_arguments_are_checked_with_the_value_given(args, message):
    def gen(max_tokens, k, step, top):
        return Generation.of(max_tokens=max_tokens, num_draft_tokens=k, prefill_step_size=step,
                             top_logprobs=top)

    with pytest.raises(ValueError, match=message):
        gen(*args)
    assert gen(1, 1, 1, 100).k == 1  # the edges themselves are fine


def test_a_generation_has_each_default_once_and_refuses_unknown_options():
    """#45: the value's defaults are the ones every edge gets (k: DraftSpec's); ``of``
    takes None as the default and names an option it does not know."""
    assert Generation.of(max_tokens=None, num_draft_tokens=None) == Generation()
    assert Generation().k == DraftSpec.num_draft_tokens == Generation().draft.num_draft_tokens
    spec = DraftSpec("ngram", num_draft_tokens=3, draft_tree_budget=5)
    assert Generation.of(draft=spec, ngram_max=4).draft == DraftSpec("ngram", num_draft_tokens=3,
                                                                     ngram_max=4, draft_tree_budget=5)
    assert Generation.of(stop=["a"]).stop == ("a",)
    with pytest.raises(TypeError, match="max_token"):
        Generation.of(max_token=3)


def test_an_empty_prompt_and_bad_sampling_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="the prompt encodes to no tokens"):
        Request(cached_tiny("llama"), [])
    with pytest.raises(ValueError, match="max_tokens"):
        Request(cached_tiny("llama"), [1], Generation(max_tokens=0))
    with pytest.raises(ValueError):
        Request(cached_tiny("llama"), [1], Generation(sampling=SamplingParams(temperature=-1.0)))
    with pytest.raises(ValueError, match="engine.tree_policy"):  # "auto" needs the model's curves
        Request(cached_tiny("llama"), [1], Generation(draft=DraftSpec(draft_tree_budget="auto")))


def test_feed_ends_at_max_tokens_inside_an_accepted_block():
    r = started(max_tokens=3)
    first = r.feed(step([4, 5], accepted=1, drafted=1))
    assert [(e.token, e.from_draft, e.logprob) for e in first] == [(4, True, -0.5), (5, False, -0.5)]
    assert r.finish_reason is None and r.left == 1
    assert [e.token for e in r.feed(step([6, 7], accepted=1, drafted=1))] == [6]
    assert (r.finish_reason, r.tokens, r.stats.generated_tokens) == ("length", [4, 5, 6], 3)
    assert (r.stats.verify_steps, r.stats.drafted, r.stats.accepted) == (2, 2, 2)


def test_feed_ends_at_eos_without_emitting_it():
    r = started(max_tokens=10, eos={9})
    assert [e.token for e in r.feed(step([4, 9, 5], accepted=2, drafted=2))] == [4]
    assert r.finish_reason == "stop" and r.tokens == [4] and r.left == 9


def test_run_streams_max_tokens_plain_tokens():
    r = started(max_tokens=5)
    out = list(r.run())
    assert len(out) == 5 and r.finish_reason == "length"
    assert r.tokens == [e.token for e in out] and not any(e.from_draft for e in out)


def test_tokens_per_forward_counts_the_ending_eos_as_spec_bench_does():
    """A short plain answer (3 tokens, then EOS) took 4 forwards, each emitting one token:
    1.0 tokens per forward and p_cache 1.0 (the EOS step was counted without its token:
    0.75); a drafted block counts what it emitted up to and with the EOS, nothing after it,
    and a block cut at max_tokens only what was kept."""
    r = started(max_tokens=10, eos={9})
    for tok in (4, 5, 6, 9):
        r.feed(step([tok]))
    s = r.stats
    assert (s.generated_tokens, s.emitted_tokens, s.verify_steps) == (3, 4, 4)
    assert s.tokens_per_forward == 1.0 and s.p_cache == 1.0
    assert s.to_dict()["tokens_per_forward"] == 1.0
    r = started(max_tokens=10, eos={9})
    r.feed(step([4, 5, 6], accepted=2, drafted=3))
    r.feed(step([7, 9, 8], accepted=2, drafted=2))  # 8 after the EOS is not emitted
    assert (r.stats.emitted_tokens, r.stats.tokens_per_forward) == (5, 2.5)
    r = started(max_tokens=4)
    r.feed(step([4, 5, 6], accepted=2, drafted=2))
    r.feed(step([7, 8, 9], accepted=2, drafted=2))  # cut at 4: one token kept
    assert (r.stats.emitted_tokens, r.stats.tokens_per_forward) == (4, 2.0)
