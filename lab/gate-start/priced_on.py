"""Issue #46 (gate6): the default gate replayed (``default_replay.py``'s live loop, carried ``Learnt``) with its
verify cost curve taken from elsewhere: the quiet run's, one measured under load as a median (gate5's live run),
one measured under load by ``verify_cost_curve``'s floors (this session's bench). The clock is the quiet run's
curve in every case (a pipelined token ``--ratio`` of a one-token verify step), so the tokens per forward and
speeds differ only by what the gate priced on. Tokenizer only, seconds.

    PYTHONPATH=. python3 lab/gate-start/priced_on.py --results lab/specbench/quick/results.json \
        --curve loaded-median=JSON --curve loaded-floor=JSON [--ratio 1.0 --ratio 0.99]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-live-lag"))

import lag_replay as L  # noqa: E402
from default_replay import tokenizer  # noqa: E402
from specdec.policy.gate import CostGate  # noqa: E402
from specdec.policy.learnt import Learnt  # noqa: E402


def read_curve(path: str) -> dict[int, float]:
    raw = json.load(open(path))
    return {int(k): v for k, v in raw.get("cost_curve", raw).items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--curve", action="append", default=[], help="NAME=JSON: price the default on it")
    ap.add_argument("--ratio", type=float, action="append")
    args = ap.parse_args()
    tok = tokenizer(args.model)
    quiet = read_curve(args.results[0])
    line = L.robust_line(quiet, L.K + 1)
    by_q = defaultdict(list)
    for path in args.results:
        for q in L.turns(path, tok):
            by_q[q.name].append(q)
    pricing = {"quiet": quiet, **{n: read_curve(p) for n, p in (c.split("=", 1) for c in args.curve)}}
    for ratio in args.ratio or [1.0]:
        print(f"== a pipelined token = {ratio} one-token verify step; clock: the quiet curve")
        rows = [r for qs in by_q.values() for r in L.run(qs, tok, quiet, line, None, False, True, ratio)]
        L.summary("ungated", rows, line, ratio)
        for name, curve in pricing.items():
            memory = Learnt()
            rows = [r for qs in by_q.values()
                    for r in L.run(qs, tok, curve, line, CostGate, True, True, ratio, memory)]
            L.summary(f"default/{name}"[:14], rows, line, ratio)


if __name__ == "__main__":
    main()
