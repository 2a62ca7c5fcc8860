"""Issue #46 item 2: is the cost gate's acceptance estimate calibrated? Recorded answers, no timing.

Rebuilds every (prompt, plain answer) turn of a bench results.json (``--results``: the
``plain`` records of run 0; prompts re-encoded as ``bench.runner.conversation`` builds them),
then, per turn, asks the suffix drafter (k = 8; one drafter per question, as the bench's)
for its offer at *every* position of the answer: its length n, the match length m, the
share of the match's occurrences that the first offered token followed, and how many of
its tokens the answer bears out (what verification would accept: greedy). That is the
truth every policy is judged against. Then the real ``CostGate`` (this checkout's, or
``--gate DIR``'s) is driven over the same answers with the replay's synthetic clock
(``lab/gate-trace/gate_specbench_replay.py``) and every offer it prices is logged with its
first-slot estimate: the calibration table compares those estimates with the realised
first-slot acceptance of the same offers, by estimate bucket, by the gate's state and by
offer features; and the ungated/gated tokens per forward.

    PYTHONPATH=. python3 lab/gate-acceptance/calibration.py \
        --results lab/specbench/per-category-1-offers/results.json \
        --results lab/specbench/quick/results.json [--gate /work/main]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-trace"))

import specdec  # noqa: E402
from specdec.bench.specbench import workloads  # noqa: E402
from specdec.drafters.spec import DraftSpec  # noqa: E402
from specdec.policy.adaptive import robust_line  # noqa: E402
from specdec.resources import drafter_for  # noqa: E402
from gate_specbench_replay import DRAFT_COST, K, gate_class  # noqa: E402


@dataclass
class Turn:
    name: str
    cls: str
    turn: int
    prompt: list[int]
    out: list[int]


def turns(results: str, tok) -> list[Turn]:
    """The plain answers of run 0, every turn, prompts rebuilt as the bench built them."""
    recs = [r for r in json.load(open(results))["records"] if r["config"] == "plain" and r["run"] == 0]
    cases = {w.name: w for w in workloads(None)}
    out = []
    for name in dict.fromkeys(r["workload"] for r in recs):
        case, prompt = cases[name], None
        mine = sorted((r for r in recs if r["workload"] == name), key=lambda r: r["turn"])
        prompt = case.first_messages()
        for r in mine:
            ids = case.encode(tok, prompt)
            if len(ids) != r["prompt_tokens"]:
                raise SystemExit(f"{name} turn {r['turn']}: {len(ids)} prompt tokens, recorded {r['prompt_tokens']}")
            out.append(Turn(name, r["cls"], r["turn"], ids, r["tokens"]))
            text = tok.decode([t for t in r["tokens"] if t not in tok.eos_token_ids])
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            if r["turn"] < len(case.turns):
                prompt = [*msgs, {"role": "assistant", "content": text},
                          {"role": "user", "content": case.turns[r["turn"]]}]
    return out


def agreed(offer, truth) -> int:
    return next((i for i, (a, b) in enumerate(zip(offer, truth)) if a != b), min(len(offer), len(truth)))


def oracle(qturns: list[Turn], tok) -> dict:
    """Per (name, turn, position): the offer's features (``shares``: each offered token's share of its
    state's followers, ``share`` the first's) and how much of it the answer bears out."""
    table, drafter = {}, None
    for q in qturns:
        if q.turn == 0:
            drafter = drafter_for(DraftSpec(gate=False), None, tok).drafter
        drafter.begin(q.prompt)
        for t in range(len(q.out)):
            ctx = q.prompt + q.out[:t]
            offer = list(drafter.propose(ctx, K).tokens)
            m, auto, state = drafter.index.match()
            shares, st = [], state  # each offered token's follower share along the walk
            for tk in offer:
                shares.append(auto.share(st, tk))
                st = auto.next[st][tk]
            table[(q.name, q.turn, t)] = {"n": len(offer), "m": m, "share": shares[0] if shares else 0.0,
                                          "shares": shares, "acc": agreed(offer, q.out[t:]) if offer else 0}
    return table


class Logged:
    """Wraps a CostGate class: every offer it prices is logged with its first-slot estimate."""

    def __init__(self, cls):
        self.cls, self.log = cls, []

    def __call__(self, *a, **kw):
        gate = self.cls(*a, **kw)
        price, log = gate.price_offer, self.log

        def price_offer(n):
            est = gate.offer_acceptance(n) if n else []
            k = price(n)
            log.append({"n": n, "state": gate._state, "est": est[0] if est else None, "k": k,
                        "paused": gate.paused})
            return k
        gate.price_offer = price_offer
        return gate


def turn_policy(q: Turn, pol, tok, curve, gate_cls, memory=None):
    """The policy that replays turn ``q``, begun on its prompt: on a question's first turn a
    fresh one (the ungated suffix drafter's, or ``gate_cls`` over its drafter, as the bench
    builds one per question), else ``pol``, the one of the turn before (also lag_replay's);
    ``memory``: the gate's state carried across questions (lag_replay --carry)."""
    if q.turn == 0 or pol is None:
        pol = drafter_for(DraftSpec(gate=False), None, tok)
        if gate_cls is not None:
            kw = {} if memory is None else {"memory": memory}
            pol = gate_cls(pol.drafter, curve, K, dict(DRAFT_COST), **kw)
    pol.begin(q.prompt)
    return pol


def replay(qturns: list[Turn], tok, curve, line, gate_cls) -> list[dict]:
    """The replay's loop (gate_specbench_replay.replay) over a question's turns with one
    policy, each priced offer tagged with its position."""
    rows, drafter = [], None
    for q in qturns:
        drafter = turn_policy(q, drafter, tok, curve, gate_cls)
        ctx, t, secs, fw, acc = list(q.prompt), 0, 0.0, 0, 0
        mark = lambda pos: [r.setdefault("pos", (q.name, q.turn, pos)) for r in getattr(gate_cls, "log", [])]
        while t < len(q.out):
            if gate_cls is not None and drafter.paused:
                ctx.append(q.out[t])
                t, secs, fw = t + 1, secs + line[1], fw + 1
                drafter.step_time(0, line[1])
                drafter.watch(ctx)
                mark(t)
                continue
            draft = list(drafter.propose(ctx, K).tokens)
            mark(t)
            a = agreed(draft, q.out[t:])
            secs, fw, acc = secs + line[1 + len(draft)], fw + 1, acc + a
            if gate_cls is not None:
                drafter.step_time(1 + len(draft), line[1 + len(draft)])
            drafter.observe(a)
            n = min(a + 1, len(q.out) - t)
            ctx.extend(q.out[t:t + n])
            t += n
        rows.append({"name": q.name, "turn": q.turn, "tok": len(q.out), "secs": secs, "fw": fw, "acc": acc})
    return rows


def bucket_table(title, pairs, edges):
    """pairs: (estimate, realised 0/1); rows by estimate bucket."""
    print(title)
    print(f"  {'estimate':>11s} {'offers':>7s} {'mean est':>9s} {'realised':>9s}")
    for lo, hi in zip(edges, edges[1:]):
        sel = [(e, r) for e, r in pairs if lo <= e < hi]
        if sel:
            print(f"  {lo:4.2f}-{hi:4.2f} {len(sel):7d} {sum(e for e, _ in sel) / len(sel):9.3f} "
                  f"{sum(r for _, r in sel) / len(sel):9.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--gate", help="a checkout whose CostGate to calibrate (default: this one)")
    ap.add_argument("--curve", help="the results.json whose cost curve is the clock (default: the first)")
    args = ap.parse_args()
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    del model
    curve = {int(k): v for k, v in json.load(open(args.curve or args.results[0]))["cost_curve"].items()}
    line = robust_line(curve, K + 1)
    by_q = defaultdict(list)
    for path in args.results:
        for q in turns(path, tok):
            by_q[q.name].append(q)
    truth = {}
    for qs in by_q.values():
        truth.update(oracle(qs, tok))
    # the truth: realised first-slot acceptance of every offer, by its features
    print("every position's offer (the truth): first slot accepted, by offer length n")
    for n in range(1, K + 1):
        sel = [v for v in truth.values() if v["n"] == n]
        if sel:
            print(f"  n={n}: {len(sel):5d} offers, slot 1 {sum(v['acc'] > 0 for v in sel) / len(sel):.3f}, "
                  f"mean accepted {sum(v['acc'] for v in sel) / len(sel):.2f}")
    for n in (1, 2):
        print(f"  n={n} by follower share:")
        for lo, hi in ((0, .25), (.25, .5), (.5, .75), (.75, 1.01)):
            sel = [v for v in truth.values() if v["n"] == n and lo <= v["share"] < hi]
            if sel:
                print(f"    share {lo:.2f}-{min(hi, 1):.2f}: {len(sel):5d}, slot 1 "
                      f"{sum(v['acc'] > 0 for v in sel) / len(sel):.3f}")
    logged = Logged(gate_class(args.gate))
    stats = {"ungated": [], "gated": []}
    for qs in by_q.values():
        stats["ungated"] += replay(qs, tok, curve, line, None)
        stats["gated"] += replay(qs, tok, curve, line, logged)
    pairs = [(r["est"], int(truth[r["pos"]]["acc"] > 0), r) for r in logged.log if r["n"] and "pos" in r
             and r["pos"] in truth]
    edges = [0, .05, .1, .15, .2, .3, .4, .5, .6, .8, 1.01]
    bucket_table("gate's first-slot estimate vs realised, every priced offer", [(e, r) for e, r, _ in pairs], edges)
    for n in (1, 2, 3):
        bucket_table(f"  offers of n={n}", [(e, r) for e, r, x in pairs if x["n"] == n], edges)
    for s, name in enumerate(("after one miss", "after a hit", "after a run of misses")):
        sel = [(e, r) for e, r, x in pairs if x["state"] == s]
        if sel:
            print(f"state {name}: {len(sel)} offers, mean est {sum(e for e, _ in sel) / len(sel):.3f}, "
                  f"realised {sum(r for _, r in sel) / len(sel):.3f}")
    cls = {q.name: q.cls for qs in by_q.values() for q in qs}
    for name, rows in stats.items():
        per = defaultdict(lambda: [0, 0, 0.0, 0])
        for r in rows:
            p = per[r["name"]]
            p[0] += r["tok"]; p[1] += r["fw"]; p[2] += r["secs"]; p[3] += r["acc"]
        x = {n: p[0] * line[1] / p[2] for n, p in per.items()}
        cats = defaultdict(list)
        for n in per:
            cats[cls[n]].append(math.log(x[n]))
        tok_all = sum(p[0] for p in per.values()); fw_all = sum(p[1] for p in per.values())
        geo = math.exp(sum(map(math.log, x.values())) / len(x))
        print(f"{name:8s} tpf {tok_all / fw_all:.3f} geomean x {geo:.3f} worst {min(x.values()):.3f}  " +
              " ".join(f"{c}:{math.exp(sum(v) / len(v)):.3f}" for c, v in cats.items()))
        print("         " + " ".join(f"{n}:{p[0] / p[1]:.2f}/{x[n]:.2f}x/a{p[3]}" for n, p in per.items()))

if __name__ == "__main__":
    main()
