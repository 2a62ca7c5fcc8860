"""GGUF metadata -> a Hugging Face style ``config.json`` for mlx-lm's model classes.

Contract: ``open_gguf`` (``ModelLoadError`` for a bad file or an architecture outside
``SUPPORTED_ARCHS``), ``build_config`` (llama / qwen2 / gemma3_text; llama.cpp's constants
where it hard-codes them), ``quant_summary``. Nothing here imports mlx.
Tests: tests/loader/test_gguf_meta.py, through the loader, tests/loader/test_api.py. Details:
docs/loading.md#gguf-metadata."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ModelLoadError

# GGUF architecture -> mlx-lm model_type (module under mlx_lm.models)
SUPPORTED_ARCHS = {"llama": "llama", "qwen2": "qwen2", "gemma3": "gemma3_text"}

# llama.cpp (src/llama-model.cpp) hard-codes these for gemma3 rather than storing them.
GEMMA3_SWA_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10_000.0
_LOW_BIT_PREFIXES = ("MOSTLY_Q2", "MOSTLY_Q3", "MOSTLY_Q4", "MOSTLY_IQ1", "MOSTLY_IQ2",
                     "MOSTLY_IQ3", "MOSTLY_IQ4", "MOSTLY_TQ")
_LOW_BIT_TYPES = {"Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "IQ1_S", "IQ1_M", "IQ2_XXS",
                  "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"}
# Arrays we never need decoded into Python lists here (the tokenizer reads them itself).
_BULKY = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
          "tokenizer.ggml.merges")


@dataclass
class GGUFFile:
    path: Path
    reader: Any  # gguf.GGUFReader
    arch: str
    meta: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get(key.format(arch=self.arch), default)

    def require(self, key: str) -> Any:
        full = key.format(arch=self.arch)
        if full not in self.meta:
            raise ModelLoadError(
                f"{self.path} lacks the GGUF key {full!r}; the file is incomplete or from an "
                "unsupported converter. Re-export it with a current llama.cpp convert_hf_to_gguf.py."
            )
        return self.meta[full]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        # ggml lists dimensions fastest-first; numpy/HF order is the reverse.
        return {t.name: tuple(int(d) for d in reversed(t.shape)) for t in self.reader.tensors}


def open_gguf(path: Path) -> GGUFFile:
    import gguf  # heavy dependency (0.2 s to import), GGUF files only: `specdec` starts without it

    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}. Check the path.")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelLoadError(f"{path} is not a GGUF file (no GGUF magic bytes).")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises assorted errors for truncated files
        raise ModelLoadError(f"Cannot read GGUF file {path}: {exc}. Is it truncated?") from exc
    meta = {k: f.contents() for k, f in reader.fields.items() if k not in _BULKY}
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"{path} has architecture {arch!r}, which specdec cannot convert. Supported GGUF "
            f"architectures: {', '.join(SUPPORTED_ARCHS)}. For other models use an mlx-lm "
            "model directory or Hugging Face repo instead."
        )
    return GGUFFile(path=path, reader=reader, arch=arch, meta=meta)


def build_config(g: GGUFFile, eos_ids: list[int]) -> dict[str, Any]:
    shapes = g.tensor_shapes()
    hidden = int(g.require("{arch}.embedding_length"))
    heads = int(g.require("{arch}.attention.head_count"))
    head_dim = int(g.get("{arch}.attention.key_length", hidden // heads))
    config: dict[str, Any] = {
        "model_type": SUPPORTED_ARCHS[g.arch],
        "hidden_size": hidden,
        "num_hidden_layers": int(g.require("{arch}.block_count")),
        "intermediate_size": int(g.require("{arch}.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g.get("{arch}.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(g.require("{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(g.get("{arch}.rope.freq_base", 10_000.0)),
        "max_position_embeddings": int(g.get("{arch}.context_length", 4096)),
        "vocab_size": shapes["token_embd.weight"][0],
        "tie_word_embeddings": "output.weight" not in shapes,
        "eos_token_id": eos_ids,
    }
    if (bos := g.get("tokenizer.ggml.bos_token_id")) is not None:
        config["bos_token_id"] = int(bos)
    _check_rope_dims(g, head_dim)
    if (scaling := _rope_scaling(g)) is not None:
        config["rope_scaling"] = scaling
    if g.arch == "llama":
        # Some llama-arch exports carry biases; mlx-lm's llama only creates them on request.
        config["attention_bias"] = "blk.0.attn_q.bias" in shapes
        config["mlp_bias"] = "blk.0.ffn_up.bias" in shapes
    if g.arch == "qwen2" and head_dim != hidden // heads:
        raise ModelLoadError(f"{g.path}: qwen2 with head_dim != hidden/heads is not supported.")
    if g.arch == "gemma3":
        config.update(_gemma3_extras(g, config))
    return config


def _check_rope_dims(g: GGUFFile, head_dim: int) -> None:
    rot = g.get("{arch}.rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        raise ModelLoadError(
            f"{g.path}: partial rotary embeddings (rope dims {rot} of head dim {head_dim}) are "
            "not supported by the mlx-lm model classes specdec uses."
        )
    if "rope_freqs.weight" in g.tensor_shapes():
        raise ModelLoadError(
            f"{g.path} uses llama3-style RoPE frequency factors (rope_freqs.weight), which "
            "this converter does not translate. Use the model's mlx-lm / Hugging Face version."
        )


def _rope_scaling(g: GGUFFile) -> dict[str, Any] | None:
    kind = g.get("{arch}.rope.scaling.type")
    factor = g.get("{arch}.rope.scaling.factor")
    if kind in (None, "none") or factor in (None, 1.0):
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(factor)}
    if kind == "yarn":
        orig = g.require("{arch}.rope.scaling.original_context_length")
        return {"type": "yarn", "factor": float(factor),
                "original_max_position_embeddings": int(orig)}
    raise ModelLoadError(f"{g.path}: RoPE scaling type {kind!r} is not supported.")


def _gemma3_extras(g: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    if g.get("{arch}.final_logit_softcapping") is not None:
        raise ModelLoadError(f"{g.path}: final logit soft-capping is not supported for gemma3.")
    layers = config["num_hidden_layers"]
    # llama.cpp: attention scale is 1/sqrt(head_dim), except Gemma 3 27B (62 layers), which
    # uses 1/sqrt(hidden/heads); query_pre_attn_scalar is the square of its inverse.
    scalar = config["head_dim"]
    if layers == 62:
        scalar = config["hidden_size"] // config["num_attention_heads"]
    return {
        "sliding_window": int(g.require("{arch}.attention.sliding_window")),
        "sliding_window_pattern": _swa_pattern(g, layers),
        "query_pre_attn_scalar": scalar,
        "rope_local_base_freq": float(g.get("{arch}.rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE)),
    }


def _swa_pattern(g: GGUFFile, layers: int) -> int:
    raw = g.get("{arch}.attention.sliding_window_pattern")
    if raw is None:
        return GEMMA3_SWA_PATTERN
    if isinstance(raw, int):
        return raw
    # Newer files store one bool per layer (True = sliding); mlx-lm wants the period n
    # such that every n-th layer is global.
    flags = [bool(x) for x in raw]
    for n in range(1, layers + 1):
        if all(flags[i] == ((i + 1) % n != 0) for i in range(len(flags))):
            return n
    raise ModelLoadError(f"{g.path}: irregular sliding-window layer pattern is not supported.")


def quant_summary(g: GGUFFile) -> dict[str, Any]:
    import gguf  # heavy dependency: see open_gguf

    types = Counter(t.tensor_type.name for t in g.reader.tensors)
    file_type = g.get("general.file_type")
    name = None
    if file_type is not None:
        try:
            name = gguf.LlamaFileType(int(file_type)).name
        except ValueError:
            name = None
    if name is not None:
        low_bit = name.startswith(_LOW_BIT_PREFIXES)
    else:  # no declared file type: judge by the element-weighted majority of matrices
        weights: Counter[bool] = Counter()
        for t in g.reader.tensors:
            if len(t.shape) >= 2:
                weights[t.tensor_type.name in _LOW_BIT_TYPES] += int(t.n_elements)
        low_bit = weights[True] > weights[False]
    return {"file_type": name, "tensor_types": dict(types), "low_bit": low_bit}
