"""``specdec.resources.prepare_resources``: only what the spec uses is prepared, and what
the caller hands in is used as given (nothing measured or loaded here: the gate is off)."""

from __future__ import annotations

from conftest import cached_tiny

from specdec.drafters.spec import DraftSpec
from specdec.resources import prepare_resources


def test_a_spec_without_a_model_or_table_prepares_nothing():
    tok = object()  # stands for a tokenizer: nothing here reads it
    res = prepare_resources(DraftSpec("ngram", gate=False), cached_tiny("llama"), tok)
    assert res.tokenizer is tok
    assert (res.draft, res.table, res.cost, res.draft_cost, res.target) == (None,) * 5


def test_what_the_caller_hands_in_is_used_as_given():
    draft, table = (cached_tiny("llama", seed=1), None), object()
    spec = DraftSpec("model,ngram-mod", draft_model="elsewhere", gate=False)
    res = prepare_resources(spec, cached_tiny("llama"), None, draft=draft, table=table)
    assert res.draft is draft and res.table is table and res.cost is None
