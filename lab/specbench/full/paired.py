"""Default against its own drafter ungated, question by question, on a Spec-Bench journal.

Reads a bench journal (`records.jsonl`, or this directory's `records.jsonl.gz`; whole or partial) and prints, per category: questions,
the geomean speedup of each config over plain, the geomean of default / ungated with a 95 %
bootstrap interval over questions (seeded), how many questions each config wins, and the
questions below 0.97x plain. A question's speed is the bench's: generated tokens over decode
seconds, every turn summed (`specdec.bench.analysis._tok_s`), one run each here.

    python3 lab/specbench/full/paired.py lab/specbench/full/records.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import math
import random
import sys
from collections import defaultdict

DEFAULT, UNGATED = "suffix k=8", "suffix k=8 nogate"


def speeds(path: str) -> dict[str, dict[str, tuple[str, float, float]]]:
    """workload -> config -> (category, tok/s, tokens per forward)."""
    out: dict[str, dict[str, tuple[str, float, float]]] = defaultdict(dict)
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    turns: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for case in lines[1:]:  # the first line is the journal's header
        for r in case["records"]:
            if r["run"] >= 1:
                turns[(r["workload"], r["config"])].append(r)
    for (wl, config), rs in turns.items():
        dec = sum(r["decode_s"] for r in rs)
        tps = sum(r["generated"] for r in rs) / dec
        tpf = sum(r["emitted"] for r in rs) / sum(r["verify_steps"] for r in rs)
        out[wl][config] = (rs[0]["cls"], tps, tpf)
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def interval(ratios: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of the geomean over questions."""
    means = sorted(geomean([rng.choice(ratios) for _ in ratios]) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def main(path: str) -> None:
    data = speeds(path)
    by_cls: dict[str, list[str]] = defaultdict(list)
    for wl, cfg in data.items():
        if {"plain", DEFAULT, UNGATED} <= cfg.keys():
            by_cls[cfg["plain"][0]].append(wl)
    rng = random.Random(0)
    print("category        n  default  ungated  default/ungated (95% CI)  wins d:u  tpf d / u   lost d / u")
    for cls, wls in sorted(by_cls.items()) + [("all", [w for ws in by_cls.values() for w in ws])]:
        d = [data[w][DEFAULT][1] / data[w]["plain"][1] for w in wls]
        u = [data[w][UNGATED][1] / data[w]["plain"][1] for w in wls]
        du = [a / b for a, b in zip(d, u)]
        lo, hi = interval(du, rng)
        tpf_d = geomean([data[w][DEFAULT][2] for w in wls])
        tpf_u = geomean([data[w][UNGATED][2] for w in wls])
        wins = sum(x > 1 for x in du)
        lost_d = [w for w, x in zip(wls, d) if x < 0.97]
        lost_u = [w for w, x in zip(wls, u) if x < 0.97]
        print(f"{cls:14s} {len(wls):3d}  {geomean(d):6.3f}x {geomean(u):7.3f}x  {geomean(du):6.3f} "
              f"({lo:.3f}-{hi:.3f})        {wins:3d}:{len(wls) - wins:<3d}  {tpf_d:.2f} / {tpf_u:.2f}"
              f"   {len(lost_d)} / {len(lost_u)}")
    worst = sorted((data[w][DEFAULT][1] / data[w]["plain"][1], w) for ws in by_cls.values() for w in ws)[:5]
    print("default's lowest:", ", ".join(f"{w} {x:.2f}x" for x, w in worst))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lab/specbench/full/records.jsonl.gz")
