"""``specdec.bench.profiles``: a profile supplies every default of the plan and flags
override it (through the bench's own flags; no model is loaded)."""

from __future__ import annotations

from specdec.bench.cli import build_plan
from specdec.bench.profiles import PROFILES
from specdec.bench.runner import total_steps

from .test_cli import _parse


def test_pair_profile_sweeps_the_ks_on_both_models():
    plan, prof, _ = build_plan(_parse("--profile", "pair"))
    assert (plan.model, plan.draft_model) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert [w.name for w in plan.workloads] == ["code_hints", "json_add"]
    assert plan.peer_k == (2, 3, 4, 6, 8) and list(plan.peers) == ["mlx-lm"]
    labels = [c.label for c in plan.configs]
    assert labels[:5] == [f"model k={k}" for k in plan.peer_k]
    assert {"model k=4 tree=auto", "model k=6 tree=8", "ngram,model k=4"} <= set(labels)
    assert plan.max_tokens == 128 and plan.runs == 1 and plan.oracle
    assert plan.warmup and total_steps(plan) == 2 * 2 * (1 + 8 + 1 + 1)
    no_warm = build_plan(_parse("--profile", "pair", "--no-warmup", "--no-oracle"))[0]
    assert not no_warm.warmup and total_steps(no_warm) == 2 * 1 * (1 + 8 + 1)
    assert total_steps(no_warm, done=1) == 1 * 1 * (1 + 8 + 1)  # a resumed run's cases left
    # flags still override the profile
    assert build_plan(_parse("--profile", "pair", "--peer-k", "4"))[0].peer_k == (4,)


def test_every_profile_builds_a_plan_and_quick_is_the_quick_profile():
    for name in PROFILES:
        plan, prof, _ = build_plan(_parse("--profile", name))
        assert prof is PROFILES[name] and plan.workloads and plan.configs, name
    assert build_plan(_parse("--quick"))[1] is PROFILES["quick"]
