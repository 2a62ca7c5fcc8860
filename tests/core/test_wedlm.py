"""WeDLM's lossy decoder at a temperature (issue #37): each mask's token is drawn from
softmax(logits / T) with one key of the request's seeded ``Rng`` per step, as the seed's
sampler does; entropies stay the unscaled ones (tiny random-weight model, fp32, CPU)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specdec.core.sampling import Rng
from specdec.core.wedlm import WedlmSettings
from specdec.decode.wedlm import wedlm_stream
from decode.test_wedlm import MASK, PROMPT, tiny


def mask_sample(model, prompt, n, temperature, seed):
    """Reference for W = 1: each token drawn from one mask after prompt + output."""
    rng, out = Rng(seed), []
    for _ in range(n):
        logits = model(mx.array(prompt + out + [MASK])[None])[0, -1:].astype(mx.float32)
        out.append(int(mx.random.categorical(logits / temperature, axis=-1, key=rng.next()).item()))
    return out


def sampled(model, window, seed, temperature=1.0, n=16):
    s = WedlmSettings(mask_token_id=MASK, window=window, entropy_threshold=2.0)
    return list(wedlm_stream(model, PROMPT, s, max_tokens=n, temperature=temperature,
                             rng=Rng(seed)))


def test_window_one_draws_each_token_from_its_mask():
    model = tiny()
    assert sampled(model, 1, seed=5, temperature=0.8, n=12) == mask_sample(model, PROMPT, 12, 0.8, 5)


@pytest.mark.parametrize("window", [1, 4])
def test_seeded_sampling_is_reproducible_and_not_greedy(window):
    model = tiny()
    a, b = sampled(model, window, seed=1), sampled(model, window, seed=1)
    greedy = list(wedlm_stream(model, PROMPT, WedlmSettings(
        mask_token_id=MASK, window=window, entropy_threshold=2.0), max_tokens=16))
    assert a == b and len(a) == 16
    assert a != greedy or sampled(model, window, seed=2) != greedy


def test_generate_accepts_temp_and_refuses_other_samplers():
    from specdec.config import RunConfig

    RunConfig(decoder="wedlm", temp=0.7, seed=1).validate()
    with pytest.raises(ValueError, match="--top-p not supported with --decoder wedlm"):
        RunConfig(decoder="wedlm", temp=0.7, top_p=0.9).validate()
