"""``specdec bench``'s flags (``specdec.bench.cli``): bad values refused with a message, and
flags reaching the plan over the profile's defaults (no model is loaded)."""

from __future__ import annotations

import argparse

import pytest

from specdec.bench.cli import add_bench_parser, build_plan
from specdec.bench.runner import BenchPlan

MODEL = "smollm2-135m"


def _parse(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_bench_parser(ap.add_subparsers())
    return ap.parse_args(["bench", *argv])


@pytest.mark.parametrize("value, needle", [
    ("0", ">= 1"), ("2,-1", ">= 1"), ("2,x", "comma list"), ("", "comma list"),
    ("2,,4", "comma list"), ("4,4", "once"),
])
def test_bad_peer_k_is_refused_with_a_message(value, needle, capsys):
    with pytest.raises(SystemExit):
        _parse("--peer-k", value)
    err = capsys.readouterr().err
    assert "--peer-k" in err and needle in err


def test_peer_k_reaches_the_plan_and_a_single_k_stays_a_single_run():
    assert build_plan(_parse("--peer-k", "2,3,8"))[0].peer_k == (2, 3, 8)
    assert build_plan(_parse())[0].peer_k == (4,)  # the default profile: one k, as before
    assert BenchPlan(MODEL, [], [], peer_k=6).peer_k == (6,)  # a caller's old int still works
    for bad in ((), (0,), (2, 2)):
        with pytest.raises(ValueError, match="peer_k"):
            BenchPlan(MODEL, [], [], peer_k=bad)
