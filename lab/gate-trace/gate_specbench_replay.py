"""Issue #46 item 2: the cost gate's decisions replayed on recorded plain answers (no timing).

Decodes each question of ``specdec bench --profile specbench --quick`` (first turns) plain
once, then drives the real ``CostGate`` (this checkout's, and ``--before DIR``'s) and the
ungated suffix drafter over those answers with a synthetic clock: a verify step of L tokens
costs the robust line through the bench's measured curve (``--curve``: a results.json),
a pipelined plain token ``--ratio`` of a one-token verify step. Drafts, acceptance and
forwards are the engine's (greedy: the answer is the plain one; the ungated replay matches
the bench's records token for token); speedups are the clock's, not a machine's, which is
the point on a loaded machine: every decision is deterministic.

    PYTHONPATH=. python3 lab/gate-trace/gate_specbench_replay.py --curve lab/specbench/quick/results.json \
        --before /work/main --ratio 1.0 --ratio 0.9
Result: lab/gate-trace/README.md ("Offer pricing").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import specdec
from specdec.bench.specbench import workloads
from specdec.policy.adaptive import robust_line
from specdec.policy.gate import CostGate
from specdec.drafters.spec import DraftSpec
from specdec.engine import generate
from specdec.resources import drafter_for

K = 8
DRAFT_COST = {"fixed": 2.4e-6, "per_token": 0.0}  # the suffix drafter's, as the bench measured it


def answers(model, tok) -> list[dict]:
    out = []
    for w in workloads(2):
        res = generate(model, tok, w.first_messages(), max_tokens=128)
        out.append({"name": w.name, "cls": w.cls, "prompt": list(map(int, res.prompt_tokens)),
                    "tokens": list(map(int, res.tokens))})
    return out


def gate_class(where: str | None):
    if where is None:
        return CostGate
    path = next(p for p in (f"{where}/specdec/policy/gate.py", f"{where}/specdec/drafters/gate.py")
                if Path(p).exists())  # the gate moved to policy/ with issue #45's seam
    spec = importlib.util.spec_from_file_location("specdec.policy._gate_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CostGate


def replay(q: dict, tok, curve: dict, line: dict, ratio: float, gate) -> dict:
    """One answer decoded by ``gate`` (a CostGate class; None: ungated) on the clock."""
    prompt, out = q["prompt"], q["tokens"]
    drafter = drafter_for(DraftSpec(gate=False), None, tok)  # the plain decode policy
    if gate is not None:
        drafter = gate(drafter.drafter, curve, K, dict(DRAFT_COST))
    drafter.begin(prompt)
    ctx, t, secs, forwards, accepted = list(prompt), 0, 0.0, 0, 0
    while t < len(out):
        if gate is not None and drafter.paused:
            s = line[1] * ratio
            ctx.append(out[t])
            t, secs, forwards = t + 1, secs + s, forwards + 1
            drafter.step_time(0, s)
            drafter.watch(ctx)
            continue
        draft = list(drafter.propose(ctx, K).tokens)
        a = next((i for i, (d, o) in enumerate(zip(draft, out[t:])) if d != o), min(len(draft), len(out) - t))
        s = line[1 + len(draft)]
        secs, forwards, accepted = secs + s, forwards + 1, accepted + a
        if gate is not None:
            drafter.step_time(1 + len(draft), s)
        drafter.observe(a)
        n = min(a + 1, len(out) - t)
        ctx.extend(out[t:t + n])
        t += n
    return {"x": len(out) * line[1] * ratio / secs, "tpf": len(out) / forwards, "accepted": accepted}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curve", required=True, help="a bench results.json (its cost_curve)")
    ap.add_argument("--before", help="a checkout whose CostGate also runs")
    ap.add_argument("--ratio", type=float, action="append", help="plain token / one-token verify")
    ap.add_argument("--answers", help="cache of the plain answers (JSON; written if absent)")
    args = ap.parse_args()
    curve = {int(k): v for k, v in json.load(open(args.curve))["cost_curve"].items()}
    line = robust_line(curve, K + 1)
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    try:
        qs = json.load(open(args.answers)) if args.answers else answers(model, tok)
    except FileNotFoundError:
        qs = answers(model, tok)
        json.dump(qs, open(args.answers, "w"))
    configs = {"default": gate_class(None), "ungated": None}
    if args.before:
        configs["before"] = gate_class(args.before)
    for ratio in args.ratio or [1.0]:
        print(f"plain token = {ratio} x a one-token verify step; x: speedup, tpf: tokens per forward")
        print(f"{'question':20s} {'tok':>4s}" + "".join(f" {n:>20s}" for n in configs))
        logs = {n: [] for n in configs}
        for q in qs:
            cells = []
            for name, gate in configs.items():
                r = replay(q, tok, curve, line, ratio, gate)
                logs[name].append((math.log(r["x"]), len(q["tokens"]), len(q["tokens"]) / r["tpf"]))
                cells.append(f"{r['x']:.3f}x {r['tpf']:.2f} a{r['accepted']:3d}")
            print(f"{q['name']:20s} {len(q['tokens']):4d}" + "".join(f" {c:>20s}" for c in cells))
        print("geomean / pooled tpf: " + "  ".join(
            f"{n} {math.exp(sum(x for x, _, _ in v) / len(v)):.3f}x "
            f"{sum(t for _, t, _ in v) / sum(f for _, _, f in v):.3f}" for n, v in logs.items()))


if __name__ == "__main__":
    main()
