"""``missing_pairs`` (tests/pairwise.py) finds every pair and single value a table misses,
and flags values outside their factor's levels."""

from pairwise import missing_pairs

LEVELS = dict(a=(0, 1), b=("x", "y"), c=(True, False))
FULL = [dict(a=0, b="x", c=True), dict(a=0, b="y", c=False), dict(a=1, b="x", c=False),
        dict(a=1, b="y", c=True)]  # the smallest all-pairs table of three 2-level factors


def test_missing_pairs_names_each_gap():
    assert missing_pairs(FULL, LEVELS) == []
    assert missing_pairs(FULL[1:], LEVELS) == [
        (("a", 0), ("b", "x")), (("a", 0), ("c", True)), (("b", "x"), ("c", True))]
    assert missing_pairs([*FULL, dict(a=2, b="x", c=True)], LEVELS) == [(("unknown", "a"), 2)]
    assert missing_pairs([dict(a=0, b="x", c=True)], dict(a=(0, 1), b=("x",), c=(True,))) == [
        (("a", 1),), (("a", 1), ("b", "x")), (("a", 1), ("c", True))]
