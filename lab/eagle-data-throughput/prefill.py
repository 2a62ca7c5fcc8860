"""Prefill throughput of a packaged model (issue #47): what distilling a head's data from
teacher-forced text (one forward over existing text: features and soft labels at every
position) would cost per token, beside the target answering prompts itself (decode).

    PYTHONPATH=. python lab/eagle-data-throughput/prefill.py [smollm2-135m]

One forward per (batch, length) shape, warmed once, then the mean of 2 timed forwards."""

import sys
import time

import mlx.core as mx

import specdec

SHAPES = ((1, 512), (4, 512), (8, 256))


def main(name: str) -> None:
    model, _ = specdec.load(name)
    for batch, length in SHAPES:
        x = mx.array([[10 + i % 1000 for i in range(length)]] * batch)
        mx.eval(model(x))  # warm-up
        t0 = time.perf_counter()
        for _ in range(2):
            mx.eval(model(x))
        dt = (time.perf_counter() - t0) / 2
        print(f"{name} batch {batch} x {length}: {dt:.2f} s a forward, {batch * length / dt:.0f} tokens/s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m")
