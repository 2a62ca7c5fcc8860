"""decode.plain: pipelined plain decoding equals one un-pipelined forward per token, and
``until`` hands back the last token unfed with the cache holding everything before it."""

import mlx.core as mx
import pytest
from conftest import cached_tiny, repetitive_prompt
from mlx_lm.models.cache import make_prompt_cache

from specdec.core.sampling import SamplingParams
from specdec.decode.plain import plain_steps


def reference(model, prompt, n):
    """Greedy decoding, a forward of the whole context per token (no cache)."""
    out = list(prompt)
    for _ in range(n):
        out.append(int(mx.argmax(model(mx.array([out]))[0, -1]).item()))
    return out[len(prompt):]


def primed(model, prompt):
    cache = make_prompt_cache(model)
    model(mx.array([prompt[:-1]]), cache=cache)
    return cache


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_plain_steps_equal_whole_context_greedy(arch):
    model, prompt = cached_tiny(arch), repetitive_prompt(3, 12)
    steps = plain_steps(model, primed(model, prompt), prompt, SamplingParams(), None, True, 2)
    got = [next(steps) for _ in range(6)]
    assert [s.tokens[0] for s in got] == reference(model, prompt, 6)
    assert all(s.fed == 1 and s.drafted == 0 and len(s.margins) == 1 and len(s.top[0]) == 2
               for s in got)
    assert all(s.logprobs[0] <= 0 for s in got)


def test_until_yields_the_computed_token_unfed():
    model, prompt = cached_tiny("llama"), repetitive_prompt(4, 10)
    cache, asked = primed(model, prompt), []
    steps = plain_steps(model, cache, prompt, SamplingParams(), None, False,
                        until=lambda: len(asked) == 3 or asked.append(1))
    got = [s.tokens[0] for s in steps]
    assert got == reference(model, prompt, 4)
    assert cache[0].offset == len(prompt) + 3  # the prompt and every token but the last

