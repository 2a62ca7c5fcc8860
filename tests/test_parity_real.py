"""Token-exact parity, speculative vs plain greedy, on real weights (fp32, CPU).

Each plain reference is computed once per (model, prompt, max_tokens) and reused by every
speculative configuration.
"""

import random

import pytest
from conftest import real_model, requires_model

from specdec.engine import generate
from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow  # real models

PROMPTS = parity_prompts()
MAX_TOKENS = 96
_refs: dict = {}


def reference(name, prompt, max_tokens=MAX_TOKENS, **kw):
    key = (name, str(prompt), max_tokens, tuple(sorted(kw.items())))
    if key not in _refs:
        model, tok = real_model(name)
        _refs[key] = generate(model, tok, prompt, drafter=None, max_tokens=max_tokens, **kw)
    return _refs[key]


def spec(name, prompt, max_tokens=MAX_TOKENS, **kw):
    model, tok = real_model(name)
    return generate(model, tok, prompt, max_tokens=max_tokens, **kw)


def random_ids_prompt(n=120, seed=0):
    rng = random.Random(seed)
    return [rng.randrange(100, 49000) for _ in range(n)]


VARIED = {**PROMPTS, "random_ids": random_ids_prompt(), "random_ids_2": random_ids_prompt(60, 1)}


@pytest.mark.parametrize("name", sorted(VARIED))
@pytest.mark.parametrize("k,n_min", [(4, 1), (8, 2)])
def test_smollm_parity_varied_prompts(name, k, n_min):
    prompt = VARIED[name]
    ref = reference("smollm2-135m", prompt)
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=k, ngram_min=n_min)
    assert out.tokens == ref.tokens
    assert out.text == ref.text


@pytest.mark.parametrize("name", ["demo_colorsys", "json_records", "passage_zen"])
@pytest.mark.parametrize("k", [1, 2, 3, 16])
@pytest.mark.parametrize("n_min", [1, 2, 3])
def test_smollm_parity_grid(name, k, n_min):
    prompt = PROMPTS[name]
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=k, ngram_min=n_min,
               ngram_max=max(3, n_min))
    assert out.tokens == reference("smollm2-135m", prompt).tokens


def test_plain_engine_equals_mlx_lm_generate(smollm):
    """Our plain path is mlx-lm's plain decoding: same tokens as mlx_lm.generate_step."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    model, tok = smollm
    for name in ("demo_colorsys", "open_story"):
        ref = reference("smollm2-135m", PROMPTS[name])
        ids = mx.array(ref.prompt_tokens)
        theirs = [t for (t, _), _ in zip(generate_step(ids, model, max_tokens=MAX_TOKENS), range(len(ref.tokens)))]
        assert [int(t) for t in theirs] == ref.tokens


def test_periodic_text_needs_few_verify_steps(smollm):
    prompt = "1 2 3 4 5 6 7 8 " * 12
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=8, chat=False)
    assert out.tokens == reference("smollm2-135m", prompt, chat=False).tokens
    assert out.stats.verify_steps * 3 < len(out.tokens)  # >3 tokens per target forward


def test_random_tokens_verify_every_token_and_keep_output(smollm):
    prompt = random_ids_prompt(200, seed=5)
    ref = reference("smollm2-135m", prompt)
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=4, ngram_min=3)
    assert out.tokens == ref.tokens
    assert out.stats.verify_steps == len(out.tokens) - out.stats.accepted
    assert out.stats.acceptance_rate < 0.5


def test_stop_string_inside_an_accepted_block(smollm):
    prompt = PROMPTS["demo_colorsys"]
    ref = reference("smollm2-135m", prompt)
    stop = ref.text[len(ref.text) // 2 : len(ref.text) // 2 + 6]
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=8, stop=[stop])
    assert out.text == ref.text[: ref.text.index(stop)]
    assert out.finish_reason == "stop"
    assert out.tokens == ref.tokens[: len(out.tokens)]


# ---- Gemma 3 270M: 512-token sliding window, crossed so rotation and rollback interleave


def gemma_prompt():
    """Real code twice, the second copy with renamed identifiers, then the first again:
    the drafter's most recent match often proposes the wrong variant, so drafts are both
    accepted and rejected while the output crosses the 512-token window."""
    from specdec.prompts import source_of

    src = source_of("textwrap", "TextWrapper")[:800]
    variant = src.replace("self", "this").replace("text", "words")
    return f"```python\n{src}\n```\n```python\n{variant}\n```\n```python\n{src[:40]}"


needs_gemma = requires_model("gemma3-270m")


@needs_gemma
@pytest.mark.parametrize("k,n_min", [(1, 1), (2, 2), (4, 1), (8, 3), (16, 2)])
def test_gemma_parity_across_the_sliding_window(k, n_min):
    prompt = gemma_prompt()
    ref = reference("gemma3-270m", prompt, max_tokens=160)
    assert len(ref.prompt_tokens) < 512 < len(ref.prompt_tokens) + len(ref.tokens)
    out = spec("gemma3-270m", prompt, max_tokens=160, drafter="ngram", num_draft_tokens=k,
               ngram_min=n_min)
    assert out.stats.accepted > 0
    if n_min == 1:  # 1-gram matches jump between the two variants: rollbacks happen too
        assert out.stats.drafted > out.stats.accepted
    assert out.tokens == ref.tokens


@needs_gemma
def test_gemma_plain_engine_equals_mlx_lm_rotating_cache():
    """Across the window our time-ordered window cache reproduces mlx-lm's own output."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    model, _ = real_model("gemma3-270m")
    ref = reference("gemma3-270m", gemma_prompt(), max_tokens=160)
    ids = mx.array(ref.prompt_tokens)
    theirs = [int(t) for (t, _), _ in zip(generate_step(ids, model, max_tokens=160), range(len(ref.tokens)))]
    assert theirs == ref.tokens


@requires_model("qwen2.5-coder-0.5b")
def test_qwen_coder_parity():
    prompt = PROMPTS["code_textwrap_doc"]
    ref = reference("qwen2.5-coder-0.5b", prompt, max_tokens=64)
    out = spec("qwen2.5-coder-0.5b", prompt, max_tokens=64, drafter="ngram", num_draft_tokens=4)
    assert out.tokens == ref.tokens
