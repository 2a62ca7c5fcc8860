"""``load(model, dtype=...)``: any supported model reference -> (mlx model, TokenizerWrapper).

Contract: ``model`` is a packaged name, a GGUF file or mlx-lm directory, or a Hugging Face
repo id (else ``ModelLoadError`` listing the forms); the model is always an mlx-lm class
loaded by ``mlx_lm.utils.load``. ``dtype="auto"``: float32 on CPU, ``"native"`` on GPU
(low-bit GGUFs re-quantized to 4 bits with embeddings and head at 8); explicit float dtypes
dequantize and cast. Tests: tests/loader/test_api.py, tests/loader/test_api_quantize.py.
Details: docs/loading.md#loading."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backend import default_dtype
from .convert import convert_gguf, read_marker
from .errors import ModelLoadError
from .registry import PACKAGED_MODELS, get_packaged, packaged_gguf_path

DTYPES = ("auto", "native", "float32", "float16", "bfloat16")
QUANT_GROUP_SIZE = 64
QUANT_BITS = 4
HEAD_BITS = 8  # embeddings and lm_head: docs/loading.md#loading

log = logging.getLogger(__name__)

# mlx and mlx-lm are imported inside the functions that load: specdec.cli imports this
# module before it preloads OpenBLAS, and mlx must load after that.
if TYPE_CHECKING:
    import mlx.nn as nn
    from mlx_lm.tokenizer_utils import TokenizerWrapper

_HF_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def load(
    model: str | os.PathLike = "smollm2-135m", *, dtype: str = "auto"
) -> tuple[nn.Module, TokenizerWrapper]:
    """Load a packaged model, GGUF file, mlx-lm directory or HF repo; docs/loading.md#loading."""
    model = os.fspath(model)
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}; use one of: {', '.join(DTYPES)}.")
    kind, ref = resolve(model)
    gguf_info = None
    if kind == "gguf":
        ref = str(convert_gguf(Path(ref)))
        gguf_info = read_marker(Path(ref))
    mlx_model, tokenizer = _mlx_lm_load(ref, kind)
    if kind == "mlx" and Path(ref).is_dir():  # where --draft-type mtp finds the mtp.* weights
        mlx_model.specdec_source = str(Path(ref).resolve())
    _apply_dtype(mlx_model, _target_dtype(dtype), gguf_info)
    return mlx_model, tokenizer


def resolve(model: str) -> tuple[str, str]:
    """('gguf', file path) or ('mlx', directory or repo id) for a model reference."""
    if model in PACKAGED_MODELS:
        return "gguf", str(packaged_gguf_path(model))
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix == ".gguf" or _has_gguf_magic(path):
            return "gguf", str(path)
        raise ModelLoadError(
            f"{path} is neither a GGUF file nor a model directory. Pass a .gguf file, an "
            "mlx-lm model directory (with config.json), or a packaged model name."
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"Directory {path} has no config.json, so it is not an mlx-lm model directory. "
                "Point at the directory holding config.json and *.safetensors, or at a .gguf file."
            )
        return "mlx", str(path)
    if _looks_like_path(model):
        raise ModelLoadError(f"Model path not found: {model}. Check the path.")
    if _HF_REPO_RE.match(model):
        return "mlx", model
    get_packaged(model)  # raises the "unknown model, use one of ..." error
    raise AssertionError("unreachable")


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~"))
        or model.endswith(".gguf")
        or "\\" in model
        or model.count("/") > 1
    )


