"""Issue #46: how often does one `--quick` run pass the issue's live bars when the default is what a run read?

The bars (per model): no question below 0.97x plain (each config's median of 3 runs over plain's median
of 3), and every category's geomean speedup at least its ungated drafter's. Each question's truth is a
run's own reading (``results.json``'s medians); each of a config's 3 runs draws its log tok/s around it
with the per-run spread ``SD`` (measured from ``records.jsonl`` files with 3 runs a config: pooled, 2
degrees of freedom a question and config), the default's and ungated's draws of one run correlated as
measured (``RHO``: they run back to back), plain's independent. Two truths for the gate against ungated: as read, and level
(both at their mean, what the full profile's paired interval says: 1.001, 0.994-1.008). Seeded draws.

    PYTHONPATH=. python3 lab/specbench/engine-clock/quick_odds.py --sd-from RECORDS.jsonl[.gz] ... \
        RESULTS.json ...
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import statistics
from collections import defaultdict

DEFAULT, UNGATED = "suffix k=8", "suffix k=8 nogate"
FLOOR = 0.97


def per_run_noise(paths: list[str]) -> tuple[float, float]:
    """Pooled per-run sd of log decode tok/s around each (question, config)'s mean over its runs, and
    the correlation of the default's and ungated's deviations in the same run."""
    dev: list[float] = []
    pairs: list[tuple[float, float]] = []
    for path in paths:
        speeds: dict = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
        with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
            for line in f:
                d = json.loads(line)
                for r in d.get("records", [d] if "run" in d else []):
                    if r["run"] >= 1 and r["source"] == "specdec" and not r["config"].startswith("oracle"):
                        s = speeds[(r["workload"], r["config"])][r["run"]]
                        s[0] += r["generated"]
                        s[1] += r["decode_s"]
        devs = {}
        for (q, c), runs in speeds.items():
            if len(runs) == 3:
                logs = {i: math.log(g / t) for i, (g, t) in runs.items()}
                m = statistics.mean(logs.values())
                devs.update({(q, c, i): x - m for i, x in logs.items()})
        dev += list(devs.values())
        pairs += [(x, devs[(q, UNGATED, i)]) for (q, c, i), x in devs.items()
                  if c == DEFAULT and (q, UNGATED, i) in devs]
    rho = statistics.correlation([a for a, _ in pairs], [b for _, b in pairs])
    return math.sqrt(sum(x * x for x in dev) / (len(dev) * 2 / 3)), rho


def odds(path: str, sd: float, rho: float, level: bool, draws: int = 20000, seed: int = 0) -> dict:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        summary = json.load(f)["summary"]
    rows = [r for r in summary["rows"] if r["config"] in (DEFAULT, UNGATED)]
    truth = {(r["workload"], r["config"]): math.log(r["speedup"]) for r in rows}
    cls = {r["workload"]: r["cls"] for r in rows}
    if level:
        for q in cls:
            mean = (truth[(q, DEFAULT)] + truth[(q, UNGATED)]) / 2
            truth[(q, DEFAULT)] = truth[(q, UNGATED)] = mean
    rng = random.Random(seed)

    def median3(mu: float, shared: list[float] | None = None) -> float:
        if shared is None:
            return sorted(rng.gauss(mu, sd) for _ in range(3))[1]
        return sorted(mu + sd * (math.sqrt(rho) * z + math.sqrt(1 - rho) * rng.gauss(0, 1))
                      for z in shared)[1]

    floor_ok = category_ok = both = 0
    for _ in range(draws):
        read = {}
        for q in cls:
            plain, shared = median3(0.0), [rng.gauss(0, 1) for _ in range(3)]
            for c in (DEFAULT, UNGATED):
                read[(q, c)] = median3(truth[(q, c)], shared) - plain
        no_low = all(read[(q, DEFAULT)] >= math.log(FLOOR) for q in cls)
        by_cls: dict = defaultdict(lambda: [0.0, 0.0])
        for q, c in cls.items():
            by_cls[c][0] += read[(q, DEFAULT)]
            by_cls[c][1] += read[(q, UNGATED)]
        ahead = all(g >= u for g, u in by_cls.values())
        floor_ok += no_low
        category_ok += ahead
        both += no_low and ahead
    return {"no question below 0.97x": floor_ok / draws, "every category ahead": category_ok / draws,
            "both": both / draws}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--sd-from", action="append", default=[])
    args = ap.parse_args()
    sd, rho = per_run_noise(args.sd_from)
    print(f"per-run sd of log tok/s: {sd:.4f}; default ~ ungated in one run: correlation {rho:.2f}")
    # a median of 3 normals has variance 0.4487 sd^2; a ratio of two independent medians twice that
    ratio_sd = sd * math.sqrt(2 * 0.4487)
    z = statistics.NormalDist().inv_cdf(0.95 ** (1 / 12))  # 12 questions all clear in 95 % of runs
    print(f"a question's read ratio: sd {ratio_sd:.4f} in log; for 12 questions to clear {FLOOR}x in 95 % "
          f"of runs each must truly be >= {FLOOR * math.exp(z * ratio_sd):.3f}x")
    for path in args.results:
        for level in (False, True):
            got = odds(path, sd, max(rho, 0.0), level)
            print(f"{path}, gate against ungated {'level' if level else 'as read'}: "
                  + ", ".join(f"{k} {v:.0%}" for k, v in got.items()))


if __name__ == "__main__":
    main()
