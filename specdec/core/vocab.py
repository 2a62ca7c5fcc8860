"""The model's vocabulary size, read in one place.

Contract: ``vocab_size(model, tokenizer=None)`` is the number of ids the model scores, from
``args.vocab_size``, else the output (or largest embedding) rows, else the tokenizer's
vocabulary; padding rows count. It raises ``ValueError`` rather than guess.
Tests: tests/core/test_vocab.py. Details: docs/verify-and-rollback.md#vocabulary-size."""

from __future__ import annotations

from typing import Any

import mlx.nn as nn

from .model import Model

__all__ = ["vocab_size"]


def vocab_size(model: Model, tokenizer: Any = None) -> int:
    """The number of token ids ``model`` scores (docs/verify-and-rollback.md#vocabulary-size)."""
    rows = _positive(getattr(getattr(model, "args", None), "vocab_size", None))
    if rows is None:
        rows = _output_rows(model)
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if rows is None and callable(get_vocab):
        rows = _positive(len(get_vocab()))
    if rows is None:
        why = "no tokenizer was given" if tokenizer is None else \
            f"its tokenizer ({type(tokenizer).__name__}) has no get_vocab()"
        raise ValueError(f"cannot read the vocabulary size of {type(model).__name__}: it has "
                         f"no args.vocab_size, lm_head or embedding table, and {why}")
    return rows


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def _output_rows(model: Model) -> int | None:
    """Rows of ``lm_head``, else of the largest embedding table (None: neither found)."""
    named = getattr(model, "named_modules", None)
    if not callable(named):
        return None
    embeddings = []
    for name, module in named():
        head = name.rsplit(".", 1)[-1] == "lm_head"
        if head and isinstance(module, (nn.Linear, nn.QuantizedLinear)):
            return _positive(int(module.weight.shape[0]))
        if isinstance(module, (nn.Embedding, nn.QuantizedEmbedding)):
            embeddings.append(int(module.weight.shape[0]))
    return _positive(max(embeddings, default=0))
