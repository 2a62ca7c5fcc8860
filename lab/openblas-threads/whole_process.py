"""Whole process on one OpenBLAS thread or two: plain and the default (suffix, gated) decoding.

Each run is a fresh process (SmolLM2-135M fp32, greedy, three prompts x 160 tokens, one short warm-up),
OPENBLAS_NUM_THREADS 2 and 1 alternated, ROUNDS rounds; prints each run's seconds and a hash of its
tokens, then the medians and ratios.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 python3 lab/openblas-threads/whole_process.py [ROUNDS]
"""
import json, os, subprocess, sys, time
CHILD = r'''
import time, json, sys, specdec
model, tok = specdec.load("smollm2-135m")
PROMPTS = [
    "Write a Python function that checks whether a number is prime, then explain it line by line.",
    "Summarize the plot of Romeo and Juliet in five sentences, then list its main characters.",
    "Translate to French: The weather is nice today, so we will walk to the market and buy bread.",
]
spec = specdec.DraftSpec(sys.argv[1], num_draft_tokens=8) if sys.argv[1] != "plain" else None
specdec.generate(model, tok, PROMPTS[0], max_tokens=32, drafter=spec)
t = time.perf_counter(); toks = []
for p in PROMPTS:
    toks += specdec.generate(model, tok, p, max_tokens=160, drafter=spec).tokens
print(json.dumps({"s": time.perf_counter() - t, "h": hash(tuple(toks))}))
'''
res = {}
for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for mode in ("plain", "suffix"):
        for th in ("2", "1"):
            env = {**os.environ, "OPENBLAS_NUM_THREADS": th}
            out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True)
            d = json.loads(out.stdout.strip().splitlines()[-1])
            res.setdefault(f"{mode}@{th}", []).append(d["s"])
            print(rnd, mode, th, round(d["s"], 2), d["h"] % 1000, flush=True)
med = {k: sorted(v)[len(v)//2] for k, v in res.items()}
print({k: round(v, 2) for k, v in med.items()})
print("suffix@1/suffix@2", med["suffix@1"]/med["suffix@2"], "plain@1/plain@2", med["plain@1"]/med["plain@2"],
      "speedup@2", med["plain@2"]/med["suffix@2"], "suffix@1 vs plain@2", med["plain@2"]/med["suffix@1"])
