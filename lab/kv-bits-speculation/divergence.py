"""Why specdec refuses speculation on a quantized KV cache (docs/caches.md#a-quantized-kv-cache-decodes-plainly).

1. The kernel: a float32 matmul over M rows equals M one-row matmuls only for M <= 3 with
   OpenBLAS (it sums in another order from 4 rows on; mlx's reference BLAS does not).
2. The model: SmolLM2-135M's logits of a verify block of 8 against 8 one-token steps, with a
   full-precision, an 8-bit and a 4-bit cache: the last bits differ in all three, and a
   quantized cache rounds some keys to another level, which moves logits by 1e-2 to 1.
3. The output: plain decoding against ungated suffix drafting (k = 8) and the default gated
   drafter, 64 greedy tokens on the first ten parity prompts, at 4 bits, 8 bits and full
   precision. The refusal is lifted here, in this process only, to show what it prevents.

    PYTHONPATH=. python lab/kv-bits-speculation/divergence.py
"""

from __future__ import annotations

import mlx.core as mx

import specdec
import specdec.decode.request as request
from specdec.cache.rollback import make_cache
from specdec.drafters.spec import DraftSpec
from specdec.prompts import parity_prompts


def kernel_rows() -> str:
    w, x = mx.random.normal((576, 576), key=mx.random.key(0)), mx.random.normal((16, 576), key=mx.random.key(1))
    one = x[:1] @ w.T
    same = [m for m in range(1, 17) if mx.array_equal((x[:m] @ w.T)[:1], one).item()]
    return f"row 0 of an M-row matmul equals the one-row matmul for M in {same}"


def block_against_steps(model, ids: list[int], bits: int | None, n: int = 8) -> list[float]:
    def fresh():
        cache = make_cache(model, max_trim=n + 1, kv_bits=bits)
        model(mx.array([ids]), cache=cache)
        return cache

    cont = [int(t) for t in mx.random.randint(0, 1000, (n,), key=mx.random.key(1)).tolist()]
    steps_cache, block_cache = fresh(), fresh()
    steps = [model(mx.array([[t]]), cache=steps_cache)[0, -1] for t in cont]
    block = model(mx.array([cont]), cache=block_cache)[0]
    return [mx.abs(block[i] - steps[i]).max().item() for i in range(n)]


def main() -> None:
    print(kernel_rows())
    model, tok = specdec.load("smollm2-135m")
    prompts = parity_prompts()
    ids = tok.apply_chat_template([{"role": "user", "content": prompts["code_fnmatch_rename"]}],
                                  add_generation_prompt=True)
    for bits in (None, 8, 4):
        diffs = block_against_steps(model, ids, bits)
        print(f"kv_bits={bits}: |block - steps| per row of an 8-token block:",
              " ".join(f"{d:.1e}" for d in diffs))
    request.refuse_quantized_speculation = lambda *a: None  # what the refusal prevents
    names = sorted(prompts)[:10]
    for bits in (4, 8, None):
        changed = 0
        for name in names:
            msgs = [{"role": "user", "content": prompts[name]}]
            ref = specdec.generate(model, tok, msgs, drafter=None, max_tokens=64, kv_bits=bits).tokens
            row = []
            for spec in (DraftSpec("suffix", num_draft_tokens=8, gate=False), DraftSpec()):
                out = specdec.generate(model, tok, msgs, drafter=spec, max_tokens=64, kv_bits=bits).tokens
                first = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), None)
                row.append("same" if out == ref else f"differs at token {first}")
            changed += row[0] != "same" or row[1] != "same"
            print(f"kv_bits={bits} {name}: suffix k=8 ungated {row[0]}; default {row[1]}", flush=True)
        print(f"kv_bits={bits}: {changed} of {len(names)} prompts changed by speculation")


if __name__ == "__main__":
    main()
