"""``specdec.bench.specbench``: the vendored questions (shipped as package data), the six
categories, the stratified subset, the per-category table (tokens per forward as
Spec-Bench counts them), the leaderboard as transcribed, the profile's flags; one tiny
real run of two questions through the whole report."""

from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from specdec.bench import analysis, specbench as sb
from specdec.bench.cli import build_plan

from .test_analysis import _rec
from .test_cli import _parse

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "specdec" / "bench" / "data" / "specbench"


def test_the_480_questions_fall_into_the_six_categories_with_mt_bench_two_turns():
    qs = sb.questions()
    assert len(qs) == 480 and len({q.question_id for q in qs}) == 480
    assert Counter(q.category for q in qs) == {c: 80 for c in sb.CATEGORIES}
    assert {len(q.turns) for q in qs if q.category == "mt_bench"} == {2}
    assert {len(q.turns) for q in qs if q.category != "mt_bench"} == {1}
    assert Counter(q.sub for q in qs if q.category == "mt_bench") == {s: 10 for s in sb.MT_BENCH}
    with pytest.raises(ValueError, match="unknown Spec-Bench category 'poetry'"):
        sb.category_of("poetry")


def test_the_data_ships_in_the_package_with_its_license_and_notice():
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    globs = re.findall(r'"([^"]+)"', section.split("[")[1].split("]")[0])
    shipped = {p.name for p in DATA.iterdir()
               if any(fnmatch.fnmatch(f"bench/data/specbench/{p.name}", g) for g in globs)}
    assert {"question.jsonl", "LICENSE", "README.md", "Leaderboard.md"} <= shipped
    assert "Apache License" in (DATA / "LICENSE").read_text()
    assert "hemingkx/Spec-Bench" in (DATA / "README.md").read_text()


def _questions(counts: list[int]) -> list[sb.Question]:
    cats = [c for c, n in zip(sb.CATEGORIES, counts) for _ in range(n)]
    return [sb.Question(i, c, c, ("q",)) for i, c in enumerate(cats)]


@given(st.lists(st.integers(0, 12), min_size=6, max_size=6), st.integers(1, 5))
def test_stratified_takes_n_per_category_from_the_middles_of_equal_slices(counts, n):
    qs = _questions(counts)
    picked = sb.stratified(qs, n)
    for cat, total in zip(sb.CATEGORIES, counts):
        mine = [q.question_id for q in qs if q.category == cat]
        got = [mine.index(q.question_id) for q in picked if q.category == cat]
        assert len(got) == min(n, total)
        m = len(got)  # distinct, in file order, the i-th within a question of the middle
        assert got == sorted(set(got))  # of the i-th of m equal slices of the category
        assert all(abs(g - (i + 0.5) * total / m) < 1 for i, g in enumerate(got))


def test_the_quick_subset_spreads_over_mt_bench_and_keeps_both_turns():
    ws = sb.workloads(2)
    assert Counter(w.cls for w in ws) == {c: 2 for c in sb.CATEGORIES}
    mt = [w for w in ws if w.cls == "mt_bench"]
    assert len({w.name.split("-")[0] for w in mt}) == 2 and all(len(w.turns) == 1 for w in mt)
    assert len({w.name for w in sb.workloads()}) == 480


def test_the_profile_quick_and_per_category_flags():
    plan, prof, name = build_plan(_parse("--profile", "specbench", "--quick"))
    assert name == "specbench" and len(plan.workloads) == 12 and not plan.oracle
    assert [c.label for c in plan.configs] == ["suffix k=8", "suffix k=8 nogate"]
    assert (plan.max_tokens, plan.runs) == (128, 3)
    assert len(build_plan(_parse("--profile", "specbench"))[0].workloads) == 480
    plan = build_plan(_parse("--profile", "specbench", "--per-category", "1", "--classes", "qa",
                             "--config", "ngram:k=4", "-m", "16"))[0]
    assert [w.cls for w in plan.workloads] == ["qa"] and plan.configs[0].label == "ngram k=4"
    assert plan.max_tokens == 16
    assert build_plan(_parse("--quick"))[2] == "quick"  # the built-in smoke test, as before
    with pytest.raises(ValueError, match="--per-category"):
        build_plan(_parse("--per-category", "2"))


