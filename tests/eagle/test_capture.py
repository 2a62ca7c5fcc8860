"""Feature capture: the recorded layer inputs equal a manual layer-by-layer run, the forward's
logits are unchanged, and the model is restored (also after an error)."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.base import create_attention_mask

from specdec.eagle.capture import capture_layers

from .conftest import tiny_target


def _manual_inputs(model, ids, wanted):
    h = model.model.embed_tokens(ids)
    mask = create_attention_mask(h, None)
    out = {}
    for i, layer in enumerate(model.model.layers):
        if i in wanted:
            out[i] = h
        h = layer(h, mask, None)
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_capture_equals_manual_layer_inputs_and_restores(arch):
    model = tiny_target(arch)
    ids = mx.array([[3, 14, 15, 92, 65, 35, 8]])
    before = list(model.model.layers)
    plain = model(ids)
    with capture_layers(model, (1, 3, 4)) as cap:
        logits = model(ids)
    assert model.model.layers == before
    assert mx.array_equal(logits, plain)
    ref = _manual_inputs(model, ids, {1, 3, 4})
    fused = cap.fused_input()
    assert fused.shape == (1, 7, 3 * model.args.hidden_size)
    assert mx.allclose(fused, mx.concatenate([ref[1], ref[3], ref[4]], -1), atol=1e-5)


def test_capture_restores_after_error_and_rejects_bad_ids():
    model = tiny_target("llama")
    before = list(model.model.layers)
    with pytest.raises(RuntimeError, match="boom"):
        with capture_layers(model, (0, 2, 5)):
            raise RuntimeError("boom")
    assert model.model.layers == before
    with pytest.raises(ValueError, match="out of range"):
        with capture_layers(model, (0, 9)):
            pass
    with capture_layers(model, (0, 1, 2)) as cap:
        pass
    with pytest.raises(RuntimeError, match="no forward"):
        cap.fused_input()


def test_the_layer_count_names_the_last_layers_output_the_final_norms_input():
    """MTP heads read the target's last hidden state: id L (the layer count) is the last
    layer's output; normed and through the head it gives the forward's own logits."""
    model = tiny_target("qwen3")
    ids = mx.array([[3, 14, 15, 92, 65, 35, 8]])
    n = len(model.model.layers)
    plain = model(ids)
    with capture_layers(model, (n - 1, n)) as cap:
        logits = model(ids)
    assert mx.array_equal(logits, plain)
    assert all(not hasattr(layer, "sink") for layer in model.model.layers)
    ref = _manual_inputs(model, ids, {n - 1})
    assert mx.allclose(cap.hidden[n - 1], ref[n - 1], atol=1e-5)
    head = model.model.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head
    assert mx.allclose(head(model.model.norm(cap.hidden[n])), plain, atol=1e-4)
    with pytest.raises(ValueError, match="out of range"):
        with capture_layers(model, (n + 1,)):
            pass
