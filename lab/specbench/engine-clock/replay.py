"""Issue #46: the gate replayed on recorded answers with the engine's own step costs as the clock.

``lab/gate-acceptance/calibration.py`` replays the real ``CostGate`` over recorded plain answers on
a synthetic clock that is the gate's own line, so the gate's prices are right by construction.
Here the clock is what the engine's steps took live (``--clock``: a verify step of block length L
over a one-token one, and a pipelined plain token's, medians of the traced steps), so a gate whose
line misprices a length pays for it as it would live. Prints, per config, tokens per forward and
the geomean speedup over plain (a plain token at the clock's plain price) per category.

    PYTHONPATH=. python3 lab/specbench/engine-clock/replay.py --results R.json [--records FULL.jsonl.gz]
        [--gate CHECKOUT] [--clock '{"P": 0.99, "1": 1, "2": 1.22, ...}'] [--classes qa,math_reasoning]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "gate-acceptance"))
sys.path.insert(0, str(HERE.parents[2] / "gate-trace"))

import specdec  # noqa: E402
from calibration import Turn, agreed, turn_policy, turns  # noqa: E402
from gate_specbench_replay import K, gate_class  # noqa: E402
from specdec.policy.learnt import Learnt  # noqa: E402

# medians of the traced steps (lab/specbench/shape-pricing's three traces, short prompts: 1,169
# one-token verify steps, 810 L = 2, 151 L = 3, ...; a pipelined token 104): step / one-token step
FRESH = False
NOISE, SD = random.Random(0), 0.0  # --noise SD: each step's time times exp(N(0, SD)), seeded  # --fresh: each question's gate starts from nothing (a process's first request)
OBSERVED = {"P": 0.99, 1: 1.0, 2: 1.22, 3: 1.41, 4: 1.59, 5: 1.60, 6: 1.64, 7: 1.67, 8: 1.69, 9: 1.95}


def full_results(path: str, run: int | None = None) -> str:
    """A bench journal (records.jsonl.gz) as a results.json ``turns`` reads, its plain run as run 0: the
    full profile's one run, or ``run`` of a journal with several (a ``--quick`` run's first measured: 1)."""
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    recs = [dict(r, run=0) for row in rows[1:] for r in row["records"]
            if r["config"] == "plain" and (run is None or r["run"] == run)]
    out = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"records": recs, "cost_curve": rows[0]["cost_curve"]}, out)
    out.close()
    return out.name


def cost(clock, L, context: int) -> float:
    """A step of block length ``L`` (``"P"``: a pipelined token) at ``context`` tokens. The clock's
    (steps traced at a median context of 70 tokens) at every context: rag-541's traced steps (695)
    read L = 2..4 at 1.31, 1.61, 1.79x a one-token step, but pricing that slope on every long
    prompt read RAG and summarization 0.13-0.15x below the live full profile (lab/specbench/full),
    where the flat clock reads them within 0.04x."""
    return clock[L] * (math.exp(NOISE.gauss(0.0, SD)) if SD else 1.0)


def replay(qturns: list[Turn], tok, curve, clock, gate_cls, memory, oracle=None) -> list[dict]:
    """One question's turns under one policy; every step paid at ``clock``'s price; ``memory``
    the curve's ``Learnt``, carried from question to question as a bench run carries it."""
    rows, pol = [], None
    for q in qturns:
        pol = turn_policy(q, pol, tok, curve, gate_cls, Learnt() if FRESH else memory)
        ctx, t, secs, fw, acc = list(q.prompt), 0, 0.0, 0, 0
        while t < len(q.out):
            if gate_cls is not None and pol.paused:
                s = cost(clock, "P", len(ctx))
                ctx.append(q.out[t])
                t, secs, fw = t + 1, secs + s, fw + 1
                pol.step_time(0, s)
                pol.watch(ctx)
                continue
            draft = list(pol.propose(ctx, K).tokens)
            a = agreed(draft, q.out[t:])
            if oracle is not None:  # drafts exactly the offer's accepted prefix, else a plain token
                draft = draft[:a]
                if not a:
                    t, secs, fw = t + 1, secs + cost(clock, "P", len(ctx)), fw + 1
                    ctx.append(q.out[t - 1])
                    continue
            L = 1 + len(draft)
            s = cost(clock, L, len(ctx))
            secs, fw, acc = secs + s, fw + 1, acc + a
            if gate_cls is not None:
                pol.step_time(L, s)
            if draft:  # as the loop does (``decode.rows.observe``: a verified draft only)
                pol.observe(a)
            n = min(a + 1, len(q.out) - t)
            ctx.extend(q.out[t:t + n])
            t += n
        plain = len(q.out) * clock["P"]  # plain decoding's own time, noise averaged out
        rows.append({"name": q.name, "cls": q.cls, "tok": len(q.out), "secs": secs, "fw": fw, "acc": acc,
                     "plain": plain})
    return rows


