"""Profile the server's batcher in process: N short questions (the decode-heavy load's),
default `specdec serve` settings, fp32, driven round by round on this thread.

    python lab/serve-throughput-vs-mlx-lm/host-work/profile_batch.py 32 128        # host CPU only
    python lab/serve-throughput-vs-mlx-lm/host-work/profile_batch.py 32 128 prof   # + cProfile

cProfile runs on ``time.thread_time``: the inference thread's own CPU (its Python host work
and what mlx runs on the calling thread), not the BLAS threads' compute, and not time spent
waiting for them, so a loaded machine changes it much less than wall time."""

import asyncio
import cProfile
import io
import pstats
import sys
import time
from dataclasses import replace

from specdec.decode.generation import Generation
from specdec.prompts import short_questions
from specdec.server.config import ServerConfig
from specdec.server.engine.events import GenRequest, Job
from specdec.server.engine.worker import InferenceWorker
from specdec.server.http.metrics import Metrics

N = int(sys.argv[1]) if len(sys.argv) > 1 else 32
MAX_TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
PROFILE = len(sys.argv) > 3 and sys.argv[3] == "prof"
DRAFT = sys.argv[4] if len(sys.argv) > 4 else None  # e.g. "none": plain batching (default: the server's)


def run(worker: InferenceWorker, loop: asyncio.AbstractEventLoop, n: int, max_tokens: int) -> tuple[int, float]:
    """n questions submitted at once, rounds until every one finished: (rounds, wall s)."""
    cfg, tok, jobs = worker.cfg, worker.tokenizer, []
    for q in short_questions(64)[:n]:
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=max_tokens, draft=cfg.speculation)), loop)
        assert worker.queue.put_nowait(job)
        jobs.append(job)
    rounds, t0 = 0, time.perf_counter()
    while not all(j.state in ("finished", "cancelled") for j in jobs):
        worker.batcher.run_once(0)
        rounds += 1
        loop.run_until_complete(asyncio.sleep(0))  # the emit callbacks run, as the server's loop would
        for j in jobs:
            while not j.events.empty():
                j.events.get_nowait()
    worker.batcher.run_once(0)  # the emptied batch hands its memory back
    return rounds, time.perf_counter() - t0


def count_verify_steps() -> list[int]:
    """[verify steps, their rows summed, those that drafted], counted from here on."""
    from specdec.decode import loop

    seen, verify = [0, 0, 0], loop.verify_step

    def counted(model, cache, rows, **kw):
        seen[0] += 1
        seen[1] += len(rows)
        seen[2] += any(len(r.proposal.tokens) for r in rows)
        return verify(model, cache, rows, **kw)

    loop.verify_step = counted
    return seen


def server_worker(draft: str | None) -> InferenceWorker:
    """`specdec serve`'s worker with its default settings, fp32 (``draft``: its --draft-type),
    not loaded yet."""
    cfg = ServerConfig(model="smollm2-135m", dtype="float32", save_interval=0, queue_size=128)
    if draft is not None:
        cfg = replace(cfg, speculation=replace(cfg.speculation, draft_type=draft))
    return InferenceWorker(cfg, Metrics())


def main() -> None:
    worker = server_worker(DRAFT)
    worker.load()
    print("max_batch", worker.max_batch, "verify cost curve cached:", worker.curve is not None, flush=True)
    loop = asyncio.new_event_loop()
    run(worker, loop, 2, 8)  # warm-up
    prof = cProfile.Profile(time.thread_time) if PROFILE else None
    c0 = time.thread_time()
    if prof:
        prof.enable()
    verified = count_verify_steps()
    rounds, wall = run(worker, loop, N, MAX_TOKENS)
    if prof:
        prof.disable()
    cpu = time.thread_time() - c0
    print(f"rounds {rounds} ({verified[0]} verify steps of {verified[1]} rows, drafting "
          f"{verified[2]}; the rest pipelined plain) wall {wall:.2f} s, inference thread CPU "
          f"{cpu:.2f} s ({1000 * cpu / rounds:.1f} ms a round)", flush=True)
    if prof:
        for order in ("cumulative", "tottime"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(order).print_stats(50)
            print(out.getvalue())


if __name__ == "__main__":
    main()
