"""Does OpenBLAS's thread count change what a forward of M tokens costs on mlx-cpu, and its logits?

One process, one model (the loader's fp32 column-major weights): forwards of a single row's
L-token block (a verify step) and of R rows' one-token step (a server's decode round) after a
121-token prompt, each timed at 1 and at ``os.cpu_count()`` OpenBLAS threads
(``openblas_set_num_threads``), interleaved over 3 rounds of 7 timings (the median of the
rounds' medians). Each size's logits at both counts are compared: the largest difference and
whether every position's argmax agrees. Run from the repository root:
``PYTHONPATH=. python lab/openblas-threads/threads.py smollm2-135m [--blocks 1,2,...] [--rows 1,2,...]``.
"""

import argparse
import ctypes
import os
import sys
import time

from specdec.backend import openblas_path, openblas_preloaded, preload_env

if openblas_path() and not openblas_preloaded() and not os.environ.get("THREADS_REEXEC"):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**preload_env(), "THREADS_REEXEC": "1"})
import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from specdec.loader import load  # noqa: E402


def timed(step, n: int = 7) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("--blocks", default=",".join(map(str, range(1, 18))))
    ap.add_argument("--rows", default="2,4,8,16,32")
    args = ap.parse_args()
    blas = ctypes.CDLL(None)  # the preloaded OpenBLAS's symbols
    most = os.cpu_count() or 2
    model, tok = load(args.model)
    prompt = mx.array(tok.encode("The quick brown fox jumps over the lazy dog. " * 12))[None]
    sizes = [(1, int(L)) for L in args.blocks.split(",")] + [(int(r), 1) for r in args.rows.split(",")]
    times: dict = {}
    for rnd in range(3):
        for rows, L in sizes:
            cache = make_prompt_cache(model)
            mx.eval(model(mx.concatenate([prompt] * rows), cache=cache))
            block = mx.array([[42 + i for i in range(L)]] * rows)
            out = {}
            for th in ((most, 1) if rnd % 2 == 0 else (1, most)):
                blas.openblas_set_num_threads(th)

                def step():
                    out[th] = model(block, cache=cache)
                    mx.eval(out[th])
                    for c in cache:
                        c.trim(L)
                times.setdefault((rows, L, th), []).append(timed(step))
            diff = mx.abs(out[1] - out[most]).max().item()
            same = mx.array_equal(out[1].argmax(-1), out[most].argmax(-1)).item()
            times.setdefault((rows, L, "check"), []).append((diff, same))
    blas.openblas_set_num_threads(most)
    base = sorted(times[(1, 1, most)])[1]
    print(f"{args.model}: ms a forward (x a one-token step at {most} threads); logits at 1 vs {most} threads")
    for rows, L in sizes:
        a, b = (sorted(times[(rows, L, th)])[1] for th in (most, 1))
        checks = times[(rows, L, "check")]
        print(f"  rows {rows:2d} x L {L:2d} (M {rows * L:3d}): {most} threads {a:6.1f} ({a / base:.2f}x)  "
              f"1 thread {b:6.1f} ({b / base:.2f}x)  1/{most} {b / a:.2f}  "
              f"max |diff| {max(c[0] for c in checks):.1e}  argmax equal {all(c[1] for c in checks)}")


if __name__ == "__main__":
    main()
