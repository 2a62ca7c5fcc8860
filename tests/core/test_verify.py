"""Greedy acceptance and stop-string holding, against oracles."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.core.text import StopMatcher
from specdec.core.verify import greedy_accept


@given(st.lists(st.integers(0, 3), max_size=10), st.data())
def test_greedy_accept_is_longest_agreeing_prefix_plus_target(draft, data):
    targets = data.draw(st.lists(st.integers(0, 3), min_size=len(draft) + 1, max_size=len(draft) + 1))
    a, emitted = greedy_accept(draft, targets)
    assert draft[:a] == targets[:a]
    assert a == len(draft) or draft[a] != targets[a]
    assert emitted == targets[: a + 1]  # exactly what plain greedy emits over these positions


def test_greedy_accept_checks_lengths():
    with pytest.raises(ValueError):
        greedy_accept([1, 2], [1, 2])


@settings(max_examples=1000)
@given(
    st.text(alphabet="abEND ", max_size=40),
    st.lists(st.text(alphabet="abEND", min_size=1, max_size=4), max_size=3),
    st.lists(st.integers(1, 5), max_size=20),
)
def test_stop_matcher_emits_exactly_the_text_before_the_first_stop(text, stops, cuts):
    pieces, i = [], 0
    for c in cuts:  # an arbitrary segmentation of the text (tokens)
        pieces.append(text[i : i + c])
        i += c
    pieces.append(text[i:])
    m = StopMatcher(stops)
    out, stopped = "", False
    for p in pieces:
        emitted, stopped = m.feed(p)
        out += emitted
        if stopped:
            break
    if not stopped:
        out += m.flush()
    # Oracle at token granularity: after the first piece whose arrival makes some stop
    # string appear, the output is the text before the earliest stop string seen so far.
    expected, seen, hit = text, "", False
    for p in pieces:
        seen += p
        hits = [seen.find(s) for s in stops if s in seen]
        if hits:
            expected, hit = seen[: min(hits)], True
            break
    assert out == expected
    assert stopped == hit
