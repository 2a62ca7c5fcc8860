"""Issue #46 (gate6): tokens per forward and speedup per question and category, default against ungated, from a
bench run's journal (``OUT/records.jsonl``: the finished cases of a run still going, or stopped), with the curve
it priced on. Lab only.

    PYTHONPATH=. python3 lab/gate-start/partial_tpf.py /tmp/g6-live/records.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from specdec.bench import analysis


def main(path: str) -> None:
    lines = [json.loads(x) for x in open(path)]
    curve = {int(k): v for k, v in lines[0]["cost_curve"].items()}
    print("priced on: " + " ".join(f"{L}:{c / curve[1]:.2f}" for L, c in sorted(curve.items())),
          f"(cost(1) {curve[1]:.3f} s)")
    records = [r for x in lines[1:] for r in x["records"]]
    rows = analysis.summarize(records, curve)
    by = defaultdict(dict)
    for r in rows:
        by[(r["cls"], r["workload"])][r["config"]] = r
    cats = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    print(f"{'question':22s} {'config':20s} tpf   speedup")
    for (cls, wl), cfgs in sorted(by.items()):
        for name, r in sorted(cfgs.items()):
            if r["config"] == "plain":
                continue
            cats[cls][name][0] += r["emitted"] or 0
            cats[cls][name][1] += r["forwards"] or 0
            sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
            print(f"{wl:22s} {name:20s} {r['tpf']:.3f} {sp}")
    print("per category, tokens per forward: " + "; ".join(
        f"{c}: " + ", ".join(f"{n} {e / f:.3f}" for n, (e, f) in sorted(v.items()) if f)
        for c, v in sorted(cats.items())))


if __name__ == "__main__":
    main(sys.argv[1])
