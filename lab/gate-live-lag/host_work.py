"""Issue #46 item 2 (a): the cost gate's own host work per step, live, beside its ungated drafter's.

Wraps the decode policy's calls (propose, observe, took, plain, begin) with perf_counter on real
SmolLM2-135M decoding of Spec-Bench questions (first turn, chat template, 128 tokens) and prints
their total per request beside the request's steps. Run: PYTHONPATH=. python3 lab/gate-live-lag/host_work.py 201 281
(question ids, from the vendored question.jsonl). Output of 2026-11-28 (loaded machine): host_work.txt."""
import json, sys, time
from pathlib import Path
import specdec
from specdec.drafters.spec import DraftSpec
from specdec.resources import drafter_for
from specdec.decode.generation import Generation

model, tok = specdec.load("smollm2-135m", dtype="float32")
qs = {json.loads(l)["question_id"]: json.loads(l) for l in open(Path(specdec.__file__).parent / "bench/data/specbench/question.jsonl")}
ids = [int(a) for a in sys.argv[1:]] or [201, 281]

def wrap(pol, acc):
    for name in ("propose", "observe", "took", "plain", "begin"):
        f = getattr(pol, name)
        def w(*a, _f=f, _n=name, **k):
            t = time.perf_counter(); r = _f(*a, **k); acc[_n] = acc.get(_n, 0) + time.perf_counter() - t
            acc[_n + "#"] = acc.get(_n + "#", 0) + 1
            return r
        setattr(pol, name, w)

for qid in ids:
    msgs = [{"role": "user", "content": qs[qid]["turns"][0]}]
    for rep in range(2):
        for name, spec in (("default", DraftSpec()), ("ungated", DraftSpec(gate=False))):
            pol = drafter_for(spec, model, tok)
            acc = {}
            wrap(pol, acc)
            t = time.perf_counter()
            r = specdec.generate(model, tok, msgs, drafter=pol, max_tokens=128)
            wall = time.perf_counter() - t
            s = r.stats
            host = sum(v for k, v in acc.items() if not k.endswith("#"))
            n = len(r.tokens) if hasattr(r, "tokens") else None
            print(qid, rep, name, f"wall {wall:.2f}s", "stats", {k: getattr(s, k) for k in ("verify_steps", "draft_steps", "accepted", "drafted", "emitted_tokens", "decode_s") if hasattr(s, k)},
                  f"policy host {host*1e3:.1f} ms", {k: (round(v*1e3, 1) if not k.endswith('#') else v) for k, v in sorted(acc.items())}, flush=True)
