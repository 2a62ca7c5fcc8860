"""The tokenizer embedded in a GGUF file -> a Hugging Face tokenizer saved for mlx-lm.

Contract: ``build_tokenizer(g)`` gives the ids llama.cpp gives for the same text (via
transformers' ``convert_gguf_tokenizer``, without torch); ``eos_token_ids`` lists every id
that ends generation; ``save_tokenizer`` writes files ``mlx_lm.tokenizer_utils.load`` reads.
Tests: tests/loader/test_gguf_tokenizer.py, through the loader, tests/loader/test_api.py.
Details: docs/loading.md#gguf-tokenizers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ModelLoadError
from .gguf_meta import GGUFFile

_SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
_END_OF_TURN = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")


def _transformers_gguf() -> tuple[dict[str, dict[str, str]], Any]:
    # transformers: a heavy dependency (1 s), needed for GGUF tokenizers only
    try:  # transformers >= 5
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )

        return GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer
    except ImportError:
        pass
    try:  # transformers 4.x kept the same converter in integrations.ggml
        # transformers 4.x only (the checker sees 5.x, whose names are imported above)
        from transformers.integrations.ggml import (  # type: ignore[attr-defined, no-redef]
            GGUF_TO_TRANSFORMERS_MAPPING, convert_gguf_tokenizer)
    except ImportError as exc:
        raise ModelLoadError(
            "This transformers version has no GGUF tokenizer converter; upgrade it with: "
            "pip install -U transformers"
        ) from exc
    mapping = {k: GGUF_TO_TRANSFORMERS_MAPPING[k] for k in ("tokenizer", "tokenizer_config")}
    return mapping, convert_gguf_tokenizer


def _tokenizer_fields(g: GGUFFile) -> dict[str, Any]:
    """All ``tokenizer.*`` metadata, decoding the large arrays the config step skipped."""
    fields = {}
    for key, f in g.reader.fields.items():
        if key.startswith("tokenizer."):
            fields[key] = g.meta[key] if key in g.meta else f.contents()
    if "tokenizer.ggml.tokens" not in fields:
        raise ModelLoadError(
            f"{g.path} has no embedded tokenizer (tokenizer.ggml.tokens); specdec needs one. "
            "Re-export the GGUF with llama.cpp's convert_hf_to_gguf.py."
        )
    return fields


def build_tokenizer(g: GGUFFile) -> Any:
    from transformers import PreTrainedTokenizerFast  # heavy dependency: GGUF tokenizers only

    mapping, convert = _transformers_gguf()
    md = _tokenizer_fields(g)
    groups = {
        group: {name: md[f"tokenizer.{key}"] for key, name in renames.items()
                if f"tokenizer.{key}" in md}
        for group, renames in mapping.items()
    }
    tokenizer_dict, tok_config = groups["tokenizer"], groups["tokenizer_config"]
    if tokenizer_dict.get("tokenizer_type") == "llama":
        # llama.cpp adds BOS for sentencepiece vocabularies that do not say otherwise.
        tok_config.setdefault("add_bos_token", True)
    tokens = tokenizer_dict["tokens"]
    for name, key in _SPECIAL_IDS.items():
        if (idx := md.get(key)) is not None:
            tok_config[name] = tokens[int(idx)]
    try:
        backend, extra = convert(g.arch, tokenizer_dict)
    except (ValueError, KeyError, NotImplementedError) as exc:
        raise ModelLoadError(
            f"transformers cannot build the tokenizer embedded in {g.path}: {exc}. "
            "Try upgrading: pip install -U transformers"
        ) from exc
    return PreTrainedTokenizerFast(tokenizer_object=backend, **tok_config, **(extra or {}))


def eos_token_ids(g: GGUFFile, tok: Any) -> list[int]:
    vocab = tok.get_vocab()
    ids: list[int] = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        if (idx := g.get(key)) is not None:
            ids.append(int(idx))
    template = g.get("tokenizer.chat_template") or ""
    ids += [vocab[t] for t in _END_OF_TURN if t in template and t in vocab]
    if g.arch == "qwen2" and "<|endoftext|>" in vocab:
        ids.append(vocab["<|endoftext|>"])
    if not ids:
        raise ModelLoadError(f"{g.path} declares no end-of-sequence token; cannot stop generation.")
    return list(dict.fromkeys(ids))


def save_tokenizer(tok: Any, out_dir: Path) -> None:
    tok.save_pretrained(str(out_dir))
    if not (Path(out_dir) / "tokenizer.json").is_file():
        raise ModelLoadError(f"Saving the tokenizer to {out_dir} produced no tokenizer.json.")
