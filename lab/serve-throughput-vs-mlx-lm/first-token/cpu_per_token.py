"""The server's batcher in process, N short questions at once (the decode-heavy load's),
default settings vs plain batching, fp32: the whole process's CPU ms per generated token
(every thread: mlx's and OpenBLAS's too, as serve_load's per-server figure) and what each
verify step cost and emitted.

    python lab/serve-throughput-vs-mlx-lm/first-token/cpu_per_token.py 8 128 default,none,default,none

Each config runs in turn in one process (one model load), interleaved as listed."""

import asyncio
import os
import sys
import time
from dataclasses import replace

from specdec.decode import loop as loop_mod
from specdec.decode.generation import Generation
from specdec.prompts import short_questions
from specdec.server.config import ServerConfig
from specdec.server.engine.batcher import Batcher
from specdec.server.engine.events import GenRequest, Job
from specdec.server.engine.worker import InferenceWorker
from specdec.server.http.metrics import Metrics

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
MAX_TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
CONFIGS = (sys.argv[3] if len(sys.argv) > 3 else "default,none").split(",")
VERIFIES: list[tuple[int, int, int, float]] = []  # rows, block length, tokens emitted, seconds


def count_verifies() -> None:
    verify = loop_mod.verify_step

    def counted(model, cache, rows, **kw):
        t = time.perf_counter()
        steps = verify(model, cache, rows, **kw)
        VERIFIES.append((len(rows), max(r.block for r in rows), sum(len(s.tokens) for s in steps),
                         time.perf_counter() - t))
        return steps
    loop_mod.verify_step = counted


def run(worker: InferenceWorker, n: int, max_tokens: int) -> tuple[int, float, float]:
    """n questions at once through a fresh batcher: (tokens, wall s, process CPU s)."""
    loop, tok, jobs = asyncio.new_event_loop(), worker.tokenizer, []
    worker.batcher = Batcher(worker, None)
    worker._use_curve(worker.curve)  # the cached curve prices the new batcher's blocks
    for q in short_questions(64)[:n]:
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=max_tokens, draft=worker.cfg.speculation)),
                  loop)
        assert worker.queue.put_nowait(job)
        jobs.append(job)
    c0, t0, tokens = os.times(), time.perf_counter(), 0
    while not all(j.state in ("finished", "cancelled") for j in jobs):
        worker.batcher.run_once(0)
        loop.run_until_complete(asyncio.sleep(0))
        for j in jobs:
            while not j.events.empty():
                tokens += type(j.events.get_nowait()).__name__ == "TokenEvent"
    worker.batcher.run_once(0)
    c1 = os.times()
    return tokens, time.perf_counter() - t0, (c1.user + c1.system) - (c0.user + c0.system)


def main() -> None:
    base = ServerConfig(model="smollm2-135m", dtype="float32", save_interval=0, queue_size=128)
    worker = InferenceWorker(base, Metrics())
    worker.load()
    assert worker.curve is not None, "no cached verify cost curve: run `specdec serve` once first"
    count_verifies()
    specs = {"default": base.speculation, "none": replace(base.speculation, draft_type="none")}
    run(worker, 2, 8)  # warm-up
    for name in CONFIGS:
        worker.cfg = replace(base, speculation=specs[name])
        worker.plain_only = None
        VERIFIES.clear()
        tokens, wall, cpu = run(worker, N, MAX_TOKENS)
        extra = "; ".join(f"{r}x{L}: {e} tokens in {1000 * s:.0f} ms" for r, L, e, s in VERIFIES)
        print(f"{name:8s} {tokens} tokens wall {wall:.1f} s process CPU {cpu:.1f} s "
              f"({1000 * cpu / tokens:.1f} ms a token); verify steps: {extra or 'none'}", flush=True)


if __name__ == "__main__":
    main()
