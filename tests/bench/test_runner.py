"""specdec bench: workloads, configs, the analysis maths, and the whole command on the
real default model (the CI smoke test: ``specdec bench --quick``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import specdec.cache.batch_cache as steps  # the verify step rolls back through it
from specdec.bench import analysis
from specdec.bench.configs import BenchConfig, parse_config, sweep
from specdec.drafters import DraftSpec
from specdec.bench.runner import BenchPlan, run_plan
from specdec.bench.workloads import (
    CLASSES, builtin_workloads, fit_prompt, load_workloads, parse_workload,
    split_instruction, write_workloads,
)
from specdec.core.text import encode_prompt

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


# --- configs ----------------------------------------------------------------------

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


# --- analysis ---------------------------------------------------------------------

def test_zero_cost_bound_worked_example():
    assert analysis.zero_cost([(5, 4), (5, 1)], 7, {1: 1.0, 5: 1.4}) == pytest.approx(2.5)
    assert analysis.zero_cost([(1, 0)] * 9, 9, {1: 0.1, 2: 0.12}) == pytest.approx(1.0)


def _rec(config, run, tokens, source="specdec", decode_s=1.0, workload="w", turn=0, **kw):
    base = dict(model="m", workload=workload, cls="code_edit", length=None, prompt_tokens=10,
                config=config, source=source, run=run, turn=turn, k=4, tokens=tokens,
                prefill_s=0.1, decode_s=decode_s, generated=len(tokens), drafted=0,
                accepted=0, verify_steps=len(tokens), fed_tokens=len(tokens),
                drafted_by_position=[], accepted_by_position=[],
                steps=[(1, 0)] * len(tokens))
    return {**base, **kw}


def test_parity_is_n_by_n_and_finds_one_bad_run():
    recs = [_rec("plain", r, [1, 2, 3]) for r in (0, 1, 2, 3)]
    recs += [_rec("ngram k=4", r, [1, 2, 3]) for r in (1, 2)]
    recs += [_rec("ngram k=4", 3, [1, 9, 3])]
    recs += [_rec("ngram k=4", 0, [7, 7, 7])]  # the warm-up is not compared
    rows = {r["config"]: r for r in analysis.parity(recs)}
    assert rows["plain"]["comparisons"] == 9 and rows["plain"]["mismatches"] == 0
    assert rows["ngram k=4"]["comparisons"] == 9
    assert rows["ngram k=4"]["mismatches"] == 3 and rows["ngram k=4"]["first_divergence"] == 1


def test_summary_speedup_is_against_the_same_engines_plain_runs():
    recs = [_rec("plain", r, [1] * 10, decode_s=d) for r, d in ((1, 1.0), (2, 2.0), (3, 1.25))]
    recs += [_rec("ngram k=4", r, [1] * 10, decode_s=0.5) for r in (1, 2, 3)]
    recs += [_rec("peer: plain", r, [1] * 10, source="peer", decode_s=0.25) for r in (1, 2, 3)]
    recs += [_rec("peer: pld k=4", r, [1] * 10, source="peer", decode_s=0.125) for r in (1, 2, 3)]
    rows = {r["config"]: r for r in analysis.summarize(recs, {1: 1.0, 2: 1.0})}
    assert rows["plain"]["tok_s"] == pytest.approx(8.0)  # median of 10, 5, 8
    assert rows["ngram k=4"]["speedup"] == pytest.approx(20 / 8)
    assert rows["peer: pld k=4"]["speedup"] == pytest.approx(2.0)
    assert rows["plain"]["tok_s_min"] == 5.0 and rows["plain"]["tok_s_max"] == 10.0


def test_per_position_acceptance_sums_over_runs():
    recs = [_rec("c", 1, [1], drafted_by_position=[2, 2, 1], accepted_by_position=[2, 1, 0]),
            _rec("c", 2, [1], drafted_by_position=[2, 1], accepted_by_position=[1, 1])]
    assert analysis.per_position(recs)["c"] == pytest.approx([0.75, 2 / 3, 0.0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.1, 10), min_size=1, max_size=6))
def test_geomean_matches_the_definition(xs):
    import math

    assert analysis.geomean(xs) == pytest.approx(math.prod(xs) ** (1 / len(xs)))


# --- the real thing ---------------------------------------------------------------

def _small_plan(**kw):
    w = [w for w in builtin_workloads() if w.name in ("code_rename", "multiturn_short")]
    kw = {"oracle": False, "warmup": False, **kw}  # no warm-up repetition: half the time
    return BenchPlan(model="smollm2-135m", workloads=w, configs=[parse_config("ngram:k=4")],
                     runs=1, max_tokens=24, **kw)


@pytest.mark.slow
def test_bench_reports_a_broken_rollback_with_its_diagnosis(monkeypatch):
    real_trim = steps.trim
    monkeypatch.setattr(steps, "trim", lambda cache, n: real_trim(cache, max(n - 1, 0)))
    plan = _small_plan()
    # the gate off: every step drafts, so a rejection (and the broken trim) comes at once
    plan.workloads, plan.configs = plan.workloads[:1], [parse_config("ngram:k=4:nogate")]
    result = run_plan(plan)
    rows = analysis.parity([r.to_dict() for r in result.records])
    bad = [r for r in rows if r["mismatches"]]
    assert bad and all(r["config"] == "ngram k=4 nogate" for r in bad)
    assert result.diagnoses and result.diagnoses[0]["verdict"].startswith("logic bug")


@pytest.mark.slow
def test_a_diverging_warm_config_is_diagnosed_with_its_warm_table(monkeypatch, tmp_path, smollm):
    """The re-run of a diverging run must start from the drafter the run started with:
    a 'warm' ngram-mod config loads the saved table again (it used to raise instead)."""
    from specdec.drafters import DraftSpec, ngram_mod_table

    table = ngram_mod_table(DraftSpec("ngram-mod"), smollm[1])
    table.insert(list(range(1000, 1100)))
    table.save(tmp_path / "warm.ngm")
    real_trim = steps.trim
    monkeypatch.setattr(steps, "trim", lambda cache, n: real_trim(cache, max(n - 1, 0)))
    plan = _small_plan(warm_table=str(tmp_path / "warm.ngm"))
    # the gate off: every step drafts, so a rejection (and the broken trim) comes at once
    plan.workloads = plan.workloads[:1]
    plan.configs = [parse_config("ngram,ngram-mod:k=4:warm:nogate")]
    result = run_plan(plan)
    assert result.diagnoses and result.diagnoses[0]["config"] == "ngram,ngram-mod k=4 nogate warm"
    assert result.diagnoses[0]["verdict"].startswith("logic bug")


@pytest.mark.slow
def test_kv_bits_apply_to_every_run_of_ours(smollm):
    from specdec import generate
    from specdec.core.text import encode_prompt

    plan = _small_plan(kv_bits=4)
    plan.workloads, plan.max_tokens = plan.workloads[:1], 16
    result = run_plan(plan)
    prompt = encode_prompt(smollm[1], plan.workloads[0].first_messages())
    ref = generate(*smollm, prompt, drafter=None, max_tokens=16, kv_bits=4).tokens
    assert ref != generate(*smollm, prompt, drafter=None, max_tokens=16).tokens
    assert {tuple(r.tokens) for r in result.records} == {tuple(ref)}
    assert result.plan["kv_bits"] == 4


@pytest.mark.slow
def test_multi_turn_runs_feed_the_models_reply_back():
    plan = _small_plan(oracle=True)  # the multi-turn case alone: 16 tokens a turn suffice
    plan.workloads = [w for w in plan.workloads if w.name == "multiturn_short"]
    plan.max_tokens = 16
    result = run_plan(plan)
    turns = [r for r in result.records if r.workload == "multiturn_short" and r.run == 1
             and r.config == "plain"]
    # the oracle follows the conversation turn by turn: every draft of every turn accepted
    oracle = [r for r in result.records if r.config == "oracle k=4"]
    assert {r.turn for r in oracle} == {0, 1, 2}
    assert all(r.accepted == r.drafted > 0 for r in oracle)
    assert [r.turn for r in turns] == [0, 1, 2]
    # each turn's prompt holds the previous prompt plus the reply plus the next request
    assert turns[1].prompt_tokens > turns[0].prompt_tokens + len(turns[0].tokens)
    rows = analysis.parity([r.to_dict() for r in result.records])
    assert all(r["mismatches"] == 0 for r in rows)


@pytest.mark.slow
def test_quick_bench_produces_the_report_and_holds_parity(tmp_path):
    """The CI smoke test: the whole command on the default model (without the warm-up
    repetition, which would double its ~8 minutes here), on two of its four cases (an echo
    class and the open-ended one) and 24 tokens: every config, the oracle and the plots."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run([sys.executable, "-m", "specdec", "bench", "--quick", "--no-warmup",
                           "--workloads", "code_hints,open_story", "--max-tokens", "24",
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
