"""Greedy acceptance, against an oracle."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
