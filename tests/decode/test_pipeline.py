"""``specdec.decode.pipeline``: plain greedy rows queue their next step before one is read,
rows join and leave exactly, and which batches may pipeline at all (tiny models)."""

from conftest import cached_tiny, repetitive_prompt

from specdec.core.sampling import SamplingParams
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.decode.pipeline import pipelines

from .test_batch import alone, join_all


def test_plain_rows_pipeline_and_join_and_leave_exactly():
    """Plain greedy rows: the next step is queued before one is read; a row leaving then
    gets back exactly its context but the last token, and a row joining gets its first
    token from the call after (the earlier rows keep theirs coming): all tokens equal
    each request alone."""
    model = cached_tiny("qwen2")
    prompts = [repetitive_prompt(s, n) for s, n in ((40, 30), (41, 22), (42, 35))]
    want = [alone(model, p, "none", 10) for p in prompts]
    batch, got, sizes = Batch(model, float, learn=False), [[], [], []], []
    join_all(model, batch, [(p, "none", 10, SamplingParams(), None) for p in prompts[:2]], True)
    for n in range(8):
        if n == 3:
            join_all(model, batch, [(prompts[2], "none", 10, SamplingParams(), None)], False)
        steps = loop.step(batch)
        sizes.append(len(steps))
        for i, s in enumerate(steps):
            got[i] += s.tokens
        assert batch.queued
    held = batch.leave(0)
    for _ in range(2):  # the others go on after it left
        for i, s in zip((1, 2), loop.step(batch)):
            got[i] += s.tokens
    assert sizes == [2, 2, 2, 2, 3, 3, 3, 3]  # the joining row's first token: one call later
    assert held[0].offset == len(prompts[0]) + len(got[0]) - 1
    assert [g == w[: len(g)] for g, w in zip(got, want)] == [True] * 3
    assert [len(g) for g in got] == [8, 10, 6]


def test_only_plain_greedy_rows_without_drafts_pipeline():
    model = cached_tiny("llama")
    prompt = repetitive_prompt(43, 20)
    assert not pipelines(Batch(model, float, learn=False), speculate=True)  # no rows
    plain = Batch(model, float, learn=False)
    join_all(model, plain, [(prompt, "none", 8, SamplingParams(), None)] * 2, True)
    assert pipelines(plain, speculate=True)
    sampled = Batch(model, float, learn=False)
    join_all(model, sampled, [(prompt, "none", 8, SamplingParams(temperature=0.5, seed=1), None)], False)
    assert not pipelines(sampled, speculate=True)
    drafting = Batch(model, lambda n: 1.0, learn=False)  # a flat cost: drafting pays
    join_all(model, drafting, [(prompt, "ngram", 8, SamplingParams(), None)], False)
    assert not pipelines(drafting, speculate=True) and pipelines(drafting, speculate=False)
