"""One-pass distillation (``one_pass``): the answers are mlx-lm BatchGenerator's greedy tokens,
and each position's features and top-k, taken from the answering forwards (prefill chunks and
decode steps), are a fresh uncached forward's (``samples_of``) within rounding."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.core.text import encode_prompt
from specdec.eagle import one_pass as one_pass_module
from specdec.eagle.data import DataSpec, batch_answerer, samples_of
from specdec.eagle.one_pass import one_pass

from .conftest import tiny_target

SPEC = DataSpec((1, 3, 4), top_k=4)
PROMPTS = [[3, 5, 7, 11, 13, 17, 19], [2, 4], [11], [60, 61, 9, 8, 40]]
# one float16 step at the position's largest |feature|: cached decoding and one uncached forward
# round apart by less (SmolLM2 fp32: 1e-4 here; 6.8e-4 over a 33-prompt shard against the
# two-pass data, lab/eagle-one-pass-distill/)
FEATURE_TOL = 2.0 ** -10
# float16 steps between log-probs: SmolLM2's float32 logits at one prompt position of three
# prompts came ~1e-3 apart (a 33-token prefill against a 42-token forward), two steps stored
LOGP_STEPS = 2


def _fp16_step(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One float16 ulp (the storage step of log-probs) at the larger of each pair."""
    return np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float16)).astype(np.float32)


def _check_against_uncached(target, prompts, got, spec) -> float:
    """``got`` (one_pass's samples) against ``samples_of`` over the same tokens: top-k ids equal,
    log-probs within ``LOGP_STEPS`` float16 steps, features within ``FEATURE_TOL`` x the position's largest
    |feature|; returns the largest such relative feature difference."""
    worst = 0.0
    for p, s in zip(prompts, got):
        ref = samples_of(target, [p], [s.tokens[len(p):].tolist()], spec)[0]
        assert np.array_equal(s.tokens, ref.tokens) and np.array_equal(s.answer, ref.answer)
        assert np.array_equal(s.topk_ids, ref.topk_ids)
        lp, ref_lp = s.topk_logp.astype(np.float32), ref.topk_logp.astype(np.float32)
        assert np.all(np.abs(lp - ref_lp) <= LOGP_STEPS * _fp16_step(lp, ref_lp))
        f, ref_f = s.features.astype(np.float32), ref.features.astype(np.float32)
        scale = np.abs(ref_f).max(-1, keepdims=True)
        worst = max(worst, float((np.abs(f - ref_f) / scale).max()))
    assert worst <= FEATURE_TOL, worst
    return worst


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_answers_are_batch_generators_and_positions_an_uncached_forwards(arch, monkeypatch):
    """Mixed prompt lengths (one of a single token), a stop token that ends one row early, and
    a prefill split into chunks of 2 positions: the same answers as ``batch_answerer``, every
    answer token marked as the target's argmax, samples in prompt order."""
    target = tiny_target(arch)
    free = batch_answerer(target, 10, eos=())(PROMPTS)
    cut = next(i for i in range(2, 10) if free[0][i] not in free[0][:i])
    stop = free[0][cut]  # row 0 stops after ``cut`` tokens (others wherever they meet it)
    want = batch_answerer(target, 10, eos=(stop,))(PROMPTS)
    monkeypatch.setattr(one_pass_module, "PREFILL_POSITIONS", 8)  # 4 rows: 2 positions a chunk
    got = one_pass(target, 10, eos=(stop,))(PROMPTS, SPEC)
    assert [s.tokens[len(p):].tolist() for p, s in zip(PROMPTS, got)] == want
    assert len(want[0]) == cut and any(len(a) == 10 for a in want)
    for p, s in zip(PROMPTS, got):
        assert s.tokens[:len(p)].tolist() == p and s.answer[len(p):].all()
        assert len(s.features) == len(s.topk_ids) == len(s.tokens)
    _check_against_uncached(target, PROMPTS, got, SPEC)


def test_samples_are_cut_at_max_len_as_the_uncached_forwards():
    """``max_len`` keeps the first positions of prompt + answer, a prompt longer than it
    included; each kept position is still the uncached forward's."""
    target = tiny_target("llama")
    spec = DataSpec((1, 3, 4), top_k=4, max_len=6)
    got = one_pass(target, 10, eos=())(PROMPTS, spec)
    assert [len(s.tokens) for s in got] == [6, 6, 6, 6]
    full = batch_answerer(target, 10, eos=())(PROMPTS)
    assert [s.tokens.tolist() for s in got] == [(p + a)[:6] for p, a in zip(PROMPTS, full)]
    _check_against_uncached(target, PROMPTS, got, spec)


def test_one_pass_refuses_an_empty_prompt():
    with pytest.raises(ValueError, match="no empty prompt"):
        one_pass(tiny_target("llama"), 4, eos=())([[1, 2], []], SPEC)


@pytest.mark.slow
def test_smollm2_answers_and_positions_match_the_two_pass_distillation(smollm):
    """SmolLM2 (fp32, its chat template, default layers 2/15/27): the same greedy answers as
    BatchGenerator, every position within float16 storage of an uncached forward (measured:
    features 1e-4 of the position's largest |feature|, log-probs two fp16 steps at most)."""
    model, tok = smollm
    prompts = [encode_prompt(tok, t) for t in
               ("What is a list in Python?", "Translate into French: good morning",
                "Name three colors.")]
    spec = DataSpec((2, 15, 27), top_k=8)
    got = one_pass(model, 8, tok.eos_token_ids)(prompts, spec)
    want = batch_answerer(model, 8, tok.eos_token_ids)(prompts)
    assert [s.tokens[len(p):].tolist() for p, s in zip(prompts, got)] == want
    worst = _check_against_uncached(model, prompts, got, spec)
    print(f"largest feature difference / row max: {worst:.2g}")