def test_category_table_geomeans_speedups_and_pools_tokens_per_forward():
    rows = [dict(source="specdec", config="c", cls=cls, speedup=s, emitted=e, forwards=f)
            for cls, s, e, f in (("qa", 2.0, 30, 10), ("qa", 0.5, 10, 10), ("rag", 0.96, 12, 12))]
    rows += [dict(source="specdec", config="oracle k=8", cls="qa", speedup=9.0, emitted=9,
                  forwards=1)]
    t = sb.category_table(rows)
    assert set(t) == {"c"} and set(t["c"]) == {"qa", "rag", "overall"}
    assert t["c"]["qa"]["speedup"] == pytest.approx(1.0) and t["c"]["qa"]["tpf"] == 2.0
    assert (t["c"]["qa"]["slow"], t["c"]["rag"]["slow"], t["c"]["overall"]["slow"]) == (1, 1, 2)
    assert t["c"]["overall"]["tpf"] == pytest.approx(52 / 32)
    assert t["c"]["overall"]["speedup"] == pytest.approx(0.96 ** (1 / 3))
    assert t["c"]["overall"]["worst"] == 0.5


def test_summary_rows_count_tokens_per_forward_with_the_ending_eos():
    """A plain run of 3 tokens then EOS: 4 forwards, 4 emitted, 1.0 (not 0.75)."""
    recs = [_rec("plain", r, [1, 2, 3], verify_steps=4, emitted=4, fed_tokens=4) for r in (1, 2)]
    recs += [_rec("s", r, [1, 2, 3], verify_steps=2, emitted=4) for r in (1, 2)]
    rows = {r["config"]: r for r in analysis.summarize(recs, {1: 1.0})}
    assert rows["plain"]["tpf"] == 1.0 and rows["s"]["tpf"] == 2.0
    assert rows["plain"]["p_cache"] == 1.0
    old = analysis.summarize([_rec("plain", 1, [1, 2, 3])], {1: 1.0})  # before 'emitted'
    assert old[0]["tpf"] is None


def _leaderboard_a100_7b() -> dict[str, list[float]]:
    text = (DATA / "Leaderboard.md").read_text()
    block = text.split("### Vicuna-7B-v1.3")[1].split("###")[0]
    out = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and (m := re.match(r"\[(.+?)\]\(", cells[0])):
            out[m.group(1)] = [float(c.strip("*x")) for c in cells[1:]]
    return out


def test_the_leaderboard_is_transcribed_from_the_vendored_file():
    published = _leaderboard_a100_7b()
    names = {"EAGLE2": "EAGLE-2", "SAMD[EAGLE2]": "SAMD[EAGLE-2]"}
    ours = {r.method: r for r in sb.LEADERBOARD if r.model == "Vicuna-7B-v1.3"}
    assert {names.get(k, k) for k in published} == set(ours)
    for name, cells in published.items():
        r = ours[names.get(name, name)]
        assert [*r.speedups, r.mean_accepted, r.overall] == cells, name
    eagle3 = next(r for r in sb.LEADERBOARD if r.method == "EAGLE-3")
    assert eagle3.model == "Vicuna-13B-v1.3" and eagle3.mean_accepted == 5.71


TWO_QUESTIONS = ("--profile", "specbench", "--per-category", "1", "--classes", "mt_bench,qa",
                 "-m", "8", "--runs", "1", "--no-warmup")


@pytest.mark.slow
def test_two_questions_bench_with_parity_and_the_spec_bench_report(tmp_path):
    """One MT-bench question (two turns) and one QA question, 8 tokens a turn, one run:
    parity holds, plain counts exactly 1.00 token per forward, the report and plot; the
    run killed after its first question and resumed gives this report."""
    from specdec.bench.cli import cmd_bench

    whole = tmp_path / "whole"
    assert cmd_bench(_parse(*TWO_QUESTIONS, "--out", str(whole))) == 0
    data = json.loads((whole / "results.json").read_text())
    summary = data["summary"]
    assert all(r["mismatches"] == 0 for r in summary["parity"])
    assert {r["turn"] for r in data["records"] if r["cls"] == "mt_bench"} == {0, 1}
    table = summary["specbench"]
    assert table["plain"]["overall"]["tpf"] == 1.0
    assert all(c["tpf"] >= 1.0 for t in table.values() for c in t.values())
    report = (whole / "report.md").read_text()
    assert "## Spec-Bench" in report and "suffix k=8 (the default)" in report
    assert "| PLD | Vicuna-7B-v1.3 | 1.60×" in report
    assert (whole / "specbench.png").stat().st_size > 0
    _killed_and_resumed_gives_the_same_report(whole, tmp_path / "pieces")


