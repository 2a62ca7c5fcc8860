"""Workload files without names (the shape most chat datasets have) and their defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import real_model, requires_model

from specdec.bench.workloads import Workload, load_workloads, parse_workload, write_workloads

CHAT = [{"role": "user", "content": "Say hello.\n\nReply in one word."}]


def _write(path: Path, objs: list[dict | None]) -> Path:
    """JSONL with one line per object; None writes a blank line (it still counts)."""
    path.write_text("".join((json.dumps(o) if o is not None else "") + "\n" for o in objs))
    return path


def test_lines_without_names_are_named_class_dash_line(tmp_path):
    path = _write(tmp_path / "data.jsonl", [
        {"class": "chat", "messages": CHAT, "max_tokens": 16},
        None,
        {"class": "chat", "prompt": "Count to three."},
        {"name": "mine", "class": "code", "prompt": "x = 1"},
        {"class": "code", "messages": CHAT},
    ])
    ws = load_workloads(path)
    assert [w.name for w in ws] == ["chat-1", "chat-3", "mine", "code-5"]
    assert ws[0] == Workload("chat-1", "chat", messages=tuple(CHAT), max_tokens=16)
    assert ws[1].prompt == "Count to three." and ws[1].max_tokens is None


def test_defaulted_names_round_trip_as_explicit_names(tmp_path):
    ws = load_workloads(_write(tmp_path / "a.jsonl", [{"class": "c", "prompt": "p"}] * 3))
    assert [w.name for w in ws] == ["c-1", "c-2", "c-3"]
    write_workloads(ws, tmp_path / "b.jsonl")
    assert all("name" in json.loads(line) for line in (tmp_path / "b.jsonl").open())
    assert load_workloads(tmp_path / "b.jsonl") == ws


def test_duplicate_explicit_names_are_still_refused(tmp_path):
    line = {"name": "same", "class": "c", "prompt": "x"}
    path = _write(tmp_path / "dup.jsonl", [{"class": "c", "prompt": "y"}, line, line])
    with pytest.raises(ValueError, match=r"unique.*\['same'\]"):
        load_workloads(path)


def test_an_explicit_name_equal_to_a_default_is_a_duplicate(tmp_path):
    path = _write(tmp_path / "clash.jsonl", [
        {"name": "c-2", "class": "c", "prompt": "x"},
        {"class": "c", "prompt": "y"},  # line 2: defaults to c-2
    ])
    with pytest.raises(ValueError, match=r"unique.*<class>-<line>.*\['c-2'\]"):
        load_workloads(path)


@pytest.mark.parametrize("obj, needle", [
    ({"name": "", "class": "c", "prompt": "x"}, "'name' must be a non-empty string"),
    ({"name": 3, "class": "c", "prompt": "x"}, "'name' must be a non-empty string"),
    ({"prompt": "x"}, "'class' must be a non-empty string"),
    ({"class": "c"}, "exactly one of"),
])
def test_bad_lines_without_names_name_the_line_and_field(tmp_path, obj, needle):
    path = _write(tmp_path / "bad.jsonl", [{"class": "c", "prompt": "fine"}, obj])
    with pytest.raises(ValueError) as e:
        load_workloads(path)
    assert f"{path}:2: " in str(e.value) and needle in str(e.value)


def test_parse_workload_outside_a_file_still_needs_a_name():
    with pytest.raises(ValueError, match="'name' is required"):
        parse_workload({"class": "c", "prompt": "x"})
    assert parse_workload({"class": "c", "prompt": "x"}, line=7).name == "c-7"


@pytest.mark.slow
def test_bench_runs_an_unnamed_workload_file(tmp_path, capsys):
    """The whole command on a dataset-shaped file: names defaulted, parity held. ``cli.main``
    (what ``python -m specdec`` exits with) in this process, without a process's ~3.5 CPU s
    of imports: test_runner's quick bench runs the real process."""
    from specdec.cli import main

    data = _write(tmp_path / "data.jsonl", [
        {"class": "chat", "messages": [{"role": "user", "content":
            "def add(a, b):\n    return a + b\n\nRepeat this code exactly."}], "max_tokens": 8},
    ])
    out = tmp_path / "out"
    code = main(["bench", "--quick", "--workload", str(data), "--config", "ngram:k=4", "--runs", "1",
                 "--max-tokens", "8", "--peers", "none", "--no-plots", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out[-2000:] + printed.err[-3000:]
    assert "parity: 0 mismatches" in printed.out
    results = json.loads((out / "results.json").read_text())
    assert results["plan"]["workloads"] == ["chat-1"]
    assert {r["workload"] for r in results["records"]} == {"chat-1"}
    assert (out / "report.md").stat().st_size > 0


def test_a_structured_workload_round_trips_and_a_bad_format_names_its_line(tmp_path):
    from specdec.bench.workloads import RECORD_FORMAT, builtin_workloads

    w = next(w for w in builtin_workloads() if w.cls == "structured")
    assert w.response_format == RECORD_FORMAT
    path = tmp_path / "w.jsonl"
    write_workloads([w], path)
    assert load_workloads(path) == [w]
    path.write_text(json.dumps({"class": "structured", "prompt": "x",
                                "response_format": {"type": "xml"}}) + "\n")
    with pytest.raises(ValueError, match="w.jsonl:1: 'response_format'"):
        load_workloads(path)


def _grammar_run(target, name, ws, max_tokens=48):
    from specdec.bench.configs import parse_config
    from specdec.bench.runner import BenchPlan, run_plan

    # nogate: drafts every step (the gate's timed choices would make "accepted" load-dependent)
    plan = BenchPlan(name, ws, [parse_config("grammar,suffix:k=4:nogate")], runs=1,
                     max_tokens=max_tokens, peers=(), oracle=False, warmup=False)
    result = run_plan(plan, target=target)
    assert not result.diagnoses
    return result


def _plain_and_spec(result, workload):
    """The plain record and the grammar,suffix record of ``workload``; they are equal and
    the speculative one accepted drafts."""
    plain, spec = ([r for r in result.records if r.config == c and r.workload == workload]
                   for c in ("plain", "grammar,suffix k=4 nogate"))
    assert len(plain) == len(spec) == 1, workload
    assert plain[0].tokens == spec[0].tokens and spec[0].accepted > 0, workload
    return plain[0]


@pytest.mark.slow
def test_the_bench_runs_a_structured_case_with_the_grammar_drafter(smollm):
    """The structured case answers under the schema and equals plain constrained decoding;
    the grammar drafter's forced tokens are accepted. SmolLM2's chat template does not
    render tools, so its agent transcript is skipped with a note that says so."""
    from specdec.bench.workloads import builtin_workloads

    ws = [w for w in builtin_workloads() if w.cls == "structured" or w.name == "agent_update_record"]
    # 24 tokens hold the record's forced keys and braces (48 decoded each run twice as long)
    result = _grammar_run(smollm, "smollm2-135m", ws, 24)
    for w in ws:
        if w.tools:
            assert "does not render tools" in result.peer_notes[w.name]
            assert not [r for r in result.records if r.workload == w.name]
        else:
            _plain_and_spec(result, w.name)


@pytest.mark.slow
@requires_model("qwen2.5-coder-0.5b")
def test_the_bench_runs_an_agent_transcript_whose_forced_call_quotes_the_tool_result():
    """An agent transcript on a model whose template renders tools: the forced tool call
    (its name, then its arguments) equals plain constrained decoding, with drafts accepted."""
    from specdec.bench.workloads import builtin_workloads

    target = real_model("qwen2.5-coder-0.5b")
    ws = [w for w in builtin_workloads() if w.name == "agent_update_record"]
    # 12 tokens hold the forced call's name and the start of its arguments (all forced: the
    # grammar's drafts are accepted; 24 decoded twice as many for the same checks)
    plain = _plain_and_spec(_grammar_run(target, "qwen2.5-coder-0.5b", ws, 12), ws[0].name)
    assert target[1].decode(plain.tokens).startswith('{"name": "update_record", "arguments": {')
