"""From a drafter spec to a request's drafter, in one place: ``prepare_resources(spec, model,
tokenizer)`` loads the draft model, opens the ngram-mod table and measures (once, cached on
disk) the verify cost curve and the drafter's own cost, returning ``DraftResources``;
``drafter_for(spec, model, tokenizer, resources?)`` is the one assembly of a fresh drafter
under its decode policy that the library, the CLI, the server and the bench use. It sits
above measurement and loading; drafters do neither.
Tests: tests/test_resources.py, tests/test_measure.py, tests/test_engine.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import mlx.nn as nn

from .core.model import Model
from .core.sampling import SamplingParams
from .drafters import shared_ngram_mod_table
from .drafters.spec import DraftResources, DraftSpec, ngram_mod_table
from .eagle.io import load_head
from .eagle.mtp import load_for
from .loader import load
from .measure import cost_cache_file, cost_curve_for, draft_cost_for
from .policy.build import build_policy
from .policy.drafting import DecodePolicy
from .policy.learnt import LearntCurves

if TYPE_CHECKING:
    from .drafters.ngram_mod import NgramModTable
    from .drafters.suffix import SuffixHistory


def prepare_resources(spec: DraftSpec, model: Model, tokenizer: Any, *, dtype: str = "auto",
                      draft: tuple[Any, Any] | None = None, table: NgramModTable | None = None,
                      history: SuffixHistory | None = None,
                      learnt: LearntCurves | None = None) -> DraftResources:
    """Load what ``spec`` needs: the draft model (unless ``draft`` is given), the
    ngram-mod table (from ``spec.ngram_mod_file`` if it exists, else a fresh one of the
    spec's size and n, unless ``table`` is given), the cost curve for the cost gate and
    adaptive k and the drafter's own cost for those or an automatic tree budget (both
    measured once per model and cached on disk: a few seconds on first use); ``learnt``: what
    cost gates learn, carried across the requests built on these resources (None: a new one)."""
    res = DraftResources(tokenizer=tokenizer, draft=draft, table=table, history=history,
                         target=model if spec.uses("wedlm") or spec.uses("mtp") else None,
                         learnt=learnt if learnt is not None else LearntCurves())
    if spec.uses("model") and res.draft is None:
        if not spec.draft_model:  # DraftSpec refuses it at construction; said for the checker
            raise ValueError("--draft-type model needs --draft-model NAME_OR_PATH")
        res.draft = load(spec.draft_model, dtype=dtype)
    if spec.uses("eagle"):
        if not spec.draft_model:  # DraftSpec refuses it at construction; said for the checker
            raise ValueError("--draft-type eagle needs --draft-model DIR (a head's folder)")
        # the head shares the target's embeddings: it reads the loaded mlx-lm module's layers
        res.head = load_head(spec.draft_model, target=cast(nn.Module, model))
    if spec.uses("mtp"):  # the checkpoint's own mtp.* weights: --draft-model or the model's dir
        res.mtp = load_for(cast(nn.Module, model), spec.draft_model)
    if spec.uses("ngram-mod") and res.table is None:
        res.table = ngram_mod_table(spec, tokenizer)
    if spec.speculative and (spec.gate or spec.adaptive_k):
        res.cost = cost_curve_for(model, spec.num_draft_tokens + 1)
    if spec.speculative and (spec.gate or spec.adaptive_k or spec.draft_tree_budget == "auto"):
        res.draft_cost = draft_cost_for(spec.draft_type, model, res.draft[0] if res.draft else None,
                                        head=res.head, mtp=res.mtp)
    return res


# a library process's cost gates (calls to generate / stream_generate, a CLI run), as its ngram-mod
# table is process-wide (drafters.shared_ngram_mod_table); a server and a bench own their own. The
# pipelined saving (the machine's) is kept beside the cached curves for the next process
LIBRARY_LEARNT = LearntCurves(store=cost_cache_file)


def resources_for(spec: DraftSpec, model: Model | None, tokenizer: Any, *,
                  dtype: str = "auto") -> DraftResources:
    """A library call's or a CLI run's resources: ``prepare_resources`` on ``model``, the
    ngram-mod table the process-wide one of this tokenizer unless the spec names a file
    (so library calls share one memory, as a server does), and so are the cost gates' learnt
    values (``LIBRARY_LEARNT``). Without a model only what needs none (a priced spec is
    refused: say ``model=``)."""
    table = None  # a file the spec names is loaded by prepare_resources, never ignored
    if spec.uses("ngram-mod") and not spec.ngram_mod_file:
        table = shared_ngram_mod_table(tokenizer, spec.ngram_mod_size, spec.ngram_mod_n)
    if model is not None:
        return prepare_resources(spec, model, tokenizer, dtype=dtype, table=table, learnt=LIBRARY_LEARNT)
    if spec.speculative and (spec.gate or spec.adaptive_k):
        raise ValueError("the cost gate needs the target model: drafter_for(spec, model, tokenizer)")
    return DraftResources(tokenizer=tokenizer, table=table)


def drafter_for(spec: DraftSpec, model: Model | None, tokenizer: Any,
                resources: DraftResources | None = None, *,
                sampling: SamplingParams = SamplingParams(), dtype: str = "auto") -> DecodePolicy:
    """A fresh drafter for one request under the spec's decode policy (the cost gate, adaptive
    k or the spec's k every step): the one assembly. ``resources``: a server's (its shared
    memories, its curve) or a bench's, used as they are; None: ``resources_for``.
    ``sampling``'s temperature and seed drive a draft model's own sampling (exact
    rejection sampling needs the request's)."""
    res = resources if resources is not None else resources_for(spec, model, tokenizer, dtype=dtype)
    return build_policy(spec, res, temperature=sampling.temperature, seed=sampling.seed)
