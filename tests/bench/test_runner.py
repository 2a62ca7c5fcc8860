"""specdec bench: workloads, and the whole command on the real default model (the CI smoke
test: ``specdec bench --quick``); configs and the analysis maths: tests/bench/test_configs.py,
tests/bench/test_analysis.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import specdec.cache.batch_cache as steps  # the verify step rolls back through it
from specdec.bench import analysis
from specdec.bench.configs import BenchConfig, parse_config
from specdec.bench.runner import BenchPlan, run_plan
from specdec.bench.workloads import (
    CLASSES, builtin_workloads, fit_prompt, load_workloads, parse_workload,
    split_instruction, write_workloads,
)
from specdec.core.text import encode_prompt
from specdec.decode.trace import tracing

ROOT = Path(__file__).resolve().parents[2]


# --- workloads --------------------------------------------------------------------

def test_builtin_workloads_cover_every_class_and_round_trip(tmp_path):
    ws = builtin_workloads()
    assert {w.cls for w in ws} == set(CLASSES)
    assert all(w.source for w in ws if w.cls != "open_ended")
    path = tmp_path / "w.jsonl"
    write_workloads(ws, path)
    assert load_workloads(path) == ws


@pytest.mark.parametrize("line, needle", [
    ('{"name": "a"}', "'class'"),
    ('{"name": "a", "class": "c"}', "exactly one of"),
    ('{"name": "a", "class": "c", "prompt": "x", "messages": []}', "exactly one of"),
    ('{"name": "a", "class": "c", "messages": [{"role": "assistant", "content": "x"}]}',
     "ending with a user (or tool) message"),
    ('{"name": "a", "class": "c", "prompt": "x", "turns": "more"}', "'turns'"),
    ('{"name": "a", "class": "c", "prompt": "x", "max_tokens": 0}', "'max_tokens'"),
    ('{"name": "a", "class": "c", "prompt": "x", "colour": 1}', "unknown field"),
    ('{"name": "a", "class": "c", "prompt": "x", "tools": [{"type": "function"}]}', "'tools'"),
    ('{"name": "a", "class": "c", "prompt": "x", "tool_choice": "required"}', "'tool_choice'"),
    ('{"name": "a", "class": "c", "prompt": "x", "tools": [{"type": "function", "function": '
     '{"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}',
     "'tool_choice'"),
    ('[1, 2]', "JSON object"),
    ('{"name": ', "not valid JSON"),
])
def test_bad_workload_lines_name_the_line_and_the_field(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"name": "ok", "class": "c", "prompt": "fine"}\n' + line + "\n")
    with pytest.raises(ValueError) as e:
        load_workloads(path)
    assert f"{path}:2" in str(e.value) and needle in str(e.value)


def test_duplicate_workload_names_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    line = '{"name": "same", "class": "c", "prompt": "x"}\n'
    path.write_text(line * 2)
    with pytest.raises(ValueError, match="unique"):
        load_workloads(path)


@given(st.text(alphabet="ab \n", max_size=30))
def test_split_instruction_against_a_scan_for_the_last_blank_line(text):
    body = text.rstrip()
    last = max((i for i in range(len(body) - 1) if body[i:i + 2] == "\n\n"), default=None)
    expected = ("", text) if last is None else (body[:last], body[last + 2:])
    assert split_instruction(text) == expected


@pytest.mark.parametrize("n", [300, 900])
def test_fit_prompt_hits_the_length_and_keeps_the_instruction(smollm, n):
    _, tok = smollm
    for w in builtin_workloads():
        if w.tools:  # an agent transcript runs as written (the runner does not fit it)
            continue
        fitted = fit_prompt(tok, w, n)
        ids = encode_prompt(tok, fitted.first_messages())
        assert abs(len(ids) - n) <= 2 and fitted.prompt_tokens == len(ids), w.name
        assert fitted.prompt.endswith(split_instruction(w.prompt)[1]), w.name
        assert fitted.turns == w.turns and fitted.cls == w.cls


def test_fit_prompt_refuses_a_length_below_the_instruction(smollm):
    _, tok = smollm
    w = parse_workload({"name": "x", "class": "c", "prompt": "material\n\n" + "word " * 50})
    with pytest.raises(ValueError, match="instruction alone"):
        fit_prompt(tok, w, 10)


# --- the real thing ---------------------------------------------------------------

def _small_plan(**kw):
    w = [w for w in builtin_workloads() if w.name in ("code_rename", "multiturn_short")]
    kw = {"oracle": False, "warmup": False, **kw}  # no warm-up repetition: half the time
    return BenchPlan(model="smollm2-135m", workloads=w, configs=[parse_config("ngram:k=4")],
                     runs=1, max_tokens=24, **kw)


@pytest.mark.slow
def test_a_broken_rollback_is_diagnosed_per_config_and_a_warm_one_from_its_table(
        monkeypatch, tmp_path, smollm):
    """A broken trim shows as mismatches of each speculative config (never of plain), each
    diagnosed as a logic bug; the re-run of a diverging 'warm' ngram-mod config starts from
    the drafter the run started with (it loads the saved table again; it used to raise); each
    config's gates learn in a store of their own (a chain's suffix member shared suffix's).
    One plan holds both configs: one load, one plain run (two plans took 1.4x the CPU)."""
    from specdec.drafters import DraftSpec, ngram_mod_table

    table = ngram_mod_table(DraftSpec("ngram-mod"), smollm[1])
    table.insert(list(range(1000, 1100)))
    table.save(tmp_path / "warm.ngm")
    real_trim = steps.trim
    monkeypatch.setattr(steps, "trim", lambda cache, n: real_trim(cache, max(n - 1, 0)))
    # a 100-token cut of the case (its whole 335 tokens took 37 CPU s: plain, two configs and
    # each diagnosis re-run prefill it)
    plan = _small_plan(warm_table=str(tmp_path / "warm.ngm"), prompt_tokens=(100,))
    # the gate off: every step drafts, so a rejection (and the broken trim) comes at once
    plan.workloads, plan.max_tokens = plan.workloads[:1], 8  # a broken trim diverges at once
    plan.configs = [parse_config("ngram:k=4:nogate"), parse_config("ngram,ngram-mod:k=4:warm:nogate")]
    stores: dict[str, set[int]] = {}  # each config's gate memory: its own, as if it ran alone
    real_drafter = BenchConfig.drafter

    def drafter(cfg, *a, **kw):
        if kw.get("learnt") is not None:  # a measured run's (a diagnosis re-runs without one)
            stores.setdefault(cfg.label, set()).add(id(kw["learnt"]))
        return real_drafter(cfg, *a, **kw)

    monkeypatch.setattr(BenchConfig, "drafter", drafter)
    result = run_plan(plan, target=smollm)
    configs = {"ngram k=4 nogate", "ngram,ngram-mod k=4 nogate warm"}
    assert configs <= set(stores) and all(len(ids) == 1 for ids in stores.values())
    assert len(set().union(*stores.values())) == len(stores)
    rows = analysis.parity([r.to_dict() for r in result.records])
    assert {r["config"] for r in rows if r["mismatches"]} == configs
    assert {d["config"] for d in result.diagnoses} == configs
    assert all(d["verdict"].startswith("logic bug") for d in result.diagnoses)


@pytest.mark.slow
def test_multi_turn_runs_feed_the_models_reply_back(tmp_path, smollm):
    # the multi-turn case alone, its first two turns (a reply fed back into a next request,
    # and what a second turn's trace and oracle show): 8 tokens a turn hold each turn's drafts
    # (all three turns of 16 tokens took 33 CPU s, mostly each turn's prefill)
    plan = _small_plan(oracle=True)
    plan.workloads = [replace(w, turns=w.turns[:1]) for w in plan.workloads if w.name == "multiturn_short"]
    plan.max_tokens = 8
    with tracing(str(tmp_path / "trace.jsonl")):  # --trace: every step tagged with its run
        result = run_plan(plan, target=smollm)  # the session's model: no second load
    traced = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    ours = [r for r in result.records if r.source == "specdec" and r.config != "plain"
            and not r.config.startswith("oracle")]
    assert {(t["config"], t["run"]) for t in traced} >= {(r.config, r.run) for r in ours}
    assert {t["case"] for t in traced} == {"multiturn_short"}
    turns = [r for r in result.records if r.workload == "multiturn_short" and r.run == 1
             and r.config == "plain"]
    # the oracle follows the conversation turn by turn: every draft of every turn accepted
    oracle = [r for r in result.records if r.config == "oracle k=4"]
    assert {r.turn for r in oracle} == {0, 1}
    assert all(r.accepted == r.drafted > 0 for r in oracle)
    assert [r.turn for r in turns] == [0, 1]
    # each turn's prompt holds the previous prompt plus the reply plus the next request
    assert turns[1].prompt_tokens > turns[0].prompt_tokens + len(turns[0].tokens)
    first, reply, request = result.cases["multiturn_short|None|1"]
    assert first == {"role": "user", "content": result.cases["multiturn_short|None|0"]}
    assert request == {"role": "user", "content": plan.workloads[0].turns[0]}
    assert reply == {"role": "assistant", "content": smollm[1].decode(turns[0].tokens)}
    rows = analysis.parity([r.to_dict() for r in result.records])
    assert all(r["mismatches"] == 0 for r in rows)


@pytest.mark.slow
def test_quick_bench_produces_the_report_and_holds_parity(tmp_path):
    """The CI smoke test: the whole command on the default model (without the warm-up
    repetition, which would double its ~8 minutes here), on an echo class and the open-ended
    case and 16 tokens: every config, the oracle and the plots. The echo case is
    code_signature (the profile's code_edit class, a shorter prompt than its code_hints:
    each of the five runs prefills it afresh)."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run([sys.executable, "-m", "specdec", "bench", "--quick", "--no-warmup",
                           "--workloads", "code_signature,open_story", "--max-tokens", "16",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "parity: 0 mismatches" in proc.stdout
    for name in ("report.md", "results.json", "speedup_by_class.png", "per_position.png",
                 "cost_curve.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    data = json.loads((tmp_path / "results.json").read_text())
    plan = data["plan"]
    oracle_ks = {int(c.split("k=")[1].split(":")[0]) for c in plan["configs"]}
    per_rep = 1 + len(plan["configs"]) + len(oracle_ks)  # plain, ours, the oracle at each k
    assert plan["warmup"] is False
    assert len(data["records"]) == len(plan["workloads"]) * plan["runs"] * per_rep
    assert all(r["mismatches"] == 0 for r in data["summary"]["parity"])
    oracle = [r for r in data["records"] if r["config"].startswith("oracle")]
    assert oracle and all(r["accepted"] == r["drafted"] > 0 for r in oracle)
    rows = [r for r in data["summary"]["rows"] if r["config"] == "ngram k=4"]
    assert all(0 < r["of_oracle"] for r in rows) and len(data["summary"]["bounds"]) == len(rows)
    # every config's drafter cost was measured and gives a bound below the zero-cost one
    assert len(data["draft_costs"]) == len(plan["configs"])
    assert all(c["fixed"] > 0 for c in data["draft_costs"].values())
    assert all(0 < r["draft_bound"] <= r["zero_cost"] for r in rows)
    report = (tmp_path / "report.md").read_text()
    assert "drafter-cost bound" in report and "tokens / verify step" in report
    assert "## Parity (strict, N×N)" in report and "**0 mismatches**" in report
    assert "of oracle" in report and "## Ceilings from the plain output" in report


@pytest.mark.parametrize("config", ["model:k=4:tree=auto", "ngram:k=4:tree=8"])
def test_tree_configs_on_a_hybrid_target_are_refused_before_measuring(tmp_path, config):
    """Issue #35: a tree config on a hybrid (recurrent-cache) target is refused up front by
    the engine's own check, naming the configs (it crashed in the tree-overhead measurement)."""
    from hybrid_tiny import save_dir

    target = save_dir("qwen3_next", tmp_path / "qwen3_next")
    plan = BenchPlan(model=str(target), workloads=builtin_workloads()[:1],
                     configs=[parse_config("ngram:k=4"), parse_config(config)],
                     draft_model=str(target), runs=1, max_tokens=8, oracle=False, warmup=False)
    with pytest.raises(ValueError, match=f"recurrent layers.*drop tree= from the configs {config} "):
        run_plan(plan)


def test_a_hybrid_pair_benches_with_parity(tmp_path):
    """Issue #35 item 1: the bench's pair profile with a hybrid target drafted for by a hybrid
    draft model (a differently seeded one of the same family) runs every config with parity."""
    from hybrid_tiny import save_dir

    target = save_dir("qwen3_next", tmp_path / "target")
    draft = save_dir("qwen3_next", tmp_path / "draft", seed=1)
    # the gate off: on a tiny model its timed choice is host noise, and drafts must be verified
    plan = BenchPlan(model=str(target), workloads=builtin_workloads()[:1],
                     configs=[parse_config("model:k=4:nogate"), parse_config("model,suffix:k=3:nogate")],
                     draft_model=str(draft), runs=1, max_tokens=12, oracle=False, warmup=False)
    result = run_plan(plan)
    assert {r.config for r in result.records if r.source == "specdec"} >= {"plain", "model k=4 nogate"}
    assert sum(r.drafted for r in result.records) > 0
    assert all(row["mismatches"] == 0 for row in analysis.parity([r.to_dict() for r in result.records]))


@pytest.fixture(scope="module")
def head_pair(tmp_path_factory):
    """A tiny attention-only target directory and a random EAGLE-3 head for it, saved in the
    published format (the target's LM head over its 64 most frequent-by-id tokens)."""
    import numpy as np
    from hybrid_tiny import save_dir

    from specdec.eagle.io import save_head
    from specdec.eagle.pipeline import DrafterOptions, new_head
    from specdec.eagle.train import DraftVocab
    from specdec.loader import load

    root = tmp_path_factory.mktemp("bench-head")
    target = save_dir("qwen2", root / "target")
    model, _ = load(str(target))
    vocab = DraftVocab(np.arange(64) * 4 + 1, model.args.vocab_size)
    head = new_head(model, vocab.ids, (0, 1, 1), DrafterOptions(init_from_target=False), seed=2)
    vocab.apply(head)
    save_head(head, root / "head")
    return target, root / "head"


def test_eagle_configs_bench_with_the_heads_price_and_parity(head_pair, tmp_path, monkeypatch):
    """Issue #47: ``specdec bench --draft-model HEAD_DIR`` with eagle configs loads the head once,
    prices it (``measure.head_cost``, not a host drafter's cost: the runner used to call
    ``draft_cost_for`` without it and raise), and every config's output is plain's; a draft
    model beside a head in one plan is refused (both read --draft-model)."""
    from conftest import seed_cost_curve

    from specdec.loader import load

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    target, head_dir = head_pair
    # issue #46: the run prices on the curve cached for this model, dtype and machine (the one
    # a CLI run or a server prices on), not one timed under whatever load the run starts in
    stored = {L: 0.01 * (1 + 0.1 * L) for L in range(1, 9)}
    seed_cost_curve(load(str(target))[0], stored, tmp_path)
    configs = [parse_config("eagle:k=3:nogate"), parse_config("eagle,suffix:k=3:nogate"),
               parse_config("eagle:k=3")]
    plan = BenchPlan(model=str(target), workloads=builtin_workloads()[:1], configs=configs,
                     draft_model=str(head_dir), runs=1, max_tokens=12, oracle=False, warmup=False)
    result = run_plan(plan)
    assert result.cost_curve == {L: stored[L] for L in range(1, len(result.cost_curve) + 1)}
    assert len(result.cost_curve) >= 4  # k=3: L = 1 .. 4 at least (peers' k too)
    ours = [r for r in result.records if r.config == "eagle k=3 nogate"]
    assert ours and sum(r.drafted for r in ours) > 0
    assert all(row["mismatches"] == 0 for row in analysis.parity([r.to_dict() for r in result.records]))
    assert set(result.draft_costs) == {c.label for c in configs}
    assert all(c["per_token"] > 0 for c in result.draft_costs.values())
    plan.configs = [*configs[:1], parse_config("model:k=3")]
    with pytest.raises(ValueError, match="cannot share a plan with model:k=3"):
        run_plan(plan)


def test_mtp_configs_bench_with_the_blocks_price_and_parity(tmp_path, monkeypatch):
    """Issue #47: an mtp config on a hybrid Qwen3.5 directory whose mtp.* shard sits beside the
    weights (no --draft-model: the model's own checkpoint) benches priced and with parity."""
    import mlx.core as mx
    from drafters.test_mtp import published
    from hybrid_tiny import save_dir
    from mlx.utils import tree_map

    from specdec.eagle.mtp import MtpHead
    from specdec.loader import load

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    d = save_dir("qwen3_5", tmp_path / "ckpt")
    mx.random.seed(1)
    block = MtpHead(load(str(d))[0])
    block.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.15, block.parameters()))
    mx.save_safetensors(str(d / "model-mtp.safetensors"), published(block))
    plan = BenchPlan(model=str(d), workloads=builtin_workloads()[:1],
                     configs=[parse_config("mtp:k=2:nogate"), parse_config("mtp,suffix:k=2:nogate")],
                     runs=1, max_tokens=10, oracle=False, warmup=False)
    result = run_plan(plan)
    assert sum(r.drafted for r in result.records if r.config == "mtp k=2 nogate") > 0
    assert all(row["mismatches"] == 0 for row in analysis.parity([r.to_dict() for r in result.records]))
    assert all(c["per_token"] > 0 for c in result.draft_costs.values())
