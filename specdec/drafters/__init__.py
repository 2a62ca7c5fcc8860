"""Drafters: cheap guessers of the next tokens (see ``base.Drafter`` for the contract).

``make_drafter(name, ...)`` builds one by name; ``DRAFT_TYPES`` lists the names the CLI
accepts.
"""

from __future__ import annotations

from typing import Iterable

from .base import Drafter, NoDrafter
from .ngram import NgramDrafter, NgramIndex, prompt_lookup

DRAFT_TYPES = ("none", "ngram")


def make_drafter(
    name: str, *, ngram_min: int = 1, ngram_max: int = 3, eos: Iterable[int] = ()
) -> Drafter:
    """A fresh drafter by name; raises ValueError naming the valid choices."""
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        return NgramDrafter(ngram_min, ngram_max, eos=eos)
    raise ValueError(f"unknown draft type {name!r}; choose one of {', '.join(DRAFT_TYPES)}")


__all__ = ["DRAFT_TYPES", "Drafter", "NgramDrafter", "NgramIndex", "NoDrafter", "make_drafter", "prompt_lookup"]
