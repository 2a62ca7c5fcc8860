"""Issue #46's bar read from a ``specdec bench --profile specbench`` results.json: per category the
default (suffix k=8, gated) against suffix k=8 ungated (geomean speedup over the category's
questions, tokens per forward over all of them), questions below 0.97x plain, tokens per forward
below 1.0, and one question's live step string per config (``D{k}a{accepted}``; ``p``: a
one-token step, pipelined or not).

    python3 lab/gate-start/bar.py DIR/results.json [--show translation-181]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

DEFAULT, UNGATED = "suffix k=8", "suffix k=8 nogate"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--show", action="append", default=[])
    args = ap.parse_args()
    d = json.load(open(args.results))
    rows = [r for r in d["summary"]["rows"] if r["config"] in (DEFAULT, UNGATED)]
    cats: dict = defaultdict(lambda: defaultdict(lambda: [[], 0, 0]))
    for r in rows:
        c = cats[r["cls"]][r["config"]]
        c[0].append(math.log(r["speedup"]))
        c[1] += r["emitted"]
        c[2] += r["forwards"]
    ok = True
    print(f"{'category':16s} {'default':>14s} {'ungated':>14s}")
    for cls, by in cats.items():
        (g, e, f), (ug, ue, uf) = by[DEFAULT], by[UNGATED]
        x, ux = math.exp(sum(g) / len(g)), math.exp(sum(ug) / len(ug))
        flag = "" if x >= ux else "  < ungated"
        ok &= x >= ux
        print(f"{cls:16s} {x:6.2f}x {e / f:5.2f}  {ux:6.2f}x {ue / uf:5.2f}{flag}")
    for r in rows:
        if r["speedup"] < 0.97 or r["tpf"] < 1.0:
            ok = False
            print(f"  {r['config']} {r['workload']}: {r['speedup']:.2f}x, {r['tpf']:.2f} tokens per forward")
    print("bar met" if ok else "bar NOT met", f"({d['plan']['runs']} runs: median)")
    for rec in d["records"]:
        if rec["workload"] in args.show and rec["config"] in (DEFAULT, UNGATED) and rec["run"] == 1:
            steps = json.loads(rec["steps"]) if isinstance(rec["steps"], str) else rec["steps"]
            text = " ".join(f"D{b - 1}a{a}" if b > 1 else "p" for b, a in steps)
            print(f"  {rec['workload']} t{rec['turn']} {rec['config']}: {text}")


if __name__ == "__main__":
    main()
