"""Smoke test of ``lab/hybrid-rollback-cost/hybrid_rollback_cost.py`` (issue #25's rollback measurement):
one round on the tiny size gives a well-formed result, every variant's measured step
emits the model's greedy tokens, and the cache after each kind of rollback (a replay of
the recurrent layers on the kept rows; kept tokens riding in front of the next block)
holds what feeding the same tokens one at a time gives. No timing is asserted: the
machine is shared."""

import importlib.util
import math
import sys
from pathlib import Path

import mlx.core as mx

from specdec.cache.rollback import make_cache, prefill

_PATH = Path(__file__).resolve().parents[2] / "lab" / "hybrid-rollback-cost" / "hybrid_rollback_cost.py"
_spec = importlib.util.spec_from_file_location("hybrid_rollback_cost", _PATH)
cost = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cost  # dataclasses resolve their module through sys.modules
_spec.loader.exec_module(cost)

KEPT = (1, 3)


def _reference(model, context, fed):
    """A cache prefilled with the context but its last token, then fed ``fed`` one by one."""
    ref = make_cache(model, recurrent=True)
    prefill(model, ref, context[:-1])
    for t in fed:
        model(mx.array([[t]]), cache=ref)
    return cost.Bench(model, ref, context, [], 8).arrays()


def test_measure_structure_and_exact_rollback():
    model = cost.build("tiny")
    states: dict = {}
    res = cost.measure(model, rounds=1, kept=KEPT, context_len=48, states=states)
    keys = {"plain 0", "accept 0"} | {f"{v} {j}" for j in KEPT for v in ("full", "kept", "eager", "replay", "rewind")}
    assert set(res["times_s"]) == set(res["median_ms"]) == set(states) == keys
    assert all(len(ts) == 1 for ts in res["times_s"].values())  # the warm-up round dropped
    hows = ("replay alone", "replay", "deferred", "eager")
    assert [(c["j"], c["how"]) for c in res["costs"]] == [(j, h) for j in KEPT for h in hows]
    numbers = [v for c in res["costs"] for v in c.values() if isinstance(v, float)]
    for pooled in ("deferred_per_kept_token", "eager_any_j", "replay_per_kept_token"):
        numbers += res[pooled].values()
    assert all(math.isfinite(v) for v in numbers)
    truth, context = res["truth"], res["context"]
    assert res["tokens"]["accept 0"] == truth[:9]
    for j in KEPT:
        # the replayed step: j - 1 drafts accepted, the correction; the cache holds them
        assert res["tokens"][f"replay {j}"] == truth[:j]
        want = _reference(model, context, [context[-1], *truth[: j - 1]])
        for v in ("replay", "rewind"):  # the rewind alone leaves the same cache
            got = states[f"{v} {j}"]
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert a.shape == b.shape and mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()
        for v in ("full", "kept", "eager"):  # each measured step accepts all 8 drafts
            assert res["tokens"][f"{v} {j}"] == truth[j: j + 9]
        # root, the j - 1 accepted drafts, the correction, then the measured block's 8 drafts
        want = _reference(model, context, [context[-1], *truth[: j + 8]])
        for v in ("full", "kept", "eager"):
            got = states[f"{v} {j}"]
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert a.shape == b.shape and mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()
    assert "per kept token" in cost.table({"tiny": res})
