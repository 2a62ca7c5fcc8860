"""The suffix drafter: pure reference vs brute-force oracles, the automaton and the index vs
the reference, history window rules, and greedy parity on real weights."""

import math

import pytest
from conftest import assert_stats_speculated, examples, plain_prefix, real_model
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specdec.drafters.suffix import LOW_WATER, SuffixAutomaton, SuffixDrafter, SuffixHistory, SuffixIndex
from specdec.drafters.suffix_match import (draft_length, longest_history_match, longest_suffix_match,
                                           most_frequent_continuation, suffix_proposal)
from specdec.engine import token_stream
from specdec.prompts import parity_prompts
from specdec.core.stats import SpecStats
from specdec.core.text import encode_prompt

tokens_st = st.lists(st.integers(0, 3), max_size=40)  # small alphabet: many repeats
docs_st = st.lists(st.lists(st.integers(0, 3), max_size=15), max_size=4)
alpha_st = st.sampled_from([0.25, 0.5, 1.0, 2.0])
cap_st = st.sampled_from([1, 2, 3, 64])
eos_st = st.sets(st.integers(0, 3), max_size=1)


# ---- brute-force oracles: enumerate every (length, end) window ----

def ends_of(seq, pat):
    """End positions of every occurrence of ``pat`` in ``seq``."""
    return [e for e in range(len(pat) - 1, len(seq)) if seq[e - len(pat) + 1 : e + 1] == pat]


def oracle_live_len(tokens):
    L = len(tokens)
    return max(
        (n for n in range(1, L) for e in range(n - 1, L - 1)
         if tokens[e - n + 1 : e + 1] == tokens[L - n :]),
        default=0,
    )


def oracle_hist_len(docs, context):
    L = len(context)
    return max(
        (
            n
            for n in range(1, L + 1)
            for doc in docs
            for e in range(n - 1, len(doc) - 1)
            if doc[e - n + 1 : e + 1] == context[L - n :]
        ),
        default=0,
    )


def oracle_continuation(docs, pattern, n, eos, cap):
    pat, out = list(pattern), []
    for _ in range(n):
        w = len(pat) + 1
        ends = {}  # follower -> end positions (doc, end) of pattern + follower
        for d, doc in enumerate(docs):
            for s in range(len(doc) - w + 1):
                if doc[s : s + w - 1] == pat:
                    ends.setdefault(doc[s + w - 1], []).append((d, s + w - 1))
        if not ends:
            break
        tok = max(ends, key=lambda c: (min(len(ends[c]), cap), min(ends[c])))
        out.append(tok)
        pat.append(tok)
        if tok in eos:
            break
    return out


def oracle_proposal(docs, context, k, alpha, eos, cap):
    live, hist = oracle_live_len(context), oracle_hist_len(docs, context)
    src, m = (docs, hist) if hist > live else ([context], live)
    if m == 0 or k <= 0:
        return []
    n = min(k, max(1, math.ceil(alpha * m)))
    return oracle_continuation(src, context[len(context) - m :], n, eos, cap)


def index_with(docs, max_history_tokens=10_000, cap=64):
    idx = SuffixIndex(max_history_tokens, cap)
    for d in docs:
        idx.extend(d)
        idx.new_request()
    return idx


def structure(a: SuffixAutomaton):
    return a.tokens, a.next, a.link, a.length, a.count, a.first


# ---- pure reference vs oracle ----

def test_docstring_examples():
    t = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]
    assert longest_suffix_match(t) == (2, [1, 4, 7])
    assert most_frequent_continuation([t], [1, 2], 2) == [3, 1]
    assert most_frequent_continuation([t], [1, 2], 4) == [3, 1, 2, 4]
    assert most_frequent_continuation([t], [1, 2], 4, eos={1}) == [3, 1]
    assert suffix_proposal(t, 4) == [3, 1]
    assert suffix_proposal(t, 4, alpha=2) == [3, 1, 2, 4]
    assert suffix_proposal(t, 4, history=[[7, 4, 1, 2, 5, 0]]) == [5, 0]
    assert longest_history_match([[1, 2], [3, 4]], [2, 3]) == (1, [(1, 0)])
    assert draft_length(0, 4) == 0 and draft_length(1, 4, 0.25) == 1 and draft_length(9, 4) == 4


@settings(max_examples=examples(300), deadline=None)
@given(tokens_st)
def test_longest_suffix_match_vs_oracle(tokens):
    n, ends = longest_suffix_match(tokens)
    assert n == oracle_live_len(tokens)
    L = len(tokens)
    assert ends == ([e for e in ends_of(tokens, tokens[L - n :]) if e < L - 1] if n else [])


@settings(max_examples=examples(300), deadline=None)
@given(docs_st, st.lists(st.integers(0, 3), min_size=1, max_size=4), st.integers(0, 6), eos_st,
       cap_st)
