"""``specdec.bench.configs``: config specs parse, label and round-trip; a sweep is the
cartesian product of its flags; bad specs are refused."""

from __future__ import annotations

import pytest

from specdec.bench.configs import BenchConfig, parse_config, sweep
from specdec.drafters import DraftSpec


def test_config_specs_parse_and_label():
    c = parse_config("ngram:k=8:n=2:adaptive")
    assert c == BenchConfig(DraftSpec("ngram", 8, 2, 3, adaptive_k=True))
    assert parse_config(c.text) == c and c.label == "ngram k=8 n=2 adaptive"
    assert parse_config("ngram,suffix:k=2:nogate").draft_type == "ngram,suffix"
    assert not parse_config("ngram:nogate").spec.gate and parse_config("ngram").spec.gate
    assert parse_config("ngram:nogate").label == "ngram k=8 nogate"  # the default k
    assert parse_config("none").baseline
    for bad in ("nope", "ngram:k=0", "ngram:x=1", "none:k=2", "ngram:warm", "ngram,none", "ngram:gate"):
        with pytest.raises(ValueError):
            parse_config(bad)


def test_sweep_is_the_cartesian_product():
    cfgs = sweep(["ngram", "suffix"], [2, 4], [1, 3], adaptive=True, gate=True)
    labels = [c.label for c in cfgs]
    # ngram: 2 k × 2 n + adaptive + nogate; suffix: 2 k (n only varies ngram) + adaptive + nogate
    assert len(cfgs) == 6 + 4 and len(set(labels)) == len(labels)
    assert "ngram k=2 n=3" in labels and "suffix k=4 adaptive" in labels
