"""decode.loop: a single request's stream and a batch step, against plain greedy decoding
of each prompt alone (tiny random-weight models, exact in fp32)."""

import pytest
from conftest import cached_tiny, repetitive_prompt

from specdec.decode.generation import Generation
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.decode.request import Request
from specdec.drafters import NgramDrafter, NoDrafter


def tokens(steps, n, seen=None):
    out = []
    for s in steps:
        out += s.tokens
        if seen is not None:
            seen.append(s)
        if len(out) >= n:
            return out[:n]
    return out


def started(model, prompt, drafter, k=4):
    r = Request(model, prompt, Generation.of(max_tokens=24, num_draft_tokens=k), drafter=drafter)
    r.start()
    assert r.prefill()
    return r


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_speculative_stream_emits_the_plain_stream(arch):
    model, prompt = cached_tiny(arch), repetitive_prompt(7, 30)
    plain, spec, steps = started(model, prompt, NoDrafter()), started(model, prompt, NgramDrafter(1, 3)), []
    assert tokens(loop.stream(spec), 24, steps) == tokens(loop.stream(plain), 24)
    assert sum(s.drafted for s in steps) > 0  # it did speculate


def test_a_batch_step_gives_one_step_per_row():
    model = cached_tiny("llama")
    batch, reqs = Batch(model), []
    for seed in (1, 2):
        r = started(model, repetitive_prompt(seed, 20), NgramDrafter(1, 3), k=3)
        batch.join(r.row(), r.layers)
        reqs.append(r)
    steps = loop.step(batch)
    assert len(steps) == 2 and all(len(s.tokens) >= 1 for s in steps)
    for r, s in zip(reqs, steps):
        alone = started(model, r.prompt_ids, NoDrafter())
        assert s.tokens == tokens(loop.stream(alone), len(s.tokens))
