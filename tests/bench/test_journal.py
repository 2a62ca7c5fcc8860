"""``specdec.bench.journal``: a run's records.jsonl refuses to resume a different run (naming
what differs) or to be overwritten, drops a line torn by a kill, and replays its cases; the
Spec-Bench selectors that split a run (no model: the stopped-and-resumed real run is in
tests/bench/test_specbench.py)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from specdec.bench.cli import build_plan
from specdec.bench.journal import JOURNAL, CaseLine, Journal
from specdec.bench.runner import BenchResult, RunRecord, _replay, plan_identity

from .test_cli import _parse

BASE = ("--profile", "specbench", "--questions", "81,161", "-m", "8", "--runs", "1")


def identity(*flags: str, code: str = "abc") -> dict:
    return plan_identity(build_plan(_parse(*BASE, *flags))[0], code)


def line(case: str, tokens: list[int]) -> CaseLine:
    rec = RunRecord("m", case, "qa", None, 3, "plain", "specdec", 1, 0, 1, tokens, 0.1, 0.2,
                    len(tokens), steps=[(1, 0)] * len(tokens))
    return CaseLine(f"{case}|None", [asdict(rec)], [], {f"{case}|None|0": "hi"}, {})


def started(out) -> Journal:
    j = Journal.open(out, identity(), resume=False)
    j.start({"date": "d"}, {1: 0.01, 2: 0.011}, {"suffix k=8": {"fixed": 0.0, "per_token": 0.0}})
    return j


def test_a_resume_of_a_different_run_is_refused_naming_what_differs(tmp_path):
    started(tmp_path)
    with pytest.raises(ValueError, match=r"plan\.max_tokens was 8, now 16.*same flags and checkout"):
        Journal.open(tmp_path, identity("-m", "16"), resume=True)
    with pytest.raises(ValueError, match=r"plan\.workloads was \[.*\], now .*; workloads was"):
        Journal.open(tmp_path, identity("--questions", "81"), resume=True)
    with pytest.raises(ValueError, match="code was \"abc\", now \"def\""):
        Journal.open(tmp_path, identity(code="def"), resume=True)
    j = Journal.open(tmp_path, identity(), resume=True)  # the same run resumes
    assert j.header is not None and j.header.cost_curve == {1: 0.01, 2: 0.011} and j.done == {}


def test_a_new_run_over_a_journal_and_a_resume_of_nothing_are_refused(tmp_path):
    with pytest.raises(ValueError, match="holds no bench run to resume"):
        Journal.open(tmp_path, identity(), resume=True)
    started(tmp_path)
    with pytest.raises(ValueError, match=f"already holds a bench run .*--resume {tmp_path}"):
        Journal.open(tmp_path, identity(), resume=False)
    with pytest.raises(ValueError, match="--max-questions must be >= 0"):
        Journal.open(tmp_path, identity(), resume=True, max_cases=-1)


def test_a_line_torn_by_a_kill_is_dropped_and_the_cases_replay(tmp_path):
    j = started(tmp_path)
    j.append(line("qa-161", [4, 5]))
    with (tmp_path / JOURNAL).open("a") as f:
        f.write(json.dumps({"case": "writing-81|None", "records": []})[:30])  # killed mid-write
    j = Journal.open(tmp_path, identity(), resume=True, max_cases=1)
    assert list(j.done) == ["qa-161|None"] and not j.stops(0) and j.stops(1)
    j.append(line("writing-81", [6]))
    again = Journal.open(tmp_path, identity(), resume=True)
    assert list(again.done) == ["qa-161|None", "writing-81|None"]
    result = BenchResult({}, {}, {}, [], {})
    _replay(again.done["qa-161|None"], result)
    assert result.records[0].tokens == [4, 5] and result.records[0].steps == [(1, 0), (1, 0)]
    assert result.cases == {"qa-161|None|0": "hi"}


def test_questions_and_categories_select_what_a_piece_of_the_run_measures():
    plan = build_plan(_parse("--profile", "specbench", "--questions", "81-82,161"))[0]
    assert [w.name for w in plan.workloads] == ["writing-81", "writing-82", "translation-161"]
    plan = build_plan(_parse("--profile", "specbench", "--categories", "qa,rag"))[0]
    assert len(plan.workloads) == 160 and {w.cls for w in plan.workloads} == {"qa", "rag"}
    with pytest.raises(ValueError, match=r"no Spec-Bench question has the id\(s\) \[999\]"):
        build_plan(_parse("--profile", "specbench", "--questions", "81,999"))
    with pytest.raises(ValueError, match="use it with --profile specbench"):
        build_plan(_parse("--questions", "3"))
    with pytest.raises(SystemExit):
        _parse("--questions", "a-b")