def _has_gguf_magic(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"GGUF"


def _mlx_lm_load(ref: str, kind: str) -> tuple[nn.Module, TokenizerWrapper]:
    from mlx_lm.utils import load as mlx_lm_load  # imports mlx: see the top

    from .wedlm import is_wedlm_dir, load_wedlm  # imports mlx: see the top

    local = Path(ref).exists()
    if kind == "mlx" and local and is_wedlm_dir(ref):  # WeDLM: qwen3/qwen2 plus its settings
        ckpt = load_wedlm(ref)
        return ckpt.model, ckpt.tokenizer
    # Hub downloads fail with assorted client/HTTP exception types; local loads with these.
    expected = (OSError, ValueError, KeyError, ImportError) if local else Exception
    try:
        loaded = mlx_lm_load(ref)  # (model, tokenizer): the config only when asked for
        return loaded[0], loaded[1]
    except expected as exc:
        where = "converted GGUF model" if kind == "gguf" else "mlx-lm model"
        hint = (
            "Check that it is a complete mlx-lm model (config.json + model*.safetensors "
            "+ tokenizer) of an architecture mlx-lm supports."
            if local
            else "As a Hugging Face repo id: check the name and that you are online."
        )
        raise ModelLoadError(f"mlx-lm could not load the {where} {ref!r}: {exc}. {hint}") from exc


def _target_dtype(dtype: str) -> str | None:
    if dtype == "native":
        return None
    if dtype != "auto":
        return dtype

    return default_dtype()


def _apply_dtype(model: nn.Module, target: str | None, gguf_info: dict[str, Any] | None) -> None:
    import mlx.core as mx  # imports mlx: see the top
    from mlx_lm.utils import dequantize_model  # imports mlx: see the top

    if target is not None:
        dequantize_model(model)
        model.set_dtype(getattr(mx, target))
        cpu_layout(model, target)
    elif gguf_info is not None:
        # GPU policy and a float32 conversion: restore a footprint like the source's.
        model.set_dtype(mx.float16)
        if gguf_info.get("low_bit"):
            quantize_selective(model)
    mx.eval(model.parameters())


def cpu_layout(model: nn.Module, target: str) -> None:
    """The weights' layout for the backend, after casting to ``target``: column-major where it
    pays (float32 on the Linux CPU backend: ``column_major_weights``), else as loaded. Lazy:
    evaluates nothing."""
    import mlx.core as mx  # imports mlx: see the top

    if target == "float32" and mx.default_device() == mx.cpu and sys.platform.startswith("linux"):
        column_major_weights(model)


def column_major_weights(model: nn.Module) -> int:
    """Store every Linear weight (and a tied embedding) column-major, in place; returns how many.

    Why: mlx's CPU backend computes ``x @ W.T`` (every Linear, and a tied head's
    ``as_linear``) as an OpenBLAS sgemm. With W row-major ``(out, in)`` BLAS reads it
    transposed, which OpenBLAS 0.3 packs slowly; stored column-major, ``W.T`` is row-major and
    the products are the same bit for bit (same kernel, same summation order: measured on
    every packaged model, prefill and decode) while a decode step takes 19 % (SmolLM2-135M) to
    33 % (Qwen2.5-Coder-0.5B) less time. Values, shapes and embedding lookups are unchanged.
    Marks ``model.specdec_weight_layout``: measured cost curves are kept per layout
    (``measure.model_fingerprint``). Tests: tests/loader/test_api.py. Linux CPU, float32 only.
    """
    import mlx.core as mx  # imports mlx: see the top
    import mlx.nn as nn  # imports mlx: see the top
    from mlx.utils import tree_unflatten

    modules = model.named_modules()
    tied = not any(path.rsplit(".", 1)[-1] == "lm_head" for path, _ in modules)
    kinds = (nn.Linear, nn.Embedding) if tied else nn.Linear  # an untied table is only gathered
    relaid = [(f"{path}.weight", mx.contiguous(module.weight.T).T) for path, module in modules
              if isinstance(module, kinds) and module.weight.ndim == 2]
    model.update(tree_unflatten(relaid))
    model.specdec_weight_layout = "column-major"
    return len(relaid)


def quantize_selective(model: nn.Module) -> dict[str, int]:
    """Quantize ``model`` in place: 4 bits, but embeddings and ``lm_head`` at 8 bits.

    Returns {layer path: bits} of the layers kept at the higher precision and logs them.
    """
    import mlx.nn as nn  # imports mlx: see the top

    own = getattr(model, "quant_predicate", None)  # some mlx-lm models exclude layers
    kept: dict[str, int] = {}
    quantized = 0

    def predicate(path: str, module: Any) -> bool | dict:
        nonlocal quantized
        if not hasattr(module, "to_quantized"):
            return False
        if module.weight.shape[-1] % QUANT_GROUP_SIZE:
            return False
        verdict = own(path, module) if own is not None else True
        if not verdict:
            return False
        quantized += 1
        if isinstance(module, nn.Embedding) or path.rsplit(".", 1)[-1] == "lm_head":
            kept[path] = HEAD_BITS
            return {"group_size": QUANT_GROUP_SIZE, "bits": HEAD_BITS}
        return verdict

    nn.quantize(model, QUANT_GROUP_SIZE, QUANT_BITS, class_predicate=predicate)
    tied = " (the output head is tied to the embeddings)" if not any(
        p.endswith("lm_head") for p in kept) and kept else ""
    log.info("re-quantized %d layers to %d bits (group %d); kept at %d bits: %s%s",
             quantized - len(kept), QUANT_BITS, QUANT_GROUP_SIZE, HEAD_BITS,
             ", ".join(kept) or "none", tied)
    return kept