def test_most_frequent_continuation_vs_oracle(docs, pattern, n, eos, cap):
    got = most_frequent_continuation(docs, pattern, n, eos, cap)
    assert got == oracle_continuation(docs, pattern, n, eos, cap)


@settings(max_examples=examples(300), deadline=None)
@given(docs_st, tokens_st, st.integers(0, 8), alpha_st, eos_st, cap_st)
def test_suffix_proposal_vs_oracle(docs, context, k, alpha, eos, cap):
    got = suffix_proposal(context, k, history=docs, alpha=alpha, eos=eos, count_cap=cap)
    assert got == oracle_proposal(docs, context, k, alpha, eos, cap)


# ---- automaton and index vs the reference ----

@settings(max_examples=examples(200), deadline=None)
@given(tokens_st, cap_st)
def test_automaton_states_count_and_first_occurrence(tokens, cap):
    """Every state's longest string: capped occurrence count and first end position."""
    a = SuffixAutomaton(cap)
    a.extend(tokens)
    assert len(a.length) <= max(2 * len(tokens), 2)
    for v in range(1, len(a.length)):
        s = tokens[a.first[v] - a.length[v] + 1 : a.first[v] + 1]
        ends = ends_of(tokens, s)
        assert a.count[v] == min(cap, len(ends)) and a.first[v] == ends[0]
        # the shortest string of the state has the same occurrences
        short = s[len(s) - a.length[a.link[v]] - 1 :]
        assert ends_of(tokens, short) == ends


@settings(max_examples=examples(150), deadline=None)
@given(tokens_st, st.integers(1, 8), alpha_st, cap_st, eos_st)
def test_live_index_matches_reference_at_every_length(tokens, k, alpha, cap, eos):
    idx = SuffixIndex(0, cap)
    for i, t in enumerate(tokens):
        idx.extend([t])
        ctx = tokens[: i + 1]
        assert idx.live.longest_earlier()[1] == longest_suffix_match(ctx)[0]
        ref = suffix_proposal(ctx, k, alpha=alpha, eos=eos, count_cap=cap)
        assert idx.lookup(k, alpha, eos) == ref


@settings(max_examples=examples(100), deadline=None)
@given(tokens_st, cap_st)
def test_an_offers_support_is_the_share_of_its_matchs_occurrences_its_first_token_followed(tokens, cap):
    """``Proposal.support`` (what the cost gate grades offers by) against brute force: of the
    live match's earlier occurrences that a token followed (each follower's count capped as
    the automaton caps it), the share the offered first token followed."""
    idx = SuffixIndex(0, cap)
    for i, t in enumerate(tokens):
        idx.extend([t])
        ctx = tokens[: i + 1]
        offer = idx.offer(8, 1.0)
        if not offer:
            assert offer.support is None
            continue
        m = longest_suffix_match(ctx)[0]
        ends = [e for e in ends_of(ctx, ctx[len(ctx) - m:]) if e + 1 < len(ctx)]

        def followed(tok):
            return min(cap, sum(ctx[e + 1] == tok for e in ends))

        assert offer.support == followed(offer.tokens[0]) / sum(map(followed, set(ctx)))


@settings(max_examples=examples(150), deadline=None)
@given(docs_st, tokens_st, st.lists(st.integers(1, 7), max_size=10), st.integers(1, 8), alpha_st,
       cap_st)
def test_incremental_index_agrees_with_scratch_and_reference(docs, context, chunks, k, alpha, cap):
    inc = index_with(docs, cap=cap)
    pos = 0
    for c in chunks + [len(context)]:
        inc.extend(context[pos : pos + c])
        pos = min(len(context), pos + c)
        ref = suffix_proposal(context[:pos], k, history=docs, alpha=alpha, count_cap=cap)
        assert inc.lookup(k, alpha) == ref
    scratch = index_with(docs, cap=cap)
    scratch.extend(context)
    assert structure(inc.live) == structure(scratch.live)
    assert structure(inc.history) == structure(scratch.history)


@settings(max_examples=examples(200), deadline=None)
@given(docs_st, tokens_st)
def test_history_match_never_crosses_documents(docs, context):
    idx = index_with(docs)
    idx.extend(context)
    m, automaton, _ = idx.match()
    hist = oracle_hist_len(docs, context)
    assert m == max(hist, oracle_live_len(context))
    if hist > oracle_live_len(context):
        assert automaton is idx.history


def test_history_boundaries_by_example():
    idx = index_with([[1, 2], [3, 4]])
    idx.extend([9, 2, 3])
    assert idx.match()[0] == 1 and idx.lookup(4) == [4]  # [2, 3] spans the boundary
    idx = index_with([[1, 2], [3, 4]])
    idx.extend([9, 2])
    assert idx.match()[0] == 0 and idx.lookup(4) == []  # 2 ends its document: no follower


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), max_size=8),
       st.integers(0, 20))
