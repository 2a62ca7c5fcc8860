"""Verify cost curves of real model shapes on whatever backend mlx runs on (CPU, Metal, CUDA).

The cost of one forward does not depend on the weights' values, only on the shapes, so
this builds mlx-lm's own model classes from the published configs of the models we
serve (SmolLM2-135M, Qwen2.5-Coder-0.5B and 1.5B) with random weights and measures:

- cost(L) / cost(1) for one L-token block over a ``--context``-token cache, L = 1..64
  (``specdec.measure.verify_cost_curve``): how many verified tokens a step can afford;
- the batched block: B rows of L tokens each, cost(B, L) / cost(1, 1), which is what
  continuous batching with speculation spends per step;
- with ``--tree-lengths``, a token tree's step (two branches, ``tree_attention``'s mask)
  over a linear step of as many tokens (``specdec.measure.tree_overhead``): what the mask
  costs beside the tokens.

    python lab/verify-cost-curves/cost_shapes.py --dtype bfloat16 --out cost.json

Prints one JSON object (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx
from mlx.utils import tree_map

SHAPES = {
    "smollm2-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=100000.0)),
    "qwen2.5-coder-0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                         rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6)),
    "qwen2.5-coder-1.5b": ("qwen2", dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                                         rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6)),
}


def build(name: str, dtype: mx.Dtype):
    from mlx_lm.models import llama, qwen2

    arch, cfg = SHAPES[name]
    mod = {"llama": llama, "qwen2": qwen2}[arch]
    model = mod.Model(mod.ModelArgs(model_type=arch, **cfg))
    model.update(tree_map(lambda p: (mx.random.normal(p.shape) * 0.02).astype(dtype), model.parameters()))
    mx.eval(model.parameters())
    return model


def batched_cost(model, batch: int, length: int, context: int, repeats: int) -> float:
    """Median seconds of one (batch, length) block over a batch of ``context``-token caches."""
    from mlx_lm.models.cache import make_prompt_cache

    vocab = model.args.vocab_size
    times = []
    for r in range(repeats + 1):
        cache = make_prompt_cache(model)
        model(mx.random.randint(0, vocab, (batch, context)), cache=cache)
        mx.eval([c.state for c in cache])
        block = mx.random.randint(0, vocab, (batch, length))
        mx.eval(block)
        t0 = time.perf_counter()
        mx.eval(mx.argmax(model(block, cache=cache), axis=-1))
        if r:  # round 0 warms the shape up
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    from specdec.measure import tree_overhead, verify_cost_curve

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"))
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batches", default="1,2,4,8,16,32")
    ap.add_argument("--block-lengths", default="1,5,9,17")
    ap.add_argument("--tree-lengths", default="", help="e.g. 5,9,17,33,65 (empty: skip)")
    ap.add_argument("--out")
    args = ap.parse_args()
    dtype = getattr(mx, args.dtype)
    out = {"device": str(mx.default_device()), "dtype": args.dtype, "context": args.context,
           "mlx": mx.__version__, "models": {}}
    for name in args.models.split(","):
        model = build(name, dtype)
        curve = verify_cost_curve(model, args.max_len, context=args.context, repeats=args.repeats)
        base = curve[1]
        batched = {f"{b}x{L}": batched_cost(model, b, L, args.context, args.repeats) / base
                   for b in map(int, args.batches.split(",")) for L in map(int, args.block_lengths.split(","))}
        out["models"][name] = {"cost1_ms": base * 1e3,
                               "relative": {L: round(t / base, 3) for L, t in curve.items()},
                               "batched_relative": {k: round(v, 3) for k, v in batched.items()}}
        if args.tree_lengths:
            lengths = tuple(map(int, args.tree_lengths.split(",")))
            overhead = tree_overhead(model, lengths, context=args.context, repeats=args.repeats)
            out["models"][name]["tree_over_linear"] = {L: round(r, 3) for L, r in overhead.items()}
        print(name, json.dumps(out["models"][name]), flush=True)
        del model
        mx.clear_cache()
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