def summary(name: str, rows: list[dict], verbose: int = 0) -> dict[str, float]:
    per = defaultdict(lambda: [0, 0, 0.0, "", 0.0])
    for r in rows:
        p = per[r["name"]]
        p[0] += r["tok"]; p[1] += r["fw"]; p[2] += r["secs"]; p[3] = r["cls"]; p[4] += r["plain"]
    x = {n: p[4] / p[2] for n, p in per.items()}
    cats = defaultdict(list)
    for n, p in per.items():
        cats[p[3]].append(math.log(x[n]))
    tok_all, fw_all = sum(p[0] for p in per.values()), sum(p[1] for p in per.values())
    geo = math.exp(sum(map(math.log, x.values())) / len(x))
    lost = sum(v < 0.97 for v in x.values())
    if verbose:
        for n in sorted(x, key=x.get)[:verbose]:
            p = per[n]
            print(f"    {n:22s} {x[n]:.3f}x tpf {p[0] / p[1]:.2f} tokens {p[0]}")
    print(f"{name:10s} tpf {tok_all / fw_all:.3f}  {geo:.3f}x  lost {lost:3d} worst {min(x.values()):.3f}  " +
          " ".join(f"{c}:{math.exp(sum(v) / len(v)):.3f}" for c, v in sorted(cats.items())))
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", default=[])
    ap.add_argument("--records", action="append", default=[], help="a full profile's records.jsonl.gz")
    ap.add_argument("--gate", action="append", default=[], help="a checkout whose CostGate to replay")
    ap.add_argument("--clock", help="JSON {L: step / one-token step, 'P': pipelined token}")
    ap.add_argument("--classes", help="only these categories")
    ap.add_argument("--priced-on-clock", action="store_true",
                    help="the gate prices on the clock itself, no line (what knowing the costs is worth)")
    ap.add_argument("--priced-on-curve", action="store_true", help="the gate prices on the cached curve, no line")
    ap.add_argument("--fresh", action="store_true", help="no memory carried from question to question")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="log-normal step-time noise (the traced steps: 0.12)")
    ap.add_argument("--warm", action="store_true", help="carry a first pass's memory into the measured one")
    ap.add_argument("--worst", type=int, default=0, help="print each config's N slowest questions")
    args = ap.parse_args()
    global FRESH, SD
    FRESH, SD = args.fresh, args.noise
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    del model
    paths = args.results + [full_results(p) for p in args.records]
    curve = {int(k): v for k, v in json.load(open(paths[0]))["cost_curve"].items()}
    ratio = {(k if k == "P" else int(k)): v for k, v in json.loads(args.clock).items()} if args.clock else OBSERVED
    clock = {L: curve[1] * r for L, r in ratio.items()}
    if args.priced_on_clock or args.priced_on_curve:
        import specdec.policy.adaptive as adaptive
        adaptive.robust_line = lambda cost, upto: dict(cost)
    if args.priced_on_clock:
        curve = {L: c for L, c in clock.items() if L != "P"}
    by_q = defaultdict(list)
    for path in paths:
        for q in turns(path, tok):
            if not args.classes or q.cls in args.classes.split(","):
                by_q[q.name].append(q)
    print(f"{len(by_q)} questions; clock (x one-token step): {ratio}")
    gates = {"ungated": None, **{f"gate:{g}": gate_class(None if g == "here" else g) for g in args.gate or ["here"]}}
    base = None
    rows = [r for qs in by_q.values() for r in replay(qs, tok, curve, clock, None, None, oracle=True)]
    summary("oracle", rows)
    for name, cls in gates.items():
        memory = Learnt()
        if args.warm and cls is not None:  # one pass to learn, the next measured
            for qs in by_q.values():
                replay(qs, tok, curve, clock, cls, memory)
        rows = [r for qs in by_q.values() for r in replay(qs, tok, curve, clock, cls, memory)]
        x = summary(name, rows, args.worst)
        if base is None:
            base = x
        else:
            worse = sorted((x[n] / base[n], n) for n in x)[:5]
            print("           vs ungated, worst:", " ".join(f"{n}:{r:.3f}" for r, n in worse))


if __name__ == "__main__":
    main()
