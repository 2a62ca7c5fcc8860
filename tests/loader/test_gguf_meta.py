"""``specdec.loader.gguf_meta``: a GGUF written here (gguf's own writer, a tiny random
tensor set) reads back into the config mlx-lm's classes take; each unsupported file is
refused with a ``ModelLoadError`` that says what to do."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from specdec.loader.errors import ModelLoadError
from specdec.loader.gguf_meta import GEMMA3_SWA_PATTERN, build_config, open_gguf, quant_summary

HIDDEN, HEADS, VOCAB = 8, 2, 16


def write(path, arch="llama", skip=(), extra=None, tensors=("token_embd.weight",)):
    """A GGUF with the keys ``build_config`` needs (all but ``skip``), ``extra`` keys
    (value -> writer by type) and f32 tensors by name."""
    w = gguf.GGUFWriter(str(path), arch)
    keys = {f"{arch}.embedding_length": HIDDEN, f"{arch}.attention.head_count": HEADS,
            f"{arch}.block_count": 2, f"{arch}.feed_forward_length": 16,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-6, f"{arch}.context_length": 128,
            "general.file_type": 0}
    keys.update(extra or {})
    for key, value in keys.items():
        if key in skip:
            continue
        if isinstance(value, bool) or isinstance(value, list):
            w.add_array(key, value) if isinstance(value, list) else w.add_bool(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value)
    for name in tensors:
        rows = VOCAB if name in ("token_embd.weight", "output.weight") else HIDDEN
        w.add_tensor(name, np.random.default_rng(0).standard_normal((rows, HIDDEN)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_llama_file_reads_back_into_its_config(tmp_path):
    g = open_gguf(write(tmp_path / "m.gguf", extra={"tokenizer.ggml.bos_token_id": 1}))
    config = build_config(g, eos_ids=[2])
    assert config["model_type"] == "llama" and config["hidden_size"] == HIDDEN
    assert config["num_attention_heads"] == config["num_key_value_heads"] == HEADS
    assert config["head_dim"] == HIDDEN // HEADS and config["vocab_size"] == VOCAB
    assert config["num_hidden_layers"] == 2 and config["max_position_embeddings"] == 128
    assert config["rms_norm_eps"] == pytest.approx(1e-6) and config["rope_theta"] == 10_000.0
    assert config["tie_word_embeddings"] and not config["attention_bias"]
    assert (config["eos_token_id"], config["bos_token_id"]) == ([2], 1)
    assert "rope_scaling" not in config
    summary = quant_summary(g)
    assert summary == {"file_type": "ALL_F32", "tensor_types": {"F32": 1}, "low_bit": False}


def test_an_output_matrix_unties_the_embeddings_and_linear_rope_scaling_carries_over(tmp_path):
    g = open_gguf(write(tmp_path / "m.gguf", tensors=("token_embd.weight", "output.weight"),
                        extra={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0}))
    config = build_config(g, eos_ids=[])
    assert not config["tie_word_embeddings"]
    assert config["rope_scaling"] == {"type": "linear", "factor": 2.0}


def test_gemma3_gets_llama_cpps_constants_and_the_period_of_its_layer_flags(tmp_path):
    base = {"gemma3.attention.sliding_window": 4}
    g = open_gguf(write(tmp_path / "a.gguf", "gemma3", extra=base))
    config = build_config(g, eos_ids=[1])
    assert config["model_type"] == "gemma3_text" and config["sliding_window"] == 4
    assert config["sliding_window_pattern"] == GEMMA3_SWA_PATTERN
    assert config["query_pre_attn_scalar"] == HIDDEN // HEADS
    flags = {"gemma3.attention.sliding_window_pattern": [True, False]}  # every 2nd layer global
    g = open_gguf(write(tmp_path / "b.gguf", "gemma3", extra={**base, **flags}))
    assert build_config(g, eos_ids=[1])["sliding_window_pattern"] == 2


def test_a_missing_or_foreign_file_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found: .*Check the path"):
        open_gguf(tmp_path / "absent.gguf")
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not gguf")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        open_gguf(tmp_path / "x.gguf")
    data = write(tmp_path / "t.gguf").read_bytes()
    (tmp_path / "t.gguf").write_bytes(data[:40])
    with pytest.raises(ModelLoadError, match="Cannot read GGUF file .*Is it truncated"):
        open_gguf(tmp_path / "t.gguf")


def test_an_unsupported_architecture_names_the_supported_ones(tmp_path):
    with pytest.raises(ModelLoadError,
                       match="architecture 'mamba'.*Supported GGUF architectures: llama, qwen2, gemma3"):
        open_gguf(write(tmp_path / "m.gguf", "mamba"))


@pytest.mark.parametrize("skip, extra, message", [
    (("llama.block_count",), {}, "lacks the GGUF key 'llama.block_count'.*Re-export it"),
    ((), {"llama.rope.dimension_count": 2}, r"partial rotary embeddings \(rope dims 2 of head dim 4\)"),
    ((), {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0},
     "RoPE scaling type 'longrope' is not supported"),
    ((), {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0},
     "lacks the GGUF key 'llama.rope.scaling.original_context_length'"),
])
def test_what_the_converter_cannot_translate_is_refused(tmp_path, skip, extra, message):
    g = open_gguf(write(tmp_path / "m.gguf", skip=skip, extra=extra))
    with pytest.raises(ModelLoadError, match=message):
        build_config(g, eos_ids=[])
