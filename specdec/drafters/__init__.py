"""Drafters: cheap guessers of the next tokens (see ``base.Drafter`` for the contract).

``make_drafter(spec, ...)`` builds one from a draft-type name or a comma-separated chain
of names (``"ngram,suffix,model"``), optionally wrapped in the gate and adaptive k.
``DRAFT_TYPES`` lists the names. Imports of the heavier drafters are lazy.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .base import Drafter, NoDrafter
from .ngram import NgramDrafter, NgramIndex, prompt_lookup

DRAFT_TYPES = ("none", "ngram", "ngram-mod", "suffix", "model")

_shared_tables: dict[str, Any] = {}


def shared_ngram_mod_table(tokenizer: Any, size: int | None = None, n: int | None = None):
    """The process-wide ngram-mod table for this tokenizer (one per vocabulary), so every
    request of a process (CLI run, server) feeds and reads the same memory."""
    from .ngram_mod import NgramModTable, tokenizer_fingerprint

    fp = tokenizer_fingerprint(tokenizer)
    if fp not in _shared_tables:
        kw = {k: v for k, v in (("size", size), ("n", n)) if v is not None}
        _shared_tables[fp] = NgramModTable(tokenizer_fingerprint=fp, **kw)
    return _shared_tables[fp]


def _one(name: str, eos: frozenset, opts: Mapping[str, Any]) -> Drafter:
    if name == "ngram":
        return NgramDrafter(opts.get("ngram_min", 1), opts.get("ngram_max", 3), eos=eos)
    if name == "ngram-mod":
        from .ngram_mod import NgramModDrafter

        table = opts.get("table")
        if table is None:
            if opts.get("tokenizer") is None:
                raise ValueError("ngram-mod needs a table or the tokenizer to key a shared one")
            table = shared_ngram_mod_table(opts["tokenizer"])
        return NgramModDrafter(table, eos=eos)
    if name == "suffix":
        from .suffix import SuffixDrafter

        return SuffixDrafter(max_history_tokens=opts.get("suffix_history", 32768), eos=eos,
                             history=opts.get("history"))
    if name == "model":
        from .draft_model import DraftModelDrafter

        if opts.get("draft_model") is None:
            raise ValueError("draft type 'model' needs a draft model: pass --draft-model")
        return DraftModelDrafter(
            opts["draft_model"],
            target_tokenizer=opts.get("tokenizer"),
            draft_tokenizer=opts.get("draft_tokenizer"),
            temperature=opts.get("temperature", 0.0),
            seed=opts.get("seed"),
            max_trim=opts.get("num_draft_tokens", 16) + 1,
        )
    raise ValueError(f"unknown draft type {name!r}; choose from {', '.join(DRAFT_TYPES)} or a comma chain")


def make_drafter(
    spec: str,
    *,
    eos: Iterable[int] = (),
    gate: bool = False,
    gate_threshold: float = 0.02,
    adaptive_k: Mapping[int, float] | None = None,
    num_draft_tokens: int = 4,
    **opts: Any,
) -> Drafter:
    """A fresh drafter for ``spec`` ("none", a type, or "a,b,c" — first non-empty wins).

    ``opts``: ngram_min, ngram_max, tokenizer, table (ngram-mod), suffix_history,
    history (a shared ``SuffixHistory`` for suffix), draft_model, draft_tokenizer,
    temperature, seed. ``gate`` wraps it in the prompt and runtime gate; ``adaptive_k``
    (a verify cost curve {L: seconds}) in adaptive k.
    """
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["none"]:
        return NoDrafter()
    if not names or "none" in names:
        raise ValueError(f"bad draft type {spec!r}: 'none' cannot be part of a chain")
    eos = frozenset(eos)
    opts["num_draft_tokens"] = num_draft_tokens
    members = [_one(n, eos, opts) for n in names]
    if len(members) == 1:
        drafter = members[0]
    else:
        from .chain import ChainDrafter

        drafter = ChainDrafter(members)
    if adaptive_k is not None:
        from .adaptive import AdaptiveKDrafter

        drafter = AdaptiveKDrafter(drafter, adaptive_k, num_draft_tokens)
    if gate:
        from .gate import GatedDrafter

        drafter = GatedDrafter(drafter, min_score=gate_threshold)
    return drafter


__all__ = [
    "DRAFT_TYPES",
    "Drafter",
    "NgramDrafter",
    "NgramIndex",
    "NoDrafter",
    "make_drafter",
    "prompt_lookup",
    "shared_ngram_mod_table",
]
