"""Issue #46 (gate6): the verify cost curve timed on a loaded machine, median against floor, from the
same interleaved timings (``measure.verify_cost_curve``'s loop), beside a quiet curve (a cached one, a
bench results.json's, or a JSON file {L: seconds}). Prints seconds and cost(L)/cost(1) for each, and
whether each rises (``measure_floor.dips``); then ``verify_cost_curve`` itself (floors
re-timed where they dip, then capped). Lab only; no assertion.

    PYTHONPATH=. python3 lab/gate-start/curve_under_load.py --quiet ~/.cache/specdec/cost/FP.json \
        [--model smollm2-135m] [--max-len 9] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import mlx.core as mx

import specdec
from specdec.cache.rollback import trim
from specdec.decode.step import verify_forward
from specdec.measure import _context, verify_cost_curve  # noqa: PLC2701 (lab: its own context)
from specdec.measure_floor import dips


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--quiet", required=True, help="a quiet curve: JSON {L: s} or a results.json")
    ap.add_argument("--max-len", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    quiet_raw = json.load(open(args.quiet))
    quiet = {int(k): v for k, v in quiet_raw.get("cost_curve", quiet_raw).items()}
    model, _ = specdec.load(args.model)
    lengths = list(range(1, args.max_len + 1))
    rng = random.Random(0)
    vocab, cache, _ = _context(model, lengths, 256, rng)
    times: dict[int, list[float]] = {L: [] for L in lengths}
    for r in range(args.repeats + 1):
        for L in lengths:
            t0 = time.perf_counter()
            mx.eval(mx.argmax(verify_forward(model, cache, [[rng.randrange(vocab) for _ in range(L)]])[0],
                              axis=-1))
            if r:
                times[L].append(time.perf_counter() - t0)
            trim(cache, L)
    curves = {"quiet": {L: quiet[L] for L in lengths},
              "median": {L: statistics.median(v) for L, v in times.items()},
              "floor": {L: min(v) for L, v in times.items()}}
    # the whole mechanism: floors re-timed where they dip (3 rounds), then capped
    curves["measure"] = verify_cost_curve(model, args.max_len, repeats=args.repeats)
    print("L        " + " ".join(f"{L:>6d}" for L in lengths))
    for name, c in curves.items():
        print(f"{name:8s} " + " ".join(f"{c[L]:6.3f}" for L in lengths), "s; dips at", dips(c) or "none")
        print(f"  /c(1)  " + " ".join(f"{c[L] / c[1]:6.2f}" for L in lengths))
    for name in ("median", "floor", "measure"):
        err = max(abs(curves[name][L] / curves[name][1] - quiet[L] / quiet[1]) / (quiet[L] / quiet[1])
                  for L in lengths)
        print(f"{name}: largest |ratio error| against quiet {err:.1%}; cost(1) x{curves[name][1] / quiet[1]:.2f}")


if __name__ == "__main__":
    main()
