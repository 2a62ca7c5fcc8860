"""``specdec.core.stats.SpecStats``: the definitions (vLLM's) computed from recorded steps,
per-position counts by draft depth, and zero where nothing was measured."""

from hypothesis import given
from hypothesis import strategies as st

from specdec.core.stats import SpecStats


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=12))
def test_recorded_linear_steps_give_the_definitions(steps):
    steps = [(d, min(a, d)) for d, a in steps]
    s = SpecStats()
    for d, a in steps:
        s.record_step(d, a, d + 1)
    s.generated_tokens = s.emitted_tokens = sum(a + 1 for _, a in steps)
    drafted, accepted = sum(d for d, _ in steps), sum(a for _, a in steps)
    assert (s.verify_steps, s.drafted, s.accepted) == (len(steps), drafted, accepted)
    assert s.draft_steps == sum(d > 0 for d, _ in steps)
    assert s.acceptance_rate == (accepted / drafted if drafted else 0.0)
    assert s.mean_acceptance_length == (s.generated_tokens / len(steps) if steps else 0.0)
    assert s.p_cache == (s.emitted_tokens / sum(d + 1 for d, _ in steps) if steps else 0.0)
    assert s.tokens_per_forward == s.mean_acceptance_length  # no EOS or cut: the same
    depth = max((d for d, _ in steps), default=0)
    assert s.drafted_by_position == [sum(d > i for d, _ in steps) for i in range(depth)]
    assert s.accepted_by_position == [sum(a > i for _, a in steps) for i in range(depth)]


def test_a_tree_step_counts_its_positions_by_depth():
    s = SpecStats()
    s.record_step(drafted=7, accepted=2, fed=8, depth=3)  # 7 nodes, 3 deep
    assert (s.drafted_by_position, s.accepted_by_position) == ([1, 1, 1], [1, 1, 0])


def test_rates_are_zero_until_measured_and_to_dict_carries_them():
    s = SpecStats(prompt_tokens=11, prefill_s=0.5, generated_tokens=6, decode_s=2.0)
    assert (s.prefill_tokens_per_s, s.decode_tokens_per_s) == (20.0, 3.0)
    empty = SpecStats().to_dict()
    assert all(empty[k] == 0.0 for k in ("acceptance_rate", "mean_acceptance_length", "p_cache",
                                         "tokens_per_forward",
                                         "prefill_tokens_per_s", "decode_tokens_per_s"))
    assert empty["drafter"] == "none" and empty["drafted_by_position"] == []
