"""GGUF tensors -> float32 numpy arrays under Hugging Face names, written as safetensors.

Contract: ``iter_hf_tensors`` yields every tensor in HF layout with llama.cpp's converter
transformations undone (llama's q/k RoPE permutation, gemma3's norm ``+ 1``); an unknown
name or quantization raises ``ModelLoadError``; ``write_safetensors`` writes ~1 GiB shards.
Dequantization is exact. Nothing here imports mlx.
Tests: tests/loader/test_gguf_weights.py, through the loader, tests/loader/test_api.py.
Details: docs/loading.md#gguf-weights."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from .errors import ModelLoadError
from .gguf_meta import GGUFFile

_TOP_LEVEL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_COMMON = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
}
_BLOCK_BY_ARCH = {
    "llama": {**_BLOCK_COMMON, "ffn_norm": "post_attention_layernorm"},
    "qwen2": {**_BLOCK_COMMON, "ffn_norm": "post_attention_layernorm"},
    "gemma3": {
        **_BLOCK_COMMON,
        # Gemma 3 has four norms per block; llama.cpp's names differ from HF's.
        "ffn_norm": "pre_feedforward_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
    },
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
SHARD_BYTES = 1 << 30


def hf_name(arch: str, gguf_name: str) -> str:
    if gguf_name in _TOP_LEVEL:
        return _TOP_LEVEL[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    table = _BLOCK_BY_ARCH[arch]
    if m is None or m.group(2) not in table:
        raise ModelLoadError(
            f"Unexpected tensor {gguf_name!r} in a {arch} GGUF file; this converter does not "
            "know where it belongs (a variant architecture?). Use the model's mlx-lm / Hugging "
            "Face version instead."
        )
    layer, part, kind = m.groups()
    return f"model.layers.{layer}.{table[part]}.{kind}"


def dequantize(tensor: Any, path: Path) -> np.ndarray:
    """One GGUF tensor as a float32 array in numpy (HF) dimension order."""
    from gguf.quants import dequantize as gguf_dequantize  # heavy dependency: see gguf_meta.open_gguf

    shape = tuple(int(d) for d in reversed(tensor.shape))
    try:
        values = gguf_dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise ModelLoadError(
            f"{path}: tensor {tensor.name} uses quantization {tensor.tensor_type.name}, which "
            "the gguf package cannot decode. Re-quantize the model to a common type "
            "(Q4_K_M, Q8_0, F16) or upgrade gguf: pip install -U gguf"
        ) from None
    return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``LlamaModel.permute`` (rows grouped per head, pairs split)."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ModelLoadError(f"Cannot un-permute {rows} rows over {n_head} heads.")
    out = w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2)
    return np.ascontiguousarray(out.reshape(w.shape))


def iter_hf_tensors(g: GGUFFile, config: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    for tensor in g.reader.tensors:
        name = hf_name(g.arch, tensor.name)
        w = dequantize(tensor, g.path)
        if g.arch == "llama":
            if tensor.name.startswith("blk.") and ".attn_q." in tensor.name:
                w = unpermute_rows(w, config["num_attention_heads"])
            elif tensor.name.startswith("blk.") and ".attn_k." in tensor.name:
                w = unpermute_rows(w, config["num_key_value_heads"])
        elif g.arch == "gemma3" and tensor.name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        yield name, w


def write_safetensors(tensors: Iterable[tuple[str, np.ndarray]], out_dir: Path) -> int:
    shard: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    size = count = 0

    def flush() -> None:
        nonlocal shard, size, count
        count += 1
        save_file(shard, str(out_dir / f"model-{count:05d}.safetensors"), metadata={"format": "mlx"})
        shard, size = {}, 0

    for name, arr in tensors:
        if name in seen:
            raise ModelLoadError(f"Duplicate tensor {name} in GGUF file; the file is malformed.")
        seen.add(name)
        shard[name] = arr
        size += arr.nbytes
        if size >= SHARD_BYTES:
            flush()
    if shard or count == 0:
        flush()
    return count
