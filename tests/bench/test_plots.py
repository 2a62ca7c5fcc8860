"""``specdec.bench.plots``: ``make_all`` writes one PNG per figure the summary has data for
(the peers' only when peers ran), from records written by hand."""

from __future__ import annotations

from specdec.bench import analysis
from specdec.bench.plots import make_all
from specdec.bench.runner import BenchResult

from .test_analysis import _rec

COST = {1: 1.0, 2: 1.1, 3: 1.2}


def summary_of(records):
    rows = analysis.summarize(records, COST)
    return dict(rows=rows, classes=analysis.class_summary(rows), per_position=analysis.per_position(records))


def result():
    return BenchResult(plan={}, meta={}, cost_curve=COST, records=[], peer_notes={})


def test_every_figure_with_data_is_written_as_a_png(tmp_path):
    recs = [_rec("plain", r, [1] * 4) for r in (1, 2)]
    recs += [_rec("ngram k=2", r, [1] * 4, decode_s=0.5, drafted_by_position=[2, 1],
                  accepted_by_position=[1, 1]) for r in (1, 2)]
    recs += [_rec(c, r, [1] * 4, source="peer", decode_s=d) for r in (1, 2)
             for c, d in (("peer: plain", 1.0), ("peer: pld k=2", 0.8))]
    made = make_all(result(), summary_of(recs), tmp_path)
    names = ["speedup_by_class.png", "per_position.png", "cost_curve.png", "peers.png"]
    assert made == [str(tmp_path / n) for n in names]
    assert all((tmp_path / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)


def test_without_peers_or_drafts_only_the_cost_curve_is_drawn(tmp_path):
    made = make_all(result(), summary_of([]), tmp_path)
    assert made == [str(tmp_path / "cost_curve.png")]
