"""Rows that finish on different steps: leaving at once against parking, timed in one run.

    python lab/batch-leave-and-park-cost/batch_finish_wave.py                 # SmolLM2, 32 rows of the parity prompts
    python lab/batch-leave-and-park-cost/batch_finish_wave.py --rows 8 --rounds 3

Prefills ``--rows`` chat-templated ``specdec.prompts.parity_prompts`` (cycled) together
(``request.prefill_together``, as the server does) into one ``decode.batch.Batch`` and
decodes them plainly and greedily until every row is done; row i wants ``8 + 2 (i mod
16)`` tokens, so rows finish over 30 steps, as speculative rows do. Each finished row
either leaves at once (``Batch.leave_rows``: one copy of every remaining row's cache per
step that finishes rows) or parks (``Batch.park_rows``, the server's: its slot rides
along until a quarter of the batch can leave in one copy). Times the decode from the
first step to the empty batch (prefill excluded), the two modes alternated per round
(leave, park, then park, leave, ...); every row's tokens must agree between the modes.
Prints one JSON line: each mode's seconds per round, their medians and park / leave.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from specdec.core.text import encode_prompt
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.decode.generation import Generation
from specdec.decode.request import Request, prefill_together
from specdec.drafters import NoDrafter
from specdec.loader import load
from specdec.prompts import parity_prompts


def wave(model, prompts: list[list[int]], park: bool) -> tuple[float, list[list[int]]]:
    reqs = [Request(model, p, Generation(max_tokens=8 + 2 * (i % 16)), drafter=NoDrafter())
            for i, p in enumerate(prompts)]
    for r in reqs:
        r.start()
    batch = Batch(model)
    batch.join_rows([r.row() for r in reqs], prefill_together(model, reqs))
    live, out = list(range(len(reqs))), [[] for _ in reqs]
    t0 = time.perf_counter()
    while any(j is not None for j in live):
        for j, s in zip(live, loop.step(batch, speculate=False)):
            if j is not None:
                out[j] += [e.token for e in reqs[j].feed(s)]
        done = [n for n, j in enumerate(live) if j is not None and reqs[j].finish_reason]
        if park:
            _, gone = batch.park_rows(done)
        else:
            batch.leave_rows(done)
            gone = done
        for n in done:
            live[n] = None
        live = [j for n, j in enumerate(live) if n not in set(gone)]
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    model, tok = load(args.model)
    texts = [[{"role": "user", "content": p}] for p in parity_prompts().values()]
    prompts = [encode_prompt(tok, texts[i % len(texts)]) for i in range(args.rows)]
    times: dict[str, list[float]] = {"leave": [], "park": []}
    ref = None
    for r in range(args.rounds):
        for mode in (("leave", "park") if r % 2 == 0 else ("park", "leave")):
            seconds, out = wave(model, prompts, mode == "park")
            if ref is not None and out != ref:
                raise SystemExit(f"{mode}: tokens differ from the other mode's")
            ref = out
            times[mode].append(round(seconds, 3))
    med = {m: statistics.median(v) for m, v in times.items()}
    print(json.dumps({"model": args.model, "rows": args.rows, "seconds": times,
                      "median": med, "park_over_leave": round(med["park"] / med["leave"], 3)}))


if __name__ == "__main__":
    main()
