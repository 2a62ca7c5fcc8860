"""Offline estimate of an EAGLE-3 head's tokens per target forward: replay greedy speculative
decoding of the held-out answers train-drafter stored (OUTPUT/data/heldout_*), drafting with the
saved head's own ``draft`` API (the call the decode loop will make) and accepting while the drafts
equal the target's greedy tokens.

Usage: python lab/eagle-head-tokens-per-forward/eagle_simulate.py OUTPUT_DIR [k] [--model=smollm2-135m]
Measured (issue #47): /work/heads/smollm2 (40 prompts, 6 epochs): k=5 -> 1.18 tokens per forward.
"""
import glob, sys, numpy as np, mlx.core as mx, specdec
from pathlib import Path
from specdec.eagle.io import load_head
from specdec.eagle.data import read_shard
args = [a for a in sys.argv[1:] if not a.startswith("--model")]
model_name = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--model=")), "smollm2-135m")
m, tok = specdec.load(model_name)
head = load_head(args[0], m)
K = int(args[1]) if len(args) > 1 else 5
tot_tokens = tot_steps = 0
for path in sorted(glob.glob(args[0] + "/data/heldout_*")):
    for s in read_shard(Path(path)):
        P = int(np.argmax(s.answer > 0)) if s.answer.any() else len(s.tokens)
        F, T = mx.array(s.features.astype(np.float32))[None], mx.array(s.tokens)[None]
        n = len(s.tokens)
        cache = head.make_cache()
        q, start = P, 0   # feed positions [start, q): features start..q-1, tokens start+1..q
        while q < n - 1:
            d = head.draft(cache, F[:, start:q], T[:, start + 1:q + 1], K).tokens
            a = 0
            while a < K and q + 1 + a < n and d[a] == int(s.tokens[q + 1 + a]) and s.answer[q + 1 + a]:
                a += 1
            tot_steps += 1; tot_tokens += min(a + 1, n - 1 - q)
            start, q = q, q + a + 1
print(f"k={K}: {tot_tokens} tokens in {tot_steps} steps: {tot_tokens / tot_steps:.2f} tokens per target forward")
