"""The n-gram matcher against a brute-force oracle, and the incremental index against it."""

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.drafters import NgramDrafter, NgramIndex, prompt_lookup

tokens_st = st.lists(st.integers(0, 5), max_size=60)  # small alphabet: many repeats


def oracle(tokens, k, n_min, n_max, eos=()):
    """Enumerate every (n, earlier end) pair; pick the longest n, then the latest end."""
    L = len(tokens)
    cands = [
        (n, end)
        for n in range(n_min, n_max + 1)
        for end in range(n - 1, L - 1)
        if L - n >= 0 and end < L - 1 and tokens[end - n + 1 : end + 1] == tokens[L - n :]
    ]
    if not cands or k <= 0:
        return []
    n, end = max(cands)
    draft = tokens[end + 1 : end + 1 + k]
    for i, t in enumerate(draft):
        if t in eos:
            return draft[: i + 1]
    return draft


@settings(max_examples=examples(400), deadline=None)
@given(tokens_st, st.integers(0, 8), st.integers(1, 3), st.integers(0, 2), st.sets(st.integers(0, 5), max_size=1))
def test_prompt_lookup_matches_oracle(tokens, k, n_min, extra, eos):
    n_max = n_min + extra
    assert prompt_lookup(tokens, k, n_min, n_max, eos) == oracle(tokens, k, n_min, n_max, eos)


@settings(max_examples=examples(200), deadline=None)
@given(tokens_st, st.integers(1, 8), st.integers(1, 3), st.integers(0, 2))
def test_index_matches_pure_function_at_every_length(tokens, k, n_min, extra):
    n_max = n_min + extra
    idx = NgramIndex(n_min, n_max)
    for t in tokens:
        idx.extend([t])
        assert idx.lookup(k) == prompt_lookup(idx.tokens, k, n_min, n_max)


def test_docstring_example():
    toks = [5, 6, 7, 8, 5, 6, 9, 5, 6]
    assert prompt_lookup(toks, 3, 1, 2) == [9, 5, 6]
    assert prompt_lookup(toks, 3, 1, 2, eos={9}) == [9]


def test_never_matches_the_suffix_itself():
    assert prompt_lookup([1, 2, 3], 4, 1, 3) == []


def test_drafter_restarts_on_a_new_context():
    d = NgramDrafter(1, 2)
    d.begin([1, 2, 3, 1, 2])
    assert d.propose([1, 2, 3, 1, 2], 2).tokens == (3, 1)
    d.propose([1, 2, 3, 1, 2, 3], 2)  # grows incrementally
    d.begin([7, 8, 7])  # a different request: index rebuilt
    assert d.propose([7, 8, 7], 2).tokens == (8, 7)
    assert d.propose([7, 8, 7, 1, 2], 2).tokens == ()  # the old "1 2 -> 3" is gone
