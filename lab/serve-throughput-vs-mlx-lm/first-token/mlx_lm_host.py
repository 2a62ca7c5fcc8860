"""mlx_lm's own BatchGenerator (what mlx_lm.server steps) in process on the same short
questions: the calling thread's CPU per generated token (``time.thread_time``: its Python
and graph building, not the BLAS threads), beside ``host-work/profile_batch.py``'s figure
for our batcher.

    python lab/serve-throughput-vs-mlx-lm/first-token/mlx_lm_host.py 8 128"""

import sys
import time

from mlx_lm.generate import BatchGenerator

import specdec
from specdec.prompts import short_questions

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
MAX_TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128


def run(model, tok, n: int, max_tokens: int) -> tuple[int, int, float, float]:
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in short_questions(64)[:n]]
    gen = BatchGenerator(model, completion_batch_size=32, prefill_batch_size=8)
    gen.insert(prompts, max_tokens=[max_tokens] * n)
    c0, t0, tokens, steps, left = time.thread_time(), time.perf_counter(), 0, 0, n
    while left:
        _, responses = gen.next()
        steps += 1
        for r in responses:
            tokens += r.finish_reason != "stop"
            left -= r.finish_reason is not None
    gen.close()
    return tokens, steps, time.perf_counter() - t0, time.thread_time() - c0


def main() -> None:
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    run(model, tok, 2, 8)  # warm-up
    tokens, steps, wall, cpu = run(model, tok, N, MAX_TOKENS)
    print(f"mlx_lm BatchGenerator: {tokens} tokens in {steps} calls, wall {wall:.1f} s, calling thread "
          f"CPU {cpu:.2f} s ({1000 * cpu / steps:.1f} ms a call, {1000 * cpu / tokens:.2f} ms a token)")


if __name__ == "__main__":
    main()
