"""What Ollama's clients read about the served model (``specdec.server.wires.ollama_models``):
parameter count, bytes and quantization label of real (tiny) mlx models, plain and
quantized, the /api/tags card, /api/show's capabilities, and Ollama's timestamps."""

from __future__ import annotations

from datetime import datetime

import mlx.core as mx
import mlx.nn as nn
from conftest import cached_tiny

from specdec.server.wires.ollama_models import Weights, model_card, now, show, weights

from .tiny_api import TOOLS_TEMPLATE, tiny_api


def mlp(dtype=mx.float32):
    m = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 64, bias=False))
    m.set_dtype(dtype)
    return m


def test_weights_plain_and_quantized():
    assert weights(mlp()) == Weights(2 * 64 * 128, 2 * 64 * 128 * 4, "F32")
    assert weights(mlp(mx.bfloat16)).quantization == "BF16"
    q = mlp()
    nn.quantize(q, group_size=64, bits=4)
    w = weights(q)
    assert w.count == 2 * 64 * 128 and w.quantization == "Q4"  # scales are not parameters
    assert w.size < 2 * 64 * 128 * 4 // 4


def test_the_card_and_show():
    model = cached_tiny("llama")
    api = tiny_api(TOOLS_TEMPLATE, model, served_model_name="tiny", temp=0.7)
    card = model_card(api)
    details = card.listing["details"]
    assert card.listing["name"] == "tiny:latest" and details["family"] == "llama"
    assert details["parameter_size"] == f"{weights(model).count / 1e6:.0f}M"
    assert card.info["llama.context_length"] == 2048 and card.info["llama.block_count"] == 2
    assert card.listing["digest"] == model_card(api).listing["digest"]  # the same weights
    shown = show(api, card, thinks=True)
    assert shown["capabilities"] == ["completion", "tools", "thinking"]
    assert "PARAMETER temperature    0.7" in shown["modelfile"]
    assert show(tiny_api(model=model), card, thinks=False)["capabilities"] == ["completion"]


def test_a_model_that_cannot_be_measured_still_gets_a_card():
    card = model_card(tiny_api(model=object()))
    assert card.listing["size"] == 0 and card.listing["details"]["parameter_size"] == ""
    assert card.info["general.architecture"] == "unknown"


def test_timestamps_are_utc_rfc3339():
    stamp = now()
    assert stamp.endswith("Z") and datetime.fromisoformat(stamp[:-1]).microsecond >= 0
