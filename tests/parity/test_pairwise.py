"""``missing_pairs`` (tests/pairwise.py) finds every pair and single value a table misses,
and flags values outside their factor's levels; the SmolLM2 parity table misses none."""

from pairwise import missing_pairs
from parity.test_parity_real import LEVELS as PARITY_LEVELS
from parity.test_parity_real import PARITY_CASES, VARIED

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


def test_smollm_parity_table_covers_every_pair():
    rows = [dict(kind=c[0], k=c[2], n_min=c[3]) for c in PARITY_CASES]
    assert missing_pairs(rows, PARITY_LEVELS) == []
    assert {c[1] for c in PARITY_CASES} <= set(VARIED)
    assert len({c[1:4] for c in PARITY_CASES}) == len(PARITY_CASES)  # no row twice
