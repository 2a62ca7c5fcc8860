"""What speculation buys on a sharded target: run under mlx.launch (or alone for the
one-process baseline) and rank 0 prints one JSON object.

    mlx.launch -n 2 --backend ring -- python3 lab/distributed-speedup/distributed_latency.py
    python3 lab/distributed-speedup/distributed_latency.py          # one process, same measurements

Measured: one small all_sum's latency (the collective every forward pays 2 x layers
times under tensor parallelism, plus specdec's one message), a 1-token and a (k+1)-token
forward on the sharded model, and plain vs speculative decoding (same prompt, drafter
and k) on it. Modelled: the speedup when each collective costs ``net_us`` more, as on a
real network: speedup = tokens per step x (t1 + net) / (t_k+1 + net), with
net = (2 x layers + 1) x net_us.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx

from specdec.distributed import LeaderModel, follow, init_group, shard
from specdec.engine import generate
from specdec.loader import load
from specdec.cache.rollback import make_cache, trim
from specdec.cache.rollback import prefill

PROMPT = ("Rewrite this function with type hints, keeping the body the same:\n\n"
          + "".join(f"def step_{i}(state, value):\n    state['total'] += value * {i}\n"
                    f"    state['count'] += 1\n    return state\n\n" for i in range(6)))


def median_s(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def forward_cost(model, width: int, n: int) -> float:
    """Median seconds of one forward of ``width`` tokens after a 64-token context."""
    cache = make_cache(model, max_trim=width)
    prefill(model, cache, list(range(100, 164)))
    x = mx.array([list(range(200, 200 + width))])

    def once():
        mx.eval(model(x, cache=cache))
        trim(cache, width)

    once()
    return median_s(once, n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--drafter", default="ngram")
    args = ap.parse_args()
    group = init_group()
    model, tok = load(args.model)
    shard(model, group)
    small = mx.zeros((24,), mx.int32)  # every rank takes part, before the followers' loop
    all_sum_s = median_s(lambda: mx.eval(mx.distributed.all_sum(small, group=group)), 200)
    if group.rank() > 0:
        follow(model, group)
        return
    target = LeaderModel(model, group) if group.size() > 1 else model
    t1, tk = forward_cost(target, 1, 10), forward_cost(target, args.k + 1, 10)
    kw = dict(max_tokens=args.max_tokens, num_draft_tokens=args.k, chat=False)
    generate(target, tok, PROMPT, drafter=None, **{**kw, "max_tokens": 8})  # warm-up
    plain = generate(target, tok, PROMPT, drafter=None, **kw)
    spec = generate(target, tok, PROMPT, drafter=args.drafter, **kw)
    tau = spec.stats.generated_tokens / max(1, spec.stats.verify_steps)
    layers = len(model.layers)
    model_gain = {us: tau * (t1 + (2 * layers + 1) * us * 1e-6) / (tk + (2 * layers + 1) * us * 1e-6)
                  for us in (0, 50, 200, 1000)}
    out = {
        "ranks": group.size(), "model": args.model, "drafter": args.drafter, "k": args.k,
        "all_sum_us": all_sum_s * 1e6, "forward_1_ms": t1 * 1e3, f"forward_{args.k + 1}_ms": tk * 1e3,
        "plain_tok_s": plain.stats.decode_tokens_per_s, "spec_tok_s": spec.stats.decode_tokens_per_s,
        "speedup": spec.stats.decode_tokens_per_s / plain.stats.decode_tokens_per_s,
        "identical": plain.tokens == spec.tokens, "tokens_per_step": tau,
        "modelled_speedup_by_net_us_per_collective": model_gain,
    }
    if isinstance(target, LeaderModel):
        target.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
