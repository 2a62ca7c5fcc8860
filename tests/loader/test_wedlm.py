"""``specdec.loader.wedlm``: which configs are WeDLM's, the base type read from the weights'
headers alone, and what a wrong directory is told (no model is loaded here; loading a
synthetic checkpoint: tests/decode/test_wedlm.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from specdec.loader.errors import ModelLoadError
from specdec.loader.wedlm import base_type, is_wedlm_config, is_wedlm_dir, load_wedlm, read_config


@pytest.mark.parametrize("config, want", [
    ({"model_type": "WeDLM"}, True),
    ({"architectures": ["WeDLMForDiffusionLM"]}, True),
    ({"architectures": ["WeDLMForCausalLM"]}, True),
    ({"architectures": ["wedlm_custom"]}, True),
    ({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}, False),
    ({}, False),
])
def test_a_wedlm_config_names_wedlm_in_its_type_or_architecture(config, want):
    assert is_wedlm_config(config) is want


def weights(path, names):
    save_file({n: np.zeros((2,), np.float32) for n in names}, str(path / "model.safetensors"))


def test_the_base_type_comes_from_the_weight_names(tmp_path):
    weights(tmp_path, ["model.layers.0.self_attn.q_proj.weight"])
    assert base_type(tmp_path) == "qwen2"
    weights(tmp_path, ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_norm.weight"])
    assert base_type(tmp_path) == "qwen3"


def test_a_wrong_directory_says_what_to_point_at(tmp_path):
    assert not is_wedlm_dir(tmp_path)
    with pytest.raises(ModelLoadError, match="has no config.json: point at a WeDLM checkpoint directory"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert not is_wedlm_dir(tmp_path)
    with pytest.raises(ModelLoadError, match="is not a WeDLM checkpoint .*model_type 'qwen3'.*tencent/WeDLM"):
        load_wedlm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "wedlm"}))
    assert is_wedlm_dir(tmp_path)
    with pytest.raises(ModelLoadError, match="has no \\*.safetensors weights: download the whole checkpoint"):
        load_wedlm(tmp_path)
