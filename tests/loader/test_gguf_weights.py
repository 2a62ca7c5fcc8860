"""``specdec.loader.gguf_weights``: tensor names map to mlx-lm's, unknown ones are refused,
``unpermute_rows`` inverts llama.cpp's permutation, safetensors shards round-trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import load_file

from specdec.loader import gguf_weights
from specdec.loader.errors import ModelLoadError
from specdec.loader.gguf_weights import hf_name, unpermute_rows, write_safetensors


def llama_cpp_permute(w, n_head):
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py), the oracle."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3))
def test_unpermute_rows_inverts_llama_cpps_permute(n_head, half, cols):
    w = np.arange(n_head * 2 * half * cols, dtype=np.float32).reshape(n_head * 2 * half, cols)
    assert np.array_equal(unpermute_rows(llama_cpp_permute(w, n_head), n_head), w)


def test_rows_that_do_not_split_over_the_heads_are_refused():
    with pytest.raises(ModelLoadError, match="Cannot un-permute 6 rows over 2 heads"):
        unpermute_rows(np.zeros((6, 2)), 2)


def test_names_map_to_mlx_lms_and_unknown_ones_say_what_to_use():
    assert hf_name("llama", "token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("llama", "blk.3.attn_q.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert hf_name("qwen2", "blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias"
    for name in ("blk.0.attn_rotary.weight", "rope_freqs"):
        with pytest.raises(ModelLoadError, match=f"Unexpected tensor '{name}' in a llama GGUF file"):
            hf_name("llama", name)


def test_safetensors_shards_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_weights, "SHARD_BYTES", 100)  # a shard closes at its second tensor
    tensors = [(f"t{i}", np.full((4, 4), i, np.float32)) for i in range(5)]
    count = write_safetensors(iter(tensors), tmp_path)
    got = {}
    for f in sorted(tmp_path.glob("*.safetensors")):
        got.update(load_file(str(f)))
    assert count == len(list(tmp_path.glob("*.safetensors"))) == 3  # 64 bytes each: 2 + 2 + 1
    assert sorted(got) == [n for n, _ in tensors]
    assert all(np.array_equal(got[n], w) for n, w in tensors)


def test_a_duplicate_tensor_is_a_malformed_file(tmp_path):
    w = np.zeros((2, 2), np.float32)
    with pytest.raises(ModelLoadError, match="Duplicate tensor a in GGUF file"):
        write_safetensors([("a", w), ("a", w)], tmp_path)
