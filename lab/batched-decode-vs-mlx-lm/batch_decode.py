"""In-process batched decode: our ``decode.batch.Batch`` beside mlx-lm's ``BatchGenerator``.

    python lab/batched-decode-vs-mlx-lm/batch_decode.py                          # B = 8 and 32, 64 steps, 2 reps
    python lab/batched-decode-vs-mlx-lm/batch_decode.py --batch 8 --profile "ours default"   # cProfile one config

Same model object (``specdec.load``, fp32 on CPU), same B prompts (chat-templated
``specdec.prompts.short_questions``), greedy. Each config prefills its B rows and runs
one decode step untimed (a pipelined loop then has its next step in flight, as
``BatchGenerator`` has after its prefill), then times ``--steps`` decode steps of the
full batch (no row leaves; EOS is ignored, so every step emits at least one token per
row): tokens/s of the decode loop alone. Configs
(alternated within each repetition, so a busy machine slows them alike):

- ``mlx_lm``: ``BatchGenerator.next()`` (its pipelined ``GenerationBatch``);
- ``ours plain``: ``Batch.step()`` over rows without a drafter;
- ``ours default``: the server's default drafting (``DraftSpec()``: suffix drafting up to
  k = 8 under the cost gate, one shared suffix history), blocks priced by the cached
  verify cost curve as the server does.

Prints one JSON line per measurement and a table of medians; the first ``--check``
tokens of every row of ``ours plain`` and ``ours default`` are compared with mlx_lm's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

from specdec import load
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.policy.pricing import BATCH_COST_LENGTHS
from specdec.policy.block import curve_cost
from specdec.decode.generation import Generation
from specdec.decode.request import Request
from specdec.drafters.spec import DraftSpec, build_drafter
from specdec.drafters.suffix import SuffixHistory
from specdec.measure import cost_curve_for
from specdec.prompts import short_questions
from specdec.resources import prepare_resources


def prompts_for(tokenizer, b: int) -> list[list[int]]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
            for q in short_questions(b)]


def run_mlx(model, prompts, steps, profile=None):
    gen = BatchGenerator(model, max_tokens=steps + 8, completion_batch_size=len(prompts),
                         prefill_batch_size=len(prompts))
    uids = gen.insert(prompts)
    out = {u: [] for u in uids}
    while len(gen._generation_batch) < len(prompts):  # prefill (untimed)
        for r in gen.next()[1]:
            out[r.uid].append(r.token)
    for r in gen.next()[1]:  # one untimed step: the timed ones start with one in flight
        out[r.uid].append(r.token)
    t0 = time.perf_counter()
    with profile or _nothing():
        for _ in range(steps):
            for r in gen.next()[1]:
                out[r.uid].append(r.token)
    wall = time.perf_counter() - t0
    gen.close()
    return wall, steps * len(prompts), [out[u] for u in uids]


def run_ours(model, tokenizer, prompts, steps, spec, cost, profile=None):
    res = prepare_resources(spec, model, tokenizer, history=SuffixHistory(1 << 20))
    batch, reqs = Batch(model, cost), []
    for p in prompts:
        req = Request(model, p, Generation(max_tokens=10**6, draft=spec), drafter=build_drafter(spec, res))
        req.start()
        req.prefill()
        batch.join(req.row(), req.layers)
        reqs.append(req)
    out = [list(s.tokens) for s in loop.step(batch)]  # untimed, as mlx_lm's first step
    emitted, t0 = 0, time.perf_counter()
    with profile or _nothing():
        for _ in range(steps):
            for o, s in zip(out, loop.step(batch)):
                o.extend(s.tokens)
                emitted += len(s.tokens)
    wall = time.perf_counter() - t0
    return wall, emitted, out


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", default="8,32")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--configs", default="mlx_lm,ours plain,ours default")
    ap.add_argument("--check", type=int, default=32, help="tokens per row compared with mlx_lm")
    ap.add_argument("--profile", help="cProfile this config (first repetition of each B)")
    ap.add_argument("--out", help="write the measurements as JSON")
    args = ap.parse_args()
    model, tokenizer = load(args.model, dtype="float32")
    cost = curve_cost(cost_curve_for(model, 16, extra=BATCH_COST_LENGTHS))
    specs = {"ours plain": DraftSpec("none"), "ours default": DraftSpec()}
    configs = args.configs.split(",")
    rows = []
    for b in [int(x) for x in args.batch.split(",")]:
        prompts = prompts_for(tokenizer, b)
        ref = None
        for rep in range(args.reps):
            for name in configs:
                prof = cProfile.Profile() if args.profile == name and rep == 0 else None
                mx.clear_cache()
                if name == "mlx_lm":
                    wall, n, toks = run_mlx(model, prompts, args.steps, prof)
                    ref = toks
                else:
                    wall, n, toks = run_ours(model, tokenizer, prompts, args.steps, specs[name], cost, prof)
                same = None
                if ref is not None:
                    same = sum(a[: args.check] == r[: args.check] for a, r in zip(toks, ref))
                row = {"B": b, "config": name, "rep": rep, "tokens": n, "wall_s": round(wall, 3),
                       "tok_s": round(n / wall, 2), "rows_equal_mlx_lm": same}
                print(json.dumps(row), flush=True)
                rows.append(row)
                if prof is not None:
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    print("\n| B | config | tok/s (median) | ÷ mlx_lm |\n|---|---|---|---|")
    for b in sorted({r["B"] for r in rows}):
        med = {c: statistics.median(r["tok_s"] for r in rows if r["B"] == b and r["config"] == c)
               for c in configs}
        for c in configs:
            ratio = f"{med[c] / med['mlx_lm']:.2f}×" if "mlx_lm" in med else "–"
            print(f"| {b} | {c} | {med[c]:.1f} | {ratio} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
