"""What a batch cache's housekeeping costs beside a decode step, at server-sized batches.

    python lab/batch-leave-and-park-cost/batch_leave_cost.py                  # SmolLM2, 32 rows of the parity prompts
    python lab/batch-leave-and-park-cost/batch_leave_cost.py --rows 8

Prefills ``--rows`` chat-templated ``specdec.prompts.parity_prompts`` (cycled) into one
``RowsKVCache`` batch, then times, on that batch: a one-token step, a three-token step,
a step after a verify step left holes (rows kept 0, 1 or 2 of 3 tokens), a whole-buffer
``compact()``, and a row leaving, three times (``extract`` then ``filter``, holes kept;
the first leave allocates the smaller buffer, later ones reuse freed memory). The leave
used to compact first; at 32 rows a compaction cost more than a decode step, which is why
rows now leave and join with their holes. Prints one JSON line of seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx

from specdec.cache.batch_cache import prefill_rows, trim_rows
from specdec.core.text import encode_prompt
from specdec.loader import load
from specdec.prompts import parity_prompts


def timed(fn, reps: int = 1) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=32)
    args = ap.parse_args()
    model, tok = load(args.model)
    prompts = [encode_prompt(tok, [{"role": "user", "content": p}]) for p in parity_prompts().values()]
    rows = [prompts[i % len(prompts)] for i in range(args.rows)]
    cache = prefill_rows(model, [model.make_cache() for _ in rows], rows)

    def step(L: int) -> None:
        out = model(mx.zeros((len(cache[0].pads), L), mx.int32), cache=cache)
        mx.eval(out, [c.state for c in cache])

    step(1)  # warm-up
    out = {"rows": args.rows, "longest": max(map(len, rows)),
           "step_1": timed(lambda: step(1), 3), "step_3": timed(lambda: step(3), 2)}
    step(3)
    trim_rows(cache, 3, [i % 3 for i in range(args.rows)])
    out["step_1_with_holes"] = timed(lambda: step(1), 3)

    def leave() -> None:
        gone = [c.extract(0) for c in cache]
        mx.eval([c.keys for c in gone if c.keys is not None])
        for c in cache:
            c.filter(list(range(1, len(c.pads))))
        mx.eval([c.state for c in cache])

    out["leave_one_row"] = [round(timed(leave), 4) for _ in range(3)]  # the first allocates

    def compact() -> None:
        for c in cache:
            c.compact()
        mx.eval([c.state for c in cache])

    out["compact"] = timed(compact)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
