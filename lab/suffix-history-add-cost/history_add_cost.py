"""What a finished request costs the inference thread when it joins a full suffix history.

Adds ``--requests`` documents of ``--doc-tokens`` tokens (text-like: repeated phrases
and fresh tokens) to a ``SuffixHistory`` of ``--window`` tokens, timing each ``add``,
once with the shipped ``LOW_WATER`` and once with ``LOW_WATER = 1.0`` (forget only what
overflows: a rebuild on every request once full, as before). Prints one JSON object.

    python lab/suffix-history-add-cost/history_add_cost.py --window 32768 --doc-tokens 1000 --requests 200
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from specdec.drafters import suffix


def documents(n: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    phrases = [[rng.randrange(49152) for _ in range(rng.randint(3, 12))] for _ in range(256)]
    docs = []
    for _ in range(n):
        doc: list[int] = []
        while len(doc) < length:
            doc += rng.choice(phrases) if rng.random() < 0.5 else [rng.randrange(49152)]
        docs.append(doc[:length])
    return docs


def timed_adds(docs: list[list[int]], window: int, low_water: float) -> list[float]:
    shipped, suffix.LOW_WATER = suffix.LOW_WATER, low_water
    try:
        history, times = suffix.SuffixHistory(window), []
        for d in docs:
            t0 = time.perf_counter()
            history.add(d)
            times.append(time.perf_counter() - t0)
        return times
    finally:
        suffix.LOW_WATER = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=int, default=suffix.DEFAULT_MAX_HISTORY_TOKENS)
    ap.add_argument("--doc-tokens", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    docs = documents(args.requests, args.doc_tokens)
    out = {"window": args.window, "doc_tokens": args.doc_tokens, "requests": args.requests}
    for name, low in (("rebuild_per_request", 1.0), ("bulk_forgetting", suffix.LOW_WATER)):
        t = timed_adds(docs, args.window, low)
        full = t[args.window // args.doc_tokens + 1:]  # once the window is full
        out[name] = {"low_water": low, "mean_ms_when_full": round(1e3 * statistics.mean(full), 2),
                     "max_ms": round(1e3 * max(t), 1), "total_s": round(sum(t), 2)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
