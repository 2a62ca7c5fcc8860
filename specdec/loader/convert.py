"""GGUF file -> cached mlx-lm model directory (config.json + safetensors + tokenizer).

Contract: ``convert_gguf(path)`` returns ``<cache>/converted/<stem>-<key>`` (reused untouched
when present; written to a temp dir and renamed), with ``specdec.json`` (source, quantization
summary, conversion time); older conversions of the same source are deleted;
``conversion_count()`` counts real conversions. Weights are exact float32; casting happens at
load. Nothing here imports mlx. Tests: tests/loader/test_convert.py, tests/loader/test_api.py.
Details: docs/loading.md#conversion."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from . import gguf_meta, gguf_tokenizer, gguf_weights
from .cache import atomic_dir, cache_root, source_key
from .errors import ModelLoadError

# Bump whenever the converted output for the same GGUF would change.
CONVERTER_VERSION = 2
MARKER = "specdec.json"
_conversions = 0


def conversion_count() -> int:
    return _conversions


def converted_dir(path: Path) -> Path:
    stem = path.name.removesuffix(".gguf")
    return cache_root() / "converted" / f"{stem}-{source_key(path, CONVERTER_VERSION)}"


def convert_gguf(path: Path) -> Path:
    """The cached mlx-lm directory for ``path``, converting it first if needed."""
    global _conversions
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}. Check the path.")
    final = converted_dir(path)
    if (final / MARKER).is_file():
        return final
    if final.exists():  # damaged by hand (marker gone): rebuild rather than trust it
        shutil.rmtree(final)
    start = time.perf_counter()
    g = gguf_meta.open_gguf(path)
    with atomic_dir(final) as tmp:
        info = _write_model(g, tmp)
        info["conversion_seconds"] = round(time.perf_counter() - start, 3)
        # the marker goes last: its presence means the rest was fully written
        (tmp / MARKER).write_text(json.dumps(info, indent=2))
    _conversions += 1
    _prune_stale(final, path)
    return final


def _prune_stale(final: Path, source: Path) -> None:
    """Delete older conversions of the same source file (previous mtime or converter)."""
    stem = source.name.removesuffix(".gguf")
    for other in final.parent.glob(f"{stem}-*"):
        if other == final or not (other / MARKER).is_file():
            continue
        try:
            stale = read_marker(other).get("source") == str(source.resolve())
        except (OSError, ValueError):
            continue
        if stale:
            shutil.rmtree(other, ignore_errors=True)


def _write_model(g: gguf_meta.GGUFFile, out: Path) -> dict[str, Any]:
    tok = gguf_tokenizer.build_tokenizer(g)
    config = gguf_meta.build_config(g, gguf_tokenizer.eos_token_ids(g, tok))
    shards = gguf_weights.write_safetensors(gguf_weights.iter_hf_tensors(g, config), out)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gguf_tokenizer.save_tokenizer(tok, out)
    st = g.path.stat()
    return {
        "converter_version": CONVERTER_VERSION,
        "source": str(g.path.resolve()),
        "source_size": st.st_size,
        "source_mtime_ns": st.st_mtime_ns,
        "architecture": g.arch,
        "shards": shards,
        **gguf_meta.quant_summary(g),
    }


def read_marker(model_dir: Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / MARKER).read_text())
