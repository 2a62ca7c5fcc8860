"""The ``pair`` sweep: peers' speculative runs at several k (``--peer-k 2,4``), each
lossless against the peer's own plain run, and the pair table built from a real run.

One tiny run (SmolLM2-135M drafting for itself, one workload, 8 tokens) serves every
test that needs records (the flags: test_cli.py; the pair profile: test_profiles.py).
"""

from __future__ import annotations

import json

import pytest

from specdec.bench.cli import build_plan
from specdec.bench.report import build_summary, pair_table, write_report
from specdec.bench.runner import run_plan

from .test_cli import _parse

MODEL = "smollm2-135m"
PEER = "mlx-lm: draft model smollm2-135m (num_draft_tokens=k)"


@pytest.fixture(scope="module")
def pair_run(smollm, tmp_path_factory):
    # a short prompt: a built-in workload's prefill and cost curve made this minutes here
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    path = tmp_path_factory.mktemp("pair") / "w.jsonl"
    path.write_text(json.dumps({"name": "tiny_rename", "class": "code_edit", "prompt": code
                                + "\nRename w to width and h to height. Reply with the code."}))
    args = _parse("--profile", "quick", "--model", MODEL, "--draft-model", MODEL,
                  "--workload", str(path),
                  # nogate: drafting for itself never pays, so the gate would (rightly) not draft
                  "--config", "model:k=2:nogate", "--config", "model:k=4:nogate",
                  "--config", "ngram,model:k=2:nogate",
                  "--peers", "mlx-lm", "--peer-k", "2,4", "--runs", "1", "--max-tokens", "8",
                  "--no-warmup")
    plan, _, _ = build_plan(args)
    return run_plan(plan, target=smollm)


@pytest.mark.slow
def test_peer_k_list_runs_the_peer_once_per_k_and_each_equals_its_plain(pair_run):
    peer = [r for r in pair_run.records if r.source == "mlx-lm"]
    # --no-warmup: one measured repetition and no warm-up, for ours and the peer alike
    assert {r.run for r in pair_run.records} == {1} and not pair_run.plan["warmup"]
    # the plain run once, then one speculative run per k, labelled with its k
    assert [(r.config, r.k) for r in peer] == [
        ("mlx-lm: plain", 2), (f"{PEER} k=2", 2), (f"{PEER} k=4", 4)]
    plain = peer[0].tokens
    assert len(plain) == 8
    assert all(r.tokens == plain for r in peer[1:])
    # and mlx-lm's plain decoding is ours, token for token
    ours = {tuple(r.tokens) for r in pair_run.records if r.source == "specdec"}
    assert ours == {tuple(plain)}
    assert pair_run.plan["peer_k"] == [2, 4] and not pair_run.peer_notes
    # the cost curve reaches the largest k of ours and of the peers
    assert max(pair_run.cost_curve) >= 5


@pytest.mark.slow
def test_pair_table_lines_up_ours_and_mlx_lm_per_k(pair_run, tmp_path):
    summary = build_summary(pair_run)
    rows = {r["config"]: r for r in pair_table(summary)}
    assert list(rows) == ["plain", "model k=2 nogate", "model k=4 nogate", "ngram,model k=2 nogate"]
    by = {(r["config"], r["source"]): r for r in summary["rows"]}
    for k in (2, 4):
        row, ours, peer = rows[f"model k={k} nogate"], by[(f"model k={k} nogate", "specdec")], by[(f"{PEER} k={k}", "mlx-lm")]
        assert row["k"] == k and row["ours"]["cases"] == 1
        assert row["ours"]["tok_s"] == pytest.approx(ours["tok_s"])
        assert row["ours"]["speedup"] == pytest.approx(ours["speedup"])
        assert row["ours"]["mal"] == pytest.approx(ours["mal"]) and ours["mal"] > 1.5  # self-draft
        assert row["peer"]["speedup"] == pytest.approx(peer["speedup"])
        assert row["oracle"] == pytest.approx(by[(f"oracle k={k}", "specdec")]["speedup"])
    assert rows["ngram,model k=2 nogate"]["peer"] is None and rows["ngram,model k=2 nogate"]["k"] == 2
    assert rows["plain"]["peer"]["tok_s"] == pytest.approx(by[("mlx-lm: plain", "mlx-lm")]["tok_s"])
    report = write_report(pair_run, tmp_path, plots=False).read_text()
    assert "1 measured runs per case (no warm-up)" in report
    section = report.split("## Pair table")[1].split("\n## ")[0]
    table = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert len(table) == 1 + 4  # the header, plain, k=2, k=4, the chain
    assert table[2].startswith("| model k=2 nogate | ")
    assert f"{by[('model k=2 nogate', 'specdec')]['speedup']:.2f}×" in table[2]
    assert f"{by[(f'{PEER} k=4', 'mlx-lm')]['speedup']:.2f}×" in table[3]
