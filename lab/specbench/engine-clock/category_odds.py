"""Issue #46: how often would a category of ``--quick`` (two questions each) read the default behind its
ungated drafter, if the replay's per-question results are the truth?

Replays the full profile's 480 answers (``replay.py``'s clock, step-time noise ``SD``, default 0.12 as
traced) under the ungated drafter and the gate, then draws 2 or 4 questions of each category 4,000
times (seeded) and counts the draws whose geomean speedup is below ungated's.

    PYTHONPATH=. python3 lab/specbench/engine-clock/category_odds.py [SD]
"""
import sys, json, math, random, io, contextlib
from pathlib import Path
from collections import defaultdict
E = Path(__file__).resolve().parent
sys.path.insert(0, str(E)); sys.path.insert(0, str(E.parents[1] / "gate-acceptance")); sys.path.insert(0, str(E.parents[1] / "gate-trace"))
import specdec
import replay as R
from calibration import turns
from gate_specbench_replay import gate_class
from specdec.policy.learnt import Learnt
R.SD = float(sys.argv[1]) if len(sys.argv) > 1 else 0.12
model, tok = specdec.load("smollm2-135m", dtype="float32"); del model
path = R.full_results(str(E.parents[0] / "full" / "records.jsonl.gz"))
curve = {int(k): v for k, v in json.load(open(path))["cost_curve"].items()}
clock = {L: curve[1] * r for L, r in R.OBSERVED.items()}
by_q = defaultdict(list)
for q in turns(path, tok): by_q[q.name].append(q)
xs = {}
for name, gc in (("ungated", None), ("gate", gate_class(None))):
    mem = Learnt()
    rows = [r for qs in by_q.values() for r in R.replay(qs, tok, curve, clock, gc, mem)]
    with contextlib.redirect_stdout(io.StringIO()):
        xs[name] = R.summary(name, rows)
cls = {q.name: q.cls for qs in by_q.values() for q in qs}
ratio = {n: xs["gate"][n] / xs["ungated"][n] for n in xs["gate"]}
print(f"per question gate/ungated: below 1 on {sum(r < 1 for r in ratio.values())} of {len(ratio)}, geomean {math.exp(sum(map(math.log, ratio.values()))/len(ratio)):.3f}")
rng = random.Random(0)
for c in sorted(set(cls.values())):
    qs = [n for n in ratio if cls[n] == c]
    for k in (2, 4):
        behind = 0
        for _ in range(4000):
            pick = rng.sample(qs, k)
            g = sum(math.log(xs["gate"][n]) for n in pick) / k
            u = sum(math.log(xs["ungated"][n]) for n in pick) / k
            behind += g < u
        print(f"  {c:15s} {k} questions: the category behind in {behind/4000:.0%} of draws")
