"""A request's ``speculative`` options (this server's extension of every wire) and how they
apply to the server's ``DraftSpec``.

Contract: ``SpeculativeOptions`` checks only JSON types and the server's caps (draft length,
n-gram length, tree nodes); ``merge_speculative`` applies them to the server's default
``DraftSpec``, whose own checks raise a ``ValueError`` naming the ``speculative`` field;
``refuse_unloaded`` refuses a spec that needs what the server did not load.
Tests: tests/drafters/test_spec.py, tests/server/test_schemas.py."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from ...drafters.spec import DRAFT_TYPES, DraftSpec, parse_draft_types, parse_tree_budget
from .tool_schemas import Strict

MAX_DRAFT_TOKENS = 32
MAX_TREE_NODES = 64


def unsupported(message: str) -> PydanticCustomError:
    return PydanticCustomError("unsupported_value", message)


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


def refuse_unloaded(spec: DraftSpec, worker: Any) -> None:
    """``ValueError`` when ``spec`` needs what the ``worker`` did not load (``draft``: a draft
    model, ``mtp``: an MTP block; read only when named)."""
    if spec.uses("model") and worker.draft is None:
        raise ValueError("draft_type 'model' needs a server started with --draft-model")
    if spec.uses("mtp") and worker.mtp is None:
        raise ValueError("draft_type 'mtp' needs a server started with --draft-type mtp")


def merge_speculative(default: DraftSpec, opts: SpeculativeOptions | None) -> DraftSpec:
    """The spec one request runs with: the server's default + the request's overrides
    (``ValueError`` naming the ``speculative`` field when the combination is invalid)."""
    if opts is None:
        return default
    try:
        return default.with_options(**opts.model_dump())
    except ValueError as e:
        msg = re.sub(r"--([a-z-]+)", lambda m: "speculative." + m.group(1).replace("-", "_"), str(e))
        raise ValueError(msg) from None
