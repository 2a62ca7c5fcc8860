"""Issue #46: would more of what the suffix drafter knows predict acceptance better? (in-sample bounds)

``features.py`` found that an offer's length n and the share of the match's occurrences its first
token followed (>= 3/4: ``offers.grade``) give 1.413x of the oracle's 1.553x on the full profile's 480
answers. Here, per offer, also: every offered token's own follower share along the walk (the sure
prefix, their product, their minimum), the match length, whether the previous position's offer was
right, and the run of right offers before. Same bound as ``features.py`` (the empirical rate per
bucket, in-sample; the k with the most tokens per second on the engine clock).

    PYTHONPATH=. python3 lab/specbench/engine-clock/features_more.py
"""
import sys, math
from collections import defaultdict
from pathlib import Path
E = Path(__file__).resolve().parent
sys.path.insert(0, str(E)); sys.path.insert(0, str(E.parents[1] / "gate-acceptance"))
import specdec
from calibration import oracle, turns
from replay import OBSERVED, full_results
from features import run
K = 8

def table_of(qturns, tok):
    """Per position: (n, each offered token's share, accepted, match length), ``calibration.oracle``'s."""
    return {key: (v["n"], v["shares"], v["acc"], v["m"]) for key, v in oracle(qturns, tok).items()}

def rates(table, key):
    hit, seen = defaultdict(lambda: [0] * K), defaultdict(int)
    for n, s, a, m in table.values():
        if n:
            b = key(n, s, m); seen[b] += 1
            for i in range(a): hit[b][i] += 1
    return {b: [h / seen[b] for h in hit[b]] for b in seen}

def sure_prefix(s, th=0.75):
    c = 0
    for x in s:
        if x < th: break
        c += 1
    return c
def cumq(s):
    p=1.0
    for x in s: p*=x
    return min(int(p*4),3)
FEAT = {
 "n,s1,prevhit": lambda n,s,m: (n, s[0]>=0.75, m[1]),
 "n,s1,run": lambda n,s,m: (n, s[0]>=0.75, m[2]),
 "n,s1,prevhit,run": lambda n,s,m: (n, s[0]>=0.75, m[1], m[2]),
 "n": lambda n,s,m: n,
 "n,s1>=3/4": lambda n,s,m: (n, s[0]>=0.75),
 "n,sureprefix": lambda n,s,m: (n, sure_prefix(s)),
 "n,s1,s2": lambda n,s,m: (n, s[0]>=0.75, len(s)>1 and s[1]>=0.75),
 "n,cumprod q": lambda n,s,m: (n, cumq(s)),
 "n,s1 q,cum q": lambda n,s,m: (n, min(int(s[0]*4),3), cumq(s)),
 "n,sureprefix,m>=16": lambda n,s,m: (n, sure_prefix(s), m[0]>=16),
 "n,s1,minshare q": lambda n,s,m: (n, s[0]>=0.75, min(int(min(s)*4),3)),
}
# rows (n, shares, accepted, (match length, previous position's offer: 0 none, 1 right, 2 an answer's
# first, 3 wrong; the run of right offers before, <= 4)): features.run reads them as (n, s, a, c)
def main():
    model, tok = specdec.load("smollm2-135m", dtype="float32"); del model
    by_q = defaultdict(list)
    for q in turns(full_results(str(E.parents[0] / "full" / "records.jsonl.gz")), tok):
        by_q[q.name].append(q)
    table = {}
    for qs in by_q.values(): table.update(table_of(qs, tok))
    cls = {q.name: q.cls for qs in by_q.values() for q in qs}
    t2 = {}
    for (nm, tu, t), (n, s, a, m) in table.items():
        prev = table.get((nm, tu, t - 1))
        ph = 2 if prev is None else (0 if prev[0] == 0 else (1 if prev[2] > 0 else 3))
        run_ = 0
        j = t - 1
        while j >= 0 and table[(nm, tu, j)][2] > 0 and run_ < 4:
            run_ += 1; j -= 1
        t2[(nm, tu, t)] = (n, s, a, (m, ph, run_))
    for name, key in [("oracle", None), *FEAT.items()]:
        r = None if key is None else rates(t2, key)
        x = run(by_q, t2, r, key, OBSERVED)
        cats = defaultdict(list)
        for nm, v in x.items(): cats[cls[nm]].append(math.log(v))
        geo = math.exp(sum(map(math.log, x.values())) / len(x))
        print(f"{name:22s} {geo:.3f}x lost {sum(v < 0.97 for v in x.values()):3d} buckets {len(r) if r else 0:4d} "
              + " ".join(f"{c[:5]}:{math.exp(sum(v)/len(v)):.3f}" for c, v in sorted(cats.items())), flush=True)


if __name__ == "__main__":
    main()
