"""Default against its own drafter ungated, question by question, on a Spec-Bench journal.

Reads a bench journal (`records.jsonl`, or this directory's `records.jsonl.gz`; whole or partial) and
prints, per category: questions, the geomean speedup of each config over plain, the geomean of
default / ungated with a 95 % bootstrap interval over questions (seeded), how many questions each
config wins, the geomean tokens per forward, and the questions below 0.97x plain. Each question's
speedup and tokens per forward are the bench's own rows (`specdec.bench.analysis.summarize`).

    python3 lab/specbench/full/paired.py lab/specbench/full/records.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections import defaultdict

from specdec.bench.analysis import geomean, summarize

DEFAULT, UNGATED = "suffix k=8", "suffix k=8 nogate"


def speeds(path: str) -> dict[str, dict[str, dict]]:
    """workload -> config -> the bench's summary row (``speedup``, ``tpf``, ``cls``, ...)."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, cases = lines[0], lines[1:]
    records = [r for case in cases for r in case["records"]]
    cost = {int(k): v for k, v in header["cost_curve"].items()}
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for row in summarize(records, cost):
        out[row["workload"]][row["config"]] = row
    return out


def interval(ratios: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of the geomean over questions."""
    means = sorted(geomean([rng.choice(ratios) for _ in ratios]) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def main(path: str) -> None:
    data = speeds(path)
    by_cls: dict[str, list[str]] = defaultdict(list)
    for wl, cfg in data.items():
        if {"plain", DEFAULT, UNGATED} <= cfg.keys():
            by_cls[cfg["plain"]["cls"]].append(wl)
    rng = random.Random(0)
    print("category        n  default  ungated  default/ungated (95% CI)  wins d:u  tpf d / u   lost d / u")
    for cls, wls in sorted(by_cls.items()) + [("all", [w for ws in by_cls.values() for w in ws])]:
        d = [data[w][DEFAULT]["speedup"] for w in wls]
        u = [data[w][UNGATED]["speedup"] for w in wls]
        du = [a / b for a, b in zip(d, u)]
        lo, hi = interval(du, rng)
        tpf_d = geomean([data[w][DEFAULT]["tpf"] for w in wls])
        tpf_u = geomean([data[w][UNGATED]["tpf"] for w in wls])
        wins = sum(x > 1 for x in du)
        lost_d = [w for w, x in zip(wls, d) if x < 0.97]
        lost_u = [w for w, x in zip(wls, u) if x < 0.97]
        print(f"{cls:14s} {len(wls):3d}  {geomean(d):6.3f}x {geomean(u):7.3f}x  {geomean(du):6.3f} "
              f"({lo:.3f}-{hi:.3f})        {wins:3d}:{len(wls) - wins:<3d}  {tpf_d:.2f} / {tpf_u:.2f}"
              f"   {len(lost_d)} / {len(lost_u)}")
    worst = sorted((data[w][DEFAULT]["speedup"], w) for ws in by_cls.values() for w in ws)[:5]
    print("default's lowest:", ", ".join(f"{w} {x:.2f}x" for x, w in worst))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lab/specbench/full/records.jsonl.gz")
