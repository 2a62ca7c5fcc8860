"""The suffix history the server shares across requests: persistence (round trip,
refusals) and drafters that keep answering like the reference while it changes."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.drafters.suffix import SuffixDrafter, SuffixHistory
from specdec.drafters.suffix_match import suffix_proposal
docs_st = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=20), max_size=6)


def structure(a):
    return a.tokens, a.next, a.link, a.length, a.count, a.first


@settings(max_examples=examples(60), deadline=None)
@given(docs_st, st.integers(0, 60), st.integers(0, 60))
def test_suffix_history_save_load_round_trip(tmp_path_factory, docs, budget, new_budget):
    path = str(tmp_path_factory.mktemp("h") / "history")
    h = SuffixHistory(budget)
    for d in docs:
        h.add(d)
    h.save(path, tokenizer_fingerprint="fp")
    back = SuffixHistory.load(path, tokenizer_fingerprint="fp", max_tokens=budget)
    assert list(back.docs) == list(h.docs) and back.tokens == h.tokens
    assert structure(back.automaton) == structure(h.automaton)
    smaller = SuffixHistory.load(path, tokenizer_fingerprint="fp", max_tokens=new_budget)
    kept = list(smaller.docs)  # the newest whole documents that fit
    assert smaller.tokens == sum(map(len, kept)) <= new_budget
    assert kept == list(h.docs)[len(h.docs) - len(kept):]


def test_suffix_history_refuses_other_tokenizers_and_junk(tmp_path):
    path = str(tmp_path / "history")
    SuffixHistory().save(path, tokenizer_fingerprint="a")
    with pytest.raises(ValueError, match="tokenizer"):
        SuffixHistory.load(path, tokenizer_fingerprint="b")
    with open(path, "wb") as f:
        f.write(b"not a history")
    with pytest.raises(ValueError, match="not a readable"):
        SuffixHistory.load(path, tokenizer_fingerprint="a")


@settings(max_examples=examples(80), deadline=None)
@given(docs_st, st.lists(st.integers(0, 5), min_size=1, max_size=25), st.integers(5, 40),
       st.integers(1, 6))
def test_drafters_sharing_a_history_see_its_changes(docs, context, budget, k):
    """A drafter keeps answering like the reference while the shared history changes
    under it between its proposals (including FIFO rebuilds)."""
    shared = SuffixHistory(budget)
    d = SuffixDrafter(history=shared)
    d.begin(context[:1])
    for i, doc in enumerate(docs):
        cut = max(1, len(context) * (i + 1) // (len(docs) + 1))
        got = list(d.propose(context[:cut], k).tokens)
        assert got == suffix_proposal(context[:cut], k, history=list(shared.docs))
        shared.add(doc)  # another request finished meanwhile
    assert list(d.propose(context, k).tokens) == suffix_proposal(context, k, history=list(shared.docs))
