"""Issue #46: why the live loop's gate accepts fewer tokens than its replay (q281: 27 against 35).

Replays the real ``CostGate`` over recorded Spec-Bench answers (``lab/gate-acceptance/calibration.py``'s
turns, the replay's synthetic clock) in two loops: ``replay`` (the gate drafts at the token where
``watch`` resumed it, as ``gate_specbench_replay.py`` does) and ``live`` (as ``decode.loop``'s
pipelined plain stretch does: the forward of the next token is queued before ``watch`` reads
this one, so a resume emits one more plain token and ``watch`` prices again before drafting).
No timing, deterministic.

    PYTHONPATH=. python3 lab/gate-live-lag/lag_replay.py --results lab/specbench/per-category-1-offers/results.json \
        --results lab/specbench/quick/results.json [--gate DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-trace"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-acceptance"))

import specdec  # noqa: E402
from specdec.policy.adaptive import robust_line  # noqa: E402
from gate_specbench_replay import K, gate_class  # noqa: E402
from calibration import agreed, turn_policy, turns  # noqa: E402


def run(qturns, tok, curve, line, gate_cls, lag: bool, faithful: bool = True, ratio: float = 1.0,
        memory=None) -> list[dict]:
    rows, pol = [], None
    for q in qturns:
        pol = turn_policy(q, pol, tok, curve, gate_cls, memory)  # memory: carried across questions
        ctx, t, secs, fw, acc, steps = list(q.prompt), 0, 0.0, 0, 0, []
        while t < len(q.out):
            if gate_cls is not None and pol.paused:
                # a plain stretch; live, the next token's forward is already queued when watch
                # resumes, so that token too is plain (and watched) before the first draft
                while t < len(q.out):
                    ctx.append(q.out[t])
                    t, secs, fw = t + 1, secs + line[1] * ratio, fw + 1
                    pol.step_time(0, line[1] * ratio)
                    pol.watch(ctx)
                    steps.append("P")
                    if not pol.paused:
                        break
                if lag and not pol.paused and t < len(q.out):
                    ctx.append(q.out[t])
                    t, secs, fw = t + 1, secs + line[1] * ratio, fw + 1
                    pol.step_time(0, line[1] * ratio)
                    pol.watch(ctx)
                    steps.append("L")
                continue
            draft = list(pol.propose(ctx, K).tokens)
            a = agreed(draft, q.out[t:])
            secs, fw, acc = secs + line[1 + len(draft)], fw + 1, acc + a
            if gate_cls is not None:
                pol.step_time(1 + len(draft), line[1 + len(draft)])
            if draft or not faithful:  # live (``decode.rows.observe``): only a verified draft is observed
                pol.observe(a)
            steps.append(f"D{len(draft)}a{a}")
            n = min(a + 1, len(q.out) - t)
            ctx.extend(q.out[t:t + n])
            t += n
        rows.append({"name": q.name, "cls": q.cls, "turn": q.turn, "tok": len(q.out), "secs": secs, "fw": fw,
                     "acc": acc, "steps": steps})
    return rows


def summary(name, rows, line, ratio=1.0):
    per = defaultdict(lambda: [0, 0, 0.0, 0])
    cls = {}
    for r in rows:
        p = per[r["name"]]
        p[0] += r["tok"]; p[1] += r["fw"]; p[2] += r["secs"]; p[3] += r["acc"]
        cls[r["name"]] = r["cls"]
    x = {n: p[0] * line[1] * ratio / p[2] for n, p in per.items()}
    cats = defaultdict(list)
    for n in per:
        cats[cls[n]].append(math.log(x[n]))
    tpf = sum(p[0] for p in per.values()) / sum(p[1] for p in per.values())
    geo = math.exp(sum(map(math.log, x.values())) / len(x))
    print(f"{name:14s} tpf {tpf:.3f} geomean {geo:.3f}x worst {min(x.values()):.3f}x  " +
          " ".join(f"{c[:5]}:{math.exp(sum(v) / len(v)):.3f}" for c, v in sorted(cats.items())))
    return {n: (p[3], x[n]) for n, p in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--gate", help="a checkout whose CostGate runs (default: this one)")
    ap.add_argument("--ratio", type=float, default=1.0, help="a pipelined plain token / a one-token verify step")
    ap.add_argument("--show", help="print this question's steps (e.g. summarization-281)")
    ap.add_argument("--carry", action="store_true",
                    help="add a live run whose gates share what they learnt of pipelining "
                         "(``policy.learnt.Learnt``) from question to question, as the bench's do")
    args = ap.parse_args()
    _, tok = specdec.load("smollm2-135m", dtype="float32")
    curve = {int(k): v for k, v in json.load(open(args.results[0]))["cost_curve"].items()}
    line = robust_line(curve, K + 1)
    by_q = defaultdict(list)
    for path in args.results:
        for q in turns(path, tok):
            by_q[q.name].append(q)
    gate = gate_class(args.gate)
    res = {}
    configs = (("ungated", None, False, True), ("old replay", gate, False, False),
               ("no lag", gate, False, True), ("live (lag)", gate, True, True))
    if args.carry:
        configs += (("live, carried", gate, True, True),)
    for name, cls, lag, faithful in configs:
        memory = None
        if name == "live, carried":
            from specdec.policy.learnt import Learnt
            memory = Learnt()
        rows = [r for qs in by_q.values() for r in run(qs, tok, curve, line, cls, lag, faithful, args.ratio, memory)]
        res[name] = summary(name, rows, line, args.ratio)
        if args.show:
            for r in rows:
                if r["name"] == args.show and r["turn"] == 0:
                    print("   ", " ".join(r["steps"]))
    print("accepted per question (ungated / old replay / no lag / live):")
    print("  " + " ".join(f"{n}:{'/'.join(str(res[c][n][0]) for c in res)}" for n in res["ungated"]))


if __name__ == "__main__":
    main()
