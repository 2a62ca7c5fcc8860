"""What a drafter spec needs before drafters can be built: ``prepare_resources(spec, model,
tokenizer)`` loads the draft model, opens the ngram-mod table and measures (once, cached on
disk) the verify cost curve and the drafter's own cost, returning ``DraftResources`` for
``build_drafter``. It sits above measurement and loading; drafters do neither.
Tests: tests/test_resources.py, tests/test_measure.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import mlx.nn as nn

from .core.model import Model
from .drafters.spec import DraftResources, DraftSpec, ngram_mod_table
from .eagle.io import load_head
from .loader import load
from .measure import cost_curve_for, draft_cost_for

if TYPE_CHECKING:
    from .drafters.ngram_mod import NgramModTable
    from .drafters.suffix import SuffixHistory


def prepare_resources(spec: DraftSpec, model: Model, tokenizer: Any, *, dtype: str = "auto",
                      draft: tuple[Any, Any] | None = None, table: NgramModTable | None = None,
                      history: SuffixHistory | None = None) -> DraftResources:
    """Load what ``spec`` needs: the draft model (unless ``draft`` is given), the
    ngram-mod table (from ``spec.ngram_mod_file`` if it exists, else a fresh one of the
    spec's size and n, unless ``table`` is given), the cost curve for the cost gate and
    adaptive k and the drafter's own cost for those or an automatic tree budget (both
    measured once per model and cached on disk: a few seconds on first use)."""
    res = DraftResources(tokenizer=tokenizer, draft=draft, table=table, history=history,
                         target=model if spec.uses("wedlm") else None)
    if spec.uses("model") and res.draft is None:
        if not spec.draft_model:  # DraftSpec refuses it at construction; said for the checker
            raise ValueError("--draft-type model needs --draft-model NAME_OR_PATH")
        res.draft = load(spec.draft_model, dtype=dtype)
    if spec.uses("eagle"):
        if not spec.draft_model:  # DraftSpec refuses it at construction; said for the checker
            raise ValueError("--draft-type eagle needs --draft-model DIR (a head's folder)")
        # the head shares the target's embeddings: it reads the loaded mlx-lm module's layers
        res.head = load_head(spec.draft_model, target=cast(nn.Module, model))
    if spec.uses("ngram-mod") and res.table is None:
        res.table = ngram_mod_table(spec, tokenizer)
    if spec.speculative and (spec.gate or spec.adaptive_k):
        res.cost = cost_curve_for(model, spec.num_draft_tokens + 1)
    if spec.speculative and (spec.gate or spec.adaptive_k or spec.draft_tree_budget == "auto"):
        res.draft_cost = draft_cost_for(spec.draft_type, model, res.draft[0] if res.draft else None,
                                        head=res.head)
    return res
