"""Drafters: cheap guessers of the next tokens (see ``base`` for the contract).

``DraftSpec`` describes a drafter (types, k, n-gram bounds, gate, adaptive k, files);
``build_drafter(spec, resources)`` builds a fresh one for a request. The drafters that
import mlx (draft model, wedlm) are imported when built.
Tests: tests/drafters/test_spec.py.
"""

from __future__ import annotations

from typing import Any

from .base import EMPTY, Drafter, NoDrafter, Proposal
from .ngram import NgramDrafter, NgramIndex, prompt_lookup
from .ngram_mod import tokenizer_fingerprint
from .spec import (DRAFT_TYPES, DraftResources, DraftSpec, build_drafter, ngram_mod_table,
                   parse_draft_types, parse_tree_budget)

_shared_tables: dict[tuple, Any] = {}


def shared_ngram_mod_table(tokenizer: Any, size: int | None = None, n: int | None = None):
    """The process-wide ngram-mod table for this tokenizer, size and n, so every request
    of a process (library calls, a CLI run) feeds and reads the same memory."""
    key = (tokenizer_fingerprint(tokenizer), size, n)
    if key not in _shared_tables:
        spec = DraftSpec("ngram-mod", ngram_mod_size=size, ngram_mod_n=n)
        _shared_tables[key] = ngram_mod_table(spec, tokenizer, load_file=False)
    return _shared_tables[key]


__all__ = [
    "DRAFT_TYPES",
    "DraftResources",
    "DraftSpec",
    "Drafter",
    "EMPTY",
    "NgramDrafter",
    "NgramIndex",
    "NoDrafter",
    "Proposal",
    "build_drafter",
    "parse_draft_types",
    "parse_tree_budget",
    "prompt_lookup",
    "shared_ngram_mod_table",
]
