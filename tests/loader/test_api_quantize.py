"""Selective re-quantization of low-bit GGUFs (the GPU dtype policy, forced on CPU with
``dtype="native"``): every layer goes to 4 bits except the embeddings and ``lm_head``,
which stay at 8 bits, and the choice is logged.

The policy casts to float16 before quantizing, and mlx-cpu runs float16 (quantized)
matmuls ~30x slower than float32 ones (a 135M forward takes minutes on 2 cores), so the
loaded ``native`` model is only inspected; the tests that run a model apply the same
``quantize_selective`` to the float32 load instead."""

from __future__ import annotations

import logging

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_map

import specdec
from specdec.loader import load
from specdec.loader.api import quantize_selective
from specdec.core.text import encode_prompt

LOGGER = "specdec.loader.api"
HEAD_BITS, QUANT_BITS = 8, 4  # literals: a policy change has to change these tests too
PROMPT = "Write a Python function that returns the sum of a list of numbers."


def _quantized_layers(model) -> dict[str, int]:
    """{path: bits} of every quantized leaf module."""
    return {path: m.bits for path, m in model.named_modules()
            if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}


def _float_linears(model) -> list[str]:
    return [path for path, m in model.named_modules() if type(m) in (nn.Linear, nn.Embedding)]


@pytest.fixture(scope="module")
def native_smollm():
    """SmolLM2-135M (a Q4_1 GGUF) under the GPU policy, with the log records of its load."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger(LOGGER)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        model, tok = load("smollm2-135m", dtype="native")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return model, tok, records


@pytest.mark.slow
def test_embeddings_stay_8_bit_and_every_other_layer_is_4_bit(native_smollm):
    model, _, _ = native_smollm
    bits = _quantized_layers(model)
    # SmolLM2 ties its output head to the embeddings: one module serves both
    assert not hasattr(model, "lm_head")
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)
    assert bits.pop("model.embed_tokens") == HEAD_BITS
    assert len(bits) == 30 * 7  # 30 blocks x (q, k, v, o, gate, up, down)
    assert set(bits.values()) == {QUANT_BITS}
    assert _float_linears(model) == []


@pytest.mark.slow
def test_the_choice_is_logged_once(native_smollm):
    _, _, records = native_smollm
    lines = [r.getMessage() for r in records if "kept at" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "210 layers to 4 bits" in lines[0]
    assert f"kept at {HEAD_BITS} bits: model.embed_tokens" in lines[0]
    assert "tied" in lines[0]


def test_untied_lm_head_stays_8_bit(caplog):
    from mlx_lm.models import llama

    args = llama.ModelArgs(model_type="llama", hidden_size=64, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                           rms_norm_eps=1e-5, num_hidden_layers=2, tie_word_embeddings=False)
    model = llama.Model(args)
    mx.random.seed(0)
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, model.parameters()))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        kept = quantize_selective(model)
    assert kept == {"model.embed_tokens": HEAD_BITS, "lm_head": HEAD_BITS}
    assert isinstance(model.lm_head, nn.QuantizedLinear) and model.lm_head.bits == HEAD_BITS
    bits = _quantized_layers(model)
    assert {p: b for p, b in bits.items() if p not in kept} == {
        f"model.layers.{i}.{m}": QUANT_BITS for i in range(2)
        for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                  "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert line.endswith("kept at 8 bits: model.embed_tokens, lm_head")


def _last_logits(model, ids) -> np.ndarray:
    return np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))


@pytest.fixture(scope="module")
def selective_smollm():
    model, tok = load("smollm2-135m", dtype="float32")
    quantize_selective(model)
    return model, tok


@pytest.mark.slow
def test_8_bit_head_is_closer_to_float32_than_an_all_4_bit_model(selective_smollm):
    model, tok = selective_smollm
    ids = encode_prompt(tok, PROMPT)
    everything, _ = load("smollm2-135m", dtype="float32")
    exact = _last_logits(everything, ids)  # read before it is quantized below: one load, not two
    selective = _last_logits(model, ids)
    nn.quantize(everything, 64, QUANT_BITS)  # the old policy: the head at 4 bits too
    assert everything.model.embed_tokens.bits == QUANT_BITS
    all_4 = _last_logits(everything, ids)
    err_selective = np.abs(selective - exact).mean()
    err_all_4 = np.abs(all_4 - exact).mean()
    assert err_selective < err_all_4, (err_selective, err_all_4)
    assert selective.argmax() == exact.argmax()
    # measured here: mean |error| 1.12 vs 1.39, correlation 0.934 vs 0.894
    assert np.corrcoef(selective, exact)[0, 1] > np.corrcoef(all_4, exact)[0, 1]


@pytest.mark.slow
def test_selectively_quantized_model_generates_plain_and_speculative(selective_smollm):
    model, tok = selective_smollm
    plain = specdec.generate(model, tok, PROMPT, drafter=None, max_tokens=8)
    assert len(plain.tokens) == 8 and plain.text.strip()
    spec = specdec.generate(model, tok, PROMPT, drafter="ngram", max_tokens=8)
    # greedy: speculative decoding must reproduce plain decoding token for token
    assert spec.tokens == plain.tokens