def _timeless(report: str) -> str:
    """The report below its header with every number masked: timings move between runs, and
    with them the gate's choices (a config that drafted nothing has no acceptance, '–')."""
    return re.sub(r"[0-9][0-9.,]*|–", "#", report.split("## Headline")[1])


def _killed_and_resumed_gives_the_same_report(whole: Path, out: Path) -> None:
    """A kill after the first question leaves the journal's header and that question's line:
    ``--max-questions 0`` reports the part done, ``--resume`` measures the second question."""
    from specdec.bench.cli import cmd_bench
    from specdec.bench.journal import JOURNAL

    lines = (whole / JOURNAL).read_text().splitlines(keepends=True)
    assert len(lines) == 3  # the header, then one line per question as it finished
    out.mkdir()
    (out / JOURNAL).write_text("".join(lines[:2]))
    with pytest.raises(ValueError, match=r"plan\.max_tokens was 8, now 16"):
        cmd_bench(_parse(*TWO_QUESTIONS, "-m", "16", "--resume", str(out)))
    assert cmd_bench(_parse(*TWO_QUESTIONS, "--resume", str(out), "--max-questions", "0")) == 0
    stopped = json.loads((out / "results.json").read_text())
    assert stopped["unfinished"] == 1 and "**Partial run**: 1 of" in (out / "report.md").read_text()
    assert {r["cls"] for r in stopped["records"]} == {"mt_bench"}
    assert cmd_bench(_parse(*TWO_QUESTIONS, "--resume", str(out))) == 0
    resumed, uninterrupted = (json.loads((d / "results.json").read_text()) for d in (out, whole))
    assert resumed["unfinished"] == 0 and (out / JOURNAL).read_text().splitlines()[:2] == \
        [line.rstrip("\n") for line in lines[:2]]
    assert resumed["cost_curve"] == uninterrupted["cost_curve"]  # the gate priced both pieces alike

    def key(r: dict) -> tuple:  # what no clock moves: the tokens, and ungated configs' steps
        steps = () if r["config"].endswith("k=8") else (r["verify_steps"], r["accepted"], r["steps"])
        return (r["workload"], r["config"], r["run"], r["turn"], r["tokens"], r["emitted"], steps)

    assert [r for r in resumed["records"] if r["cls"] == "mt_bench"] == \
        [r for r in uninterrupted["records"] if r["cls"] == "mt_bench"]  # replayed, not re-run
    assert sorted(map(key, resumed["records"])) == sorted(map(key, uninterrupted["records"]))
    assert _timeless((out / "report.md").read_text()) == _timeless((whole / "report.md").read_text())


def test_the_report_and_plot_from_hand_written_records(tmp_path):
    """No model: two questions, plain and the default; the Spec-Bench section names the
    default, carries tokens per forward and the leaderboard, and its plot is drawn."""
    from specdec.bench.report import write_report
    from specdec.bench.runner import BenchResult, RunRecord

    recs = []
    for wl, cls in (("qa-1", "qa"), ("rag-2", "rag")):
        recs += [_rec("plain", r, [1] * 6, workload=wl, cls=cls, verify_steps=7, emitted=7,
                      fed_tokens=7) for r in (1, 2, 3)]
        recs += [_rec("suffix k=8", r, [1] * 6, workload=wl, cls=cls, decode_s=0.8, drafted=4,
                      accepted=3, verify_steps=4, emitted=7, fed_tokens=8) for r in (1, 2, 3)]
    plan = dict(model="m", max_tokens=8, runs=3, warmup=False, workloads=["qa-1", "rag-2"])
    meta = dict(date="d", machine="x", cpus=2, device="cpu", versions={}, argv="specdec bench")
    result = BenchResult(plan, meta, {1: 1.0, 2: 1.1}, [RunRecord(**r) for r in recs], {})
    report = write_report(result, tmp_path).read_text()
    section = report.split("## Spec-Bench")[1].split("## ")[0]
    assert "| suffix k=8 (the default) | 1.25× · 1.75 | 1.25× · 1.75 | 1.25× · 1.75 | 0 (1.25×) |" \
        in section
    assert "| plain | 1.00× · 1.00 |" in section and "| EAGLE-3 | Vicuna-13B-v1.3 | 3.48×" in section
    assert (tmp_path / "specbench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