def test_history_window_is_fifo_and_bounded(requests, budget):
    idx = SuffixIndex(budget)
    for i, r in enumerate(requests):
        idx.extend(r)
        idx.new_request()
        docs = list(idx.docs)
        assert sum(map(len, docs)) == idx.history_tokens <= budget
        # the window is the latest requests, the newest possibly cut to its latest tokens
        if budget:
            assert docs[-1] == r[-budget:]
            assert docs[:-1] == [list(x) for x in requests[i - len(docs) + 1 : i]]
        else:
            assert docs == []
        fresh = SuffixAutomaton()
        for d in docs:
            fresh.extend(d)
            fresh.append(-1 - len(fresh.tokens))
        assert structure(idx.history) == structure(fresh)  # rebuilt or extended alike


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=200), st.integers(1, 120))
@example([2] * 300, 100)  # a rebuild per request would feed ~100 tokens per 2 added
def test_a_full_history_forgets_in_bulk_so_its_work_stays_linear(lengths, budget):
    """Past the window the oldest requests go down to LOW_WATER of it at once: the tokens
    ever fed to automata stay under 4x those added (each rebuild feeds <= 3/4 of the
    window after >= 1/4 of it was added, or the one request it keeps), and the window is
    the newest requests."""
    fed = 0
    extend = SuffixAutomaton.extend

    def counted(self, tokens):
        nonlocal fed
        tokens = list(tokens)
        fed += len(tokens)
        return extend(self, tokens)

    history = SuffixHistory(budget)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SuffixAutomaton, "extend", counted)
        docs = [[i % 7] * n for i, n in enumerate(lengths)]
        for d in docs:
            history.add(d)
    added = sum(min(n, budget) for n in lengths)
    assert fed <= 4 * added
    kept = list(history.docs)
    assert kept[-1] == docs[-1][-budget:] and kept[:-1] == docs[len(docs) - len(kept):-1]
    assert history.tokens == sum(map(len, kept)) <= budget
    # it forgot only what it had to: the next older request would not have fitted
    older = len(docs) - len(kept) - 1
    if older >= 0:
        assert history.tokens + lengths[older] > LOW_WATER * budget


def test_begin_continues_a_follow_up_turn_and_starts_other_requests_afresh():
    d = SuffixDrafter(eos=[9])
    d.begin([1, 2, 3, 1, 2])
    assert d.propose([1, 2, 3, 1, 2], 4).tokens == (3, 1)
    d.propose([1, 2, 3, 1, 2, 3], 4)  # the context grows within the request
    d.begin([1, 2, 3, 1, 2, 3, 4])  # a follow-up turn resending the conversation: same text
    assert list(d.index.docs) == [] and d.index.tokens == [1, 2, 3, 1, 2, 3, 4]
    d.begin([5, 1, 2])  # another request: the previous one joins the history
    history = [[1, 2, 3, 1, 2, 3, 4]]  # the history match [1, 2] -> 3 ...
    assert list(d.propose([5, 1, 2], 4).tokens) == suffix_proposal([5, 1, 2], 4, history=history)
    assert list(d.index.docs) == [[1, 2, 3, 1, 2, 3, 4]] and d.index.tokens == [5, 1, 2]
    d.begin([5, 1, 7, 8, 9, 7])  # same first tokens, differs later: a new request
    assert len(d.index.docs) == 2 and d.propose([5, 1, 7, 8, 9, 7, 8], 4).tokens == (9,)  # cut after EOS


def test_bad_arguments():
    for kw in ({"alpha": 0}, {"max_history_tokens": -1}, {"count_cap": 0}):
        with pytest.raises(ValueError):
            SuffixDrafter(**kw)


# ---- greedy parity on real weights ----

MAX_TOKENS = 40  # the machine is slow and shared: keep the file near 90 s
PROMPTS = parity_prompts()


def run(name, drafter):
    model, tok = real_model("smollm2-135m")
    ids = encode_prompt(tok, PROMPTS[name])
    stats = SpecStats()
    out = [e.token for e in token_stream(model, ids, drafter=drafter, max_tokens=MAX_TOKENS,
                                         num_draft_tokens=4, eos=tok.eos_token_ids, stats=stats)]
    return out, stats


def plain(name):
    """Cut from the session's shared reference (tests/parity's rows decode these prompts)."""
    return plain_prefix("smollm2-135m", PROMPTS[name], MAX_TOKENS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["passage_zen", "json_records_short"])
def test_greedy_parity_real_model(name):
    _, tok = real_model("smollm2-135m")
    out, stats = run(name, SuffixDrafter(eos=tok.eos_token_ids))
    assert out == plain(name)
    assert_stats_speculated(stats, name)


@pytest.mark.slow
def test_repeated_request_benefits_from_history():
    _, tok = real_model("smollm2-135m")
    d = SuffixDrafter(eos=tok.eos_token_ids)
    first, s1 = run("open_story", d)
    second, s2 = run("open_story", d)
    assert first == second == plain("open_story")
    assert len(d.index.docs) == 1
    assert s2.accepted > s1.accepted and s2.verify_steps < s1.verify_steps
