"""A request's ``speculative`` options (this server's extension of every wire): their JSON types
and the server's caps (draft length, n-gram length, tree nodes); ``DraftSpec`` checks the rest
when ``engine.speculative.merge_speculative`` applies them. Tests: tests/server/test_schemas.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ....drafters.spec import DRAFT_TYPES, parse_draft_types, parse_tree_budget
from .tool_schemas import Strict, unsupported

MAX_DRAFT_TOKENS = 32
MAX_TREE_NODES = 64


class SpeculativeOptions(Strict):
    """Per-request speculation; unset fields take the server's ``--...`` defaults. The
    fields' values are checked by ``DraftSpec`` (``merge_speculative``); here only their
    JSON types and the server's own caps (draft length, n-gram length, tree nodes)."""

    draft_type: str | None = Field(None, description=f"one of {', '.join(DRAFT_TYPES)} or a comma chain")
    num_draft_tokens: int | None = Field(None, le=MAX_DRAFT_TOKENS, description=">= 1")
    ngram_min: int | None = Field(None, le=64, description=">= 1")
    ngram_max: int | None = Field(None, le=64, description=">= ngram_min")
    gate: bool | None = Field(None, description="the cost gate: draft only while it beats plain "
                              "decoding (default on)")
    adaptive_k: bool | None = None
    draft_tree_budget: int | Literal["auto"] | None = Field(
        None, description="max token-tree nodes per step (0 = linear), or 'auto'")

    @field_validator("draft_tree_budget")
    @classmethod
    def _tree_budget(cls, v: int | str | None) -> int | str | None:
        if v is None:
            return v
        try:
            budget = parse_tree_budget(v, text=False)  # the one parser; the server caps it
        except ValueError:
            budget = None
        if budget is None or (isinstance(budget, int) and budget > MAX_TREE_NODES):
            raise unsupported(f"draft_tree_budget must be in [0, {MAX_TREE_NODES}] or 'auto'")
        return budget

    @field_validator("draft_type")
    @classmethod
    def _known_types(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return ",".join(parse_draft_types(v))
        except ValueError as e:
            raise unsupported(str(e).replace("draft type", "draft_type")) from None
