"""Issue #46: what knowing an offer's acceptance from its features would be worth (an in-sample bound).

Every position of every recorded answer gets the suffix drafter's offer (k = 8) and its features
(``calibration.oracle``): its length n and the share of the match's occurrences the first offered
token followed. A policy that knows P(slot i accepted | bucket) exactly (the empirical
rate over all positions of the bucket: in-sample, so an upper bound on what a model of those
features could learn) drafts the k that maximises tokens per second on the engine clock
(``replay.OBSERVED``), else takes a pipelined plain token. Prints each feature set's speedup.

    PYTHONPATH=. python3 lab/specbench/engine-clock/features.py --records FULL.jsonl.gz [--results R.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[2] / "gate-acceptance"))

import specdec  # noqa: E402
from calibration import oracle, turns  # noqa: E402
from replay import OBSERVED, full_results  # noqa: E402

K = 8


def offers(qturns, tok, confidence=None):
    """Per (question, turn, position): (n, share, accepted, the target's log-probability of the
    last token emitted: ``confidence``'s, 0.0 at an answer's first position or without it)."""
    table = {}
    for key, v in oracle(qturns, tok).items():
        name, turn, t = key
        conf = confidence[f"{name}|{turn}"][t - 1][0] if confidence and t else 0.0
        table[key] = (v["n"], v["share"], v["acc"], conf)
    return table


def confident(lp: float) -> int:
    """The last token's log-probability, bucketed: > -0.1, > -0.5, > -1.5, below."""
    return sum(lp > edge for edge in (-1.5, -0.5, -0.1))


FEATURES = {
    "n": lambda n, s: n,
    "n,share": lambda n, s: (n, min(int(s * 4), 3)),
    "n,share>=3/4": lambda n, s: (n, s >= 0.75),
    "n,share>=1/2": lambda n, s: (n, s >= 0.5),
    "n,share=1": lambda n, s: (n, s >= 0.999),
}
CONFIDENCE = {
    "n,conf": lambda n, s, c: (n, confident(c)),
    "n,share>=3/4,conf": lambda n, s, c: (n, s >= 0.75, confident(c)),
    "n,share>=3/4,conf>-0.5": lambda n, s, c: (n, s >= 0.75, c > -0.5),
}


def rates(table, key):
    """P(slot i accepted) per bucket, i = 1..n."""
    hit, seen = defaultdict(lambda: [0] * K), defaultdict(int)
    for n, s, a, c in table.values():
        if n:
            b = key(n, s, c)
            seen[b] += 1
            for i in range(a):
                hit[b][i] += 1
    return {b: [h / seen[b] for h in hit[b]] for b in seen}


def run(by_q, table, rate, key, clock):
    """Speedup per question of the policy that knows ``rate`` (None: the oracle, knows a)."""
    x = {}
    for name, qs in by_q.items():
        tokens, secs = 0, 0.0
        for q in qs:
            t = 0
            while t < len(q.out):
                n, s, a, c = table[(q.name, q.turn, t)]
                best, k = 1 / clock["P"], 0
                for j in range(1, n + 1):
                    emitted = 1 + (sum(rate[key(n, s, c)][:j]) if rate is not None else min(a, j))
                    if emitted / clock[j + 1] > best:
                        best, k = emitted / clock[j + 1], j
                if k:
                    step = min(a, k) + 1
                    secs += clock[k + 1]
                else:
                    step = 1
                    secs += clock["P"]
                t += min(step, len(q.out) - t)
            tokens += len(q.out)
        x[name] = tokens * clock["P"] / secs
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", default=[])
    ap.add_argument("--records", action="append", default=[])
    ap.add_argument("--confidence", help="target_confidence.py's output: adds the target's confidence")
    args = ap.parse_args()
    confidence = json.loads(Path(args.confidence).read_text()) if args.confidence else None
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    del model
    by_q = defaultdict(list)
    for path in args.results + [full_results(p) for p in args.records]:
        for q in turns(path, tok):
            by_q[q.name].append(q)
    table = {}
    for qs in by_q.values():
        table.update(offers(qs, tok, confidence))
    cls = {q.name: q.cls for qs in by_q.values() for q in qs}
    print("slot 1 accepted by offer length n (offers): share of the match's occurrences < 3/4 | >= 3/4")
    for n in range(1, K + 1):
        cells = []
        for sure in (False, True):
            sel = [a for m, s, a, c in table.values() if m == n and (s >= 0.75) == sure]
            cells.append(f"{sum(a > 0 for a in sel) / max(len(sel), 1):.2f} ({len(sel)})")
        print(f"  n={n}: " + " | ".join(cells))
    features = {name: (lambda f: lambda n, s, c: f(n, s))(f) for name, f in FEATURES.items()}
    if confidence:
        features |= CONFIDENCE
    for name, key in [("oracle", None), *features.items()]:
        x = run(by_q, table, None if key is None else rates(table, key), key, OBSERVED)
        cats = defaultdict(list)
        for n, v in x.items():
            cats[cls[n]].append(math.log(v))
        geo = math.exp(sum(map(math.log, x.values())) / len(x))
        print(f"{name:12s} {geo:.3f}x lost {sum(v < 0.97 for v in x.values()):3d} worst {min(x.values()):.3f}  "
              + " ".join(f"{c}:{math.exp(sum(v) / len(v)):.3f}" for c, v in sorted(cats.items())))


if __name__ == "__main__":
    main()

