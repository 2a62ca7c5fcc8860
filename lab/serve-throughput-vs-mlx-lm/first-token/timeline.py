"""In-process timeline of a burst of N short questions through the server's real inference
thread (``InferenceWorker.start``), default settings, fp32: when each job is queued, admitted,
prefilled and joined, when each batcher round's step ends, and when each job's first token
event reaches the asyncio loop (what an SSE client's TTFT is, less HTTP).

    python lab/serve-throughput-vs-mlx-lm/first-token/timeline.py 8 128 [none] [gap_ms]

``none``: plain batching (--draft-type none); ``gap_ms``: the jobs arrive this far apart
(the HTTP side tokenizes them one after another). Prints one line per event, then TTFT
p50 / max and the inference thread's CPU ms per token."""

import asyncio
import statistics
import sys
import time
from pathlib import Path

from specdec.decode.generation import Generation
from specdec.prompts import short_questions
from specdec.server.engine import batcher as batcher_mod
from specdec.server.engine.events import GenRequest, Job, TokenEvent
from specdec.server.engine.worker import InferenceWorker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "host-work"))
from profile_batch import server_worker  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
MAX_TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
DRAFT = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
GAP = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.0
FINE = len(sys.argv) > 5  # also each pipelined step's queue and land
LOG: list[tuple[float, str]] = []
T0 = [0.0]


def note(what: str) -> None:
    LOG.append((time.perf_counter(), what))


def instrument() -> None:
    """Wrap the batcher's phases to note when each ends (inference thread)."""
    B = batcher_mod.Batcher

    def wrap(name: str, say):
        f = getattr(B, name)

        def g(self, *a, **kw):
            t = time.perf_counter()
            out = f(self, *a, **kw)
            msg = say(self, a, out)
            if msg:
                note(f"{name} {1000 * (time.perf_counter() - t):.0f} ms: {msg}")
            return out
        setattr(B, name, g)

    wrap("_admit", lambda s, a, o: f"{len(s.prefilling)} prefilling, {len(s.running)} running"
         if s.prefilling else "")
    wrap("_prefill_together", lambda s, a, o: f"{len(a[0])} rows joined, {len(s.running)} running")
    wrap("_prefill_chunk", lambda s, a, o: f"1 row, {len(s.running)} running")
    step = batcher_mod.loop.step

    def stepped(batch, speculate=True):
        t = time.perf_counter()
        out = step(batch, speculate)
        note(f"step {1000 * (time.perf_counter() - t):.0f} ms: {len(out)} steps of {len(batch.rows)} rows"
             f"{' (pipelined)' if batch.inflight is not None else ''}")
        return out
    batcher_mod.loop.step = stepped
    from specdec.decode import pipeline
    for name in ("_queue", "land"):
        f = getattr(pipeline, name)

        def timed(*a, _f=f, _n=name, **kw):
            t = time.perf_counter()
            out = _f(*a, **kw)
            if FINE:
                note(f"  {_n} {1000 * (time.perf_counter() - t):.0f} ms")
            return out
        setattr(pipeline, name, timed)


async def consume(job: Job, first: dict, i: int) -> None:
    while True:
        e = await job.events.get()
        if isinstance(e, TokenEvent):
            if i not in first:
                first[i] = time.perf_counter()
                note(f"job {i} first token on the loop")
            continue
        return


async def main_async(worker: InferenceWorker) -> dict:
    cfg, tok, loop = worker.cfg, worker.tokenizer, asyncio.get_running_loop()
    first: dict[int, float] = {}
    jobs, tasks = [], []
    T0[0] = time.perf_counter()
    note("burst starts")
    for i, q in enumerate(short_questions(64)[:N]):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=MAX_TOKENS, draft=cfg.speculation)), loop)
        assert worker.queue.put_nowait(job)
        note(f"job {i} queued")
        jobs.append(job)
        tasks.append(asyncio.create_task(consume(job, first, i)))
        if GAP:
            await asyncio.sleep(GAP)
    await asyncio.gather(*tasks)
    note("burst done")
    return {i: first[i] - jobs[i].submitted for i in first}


def main() -> None:
    worker = server_worker(DRAFT)
    worker.start()
    # warm-up (as serve_load's): one request through the thread
    asyncio.run(_warm(worker))
    instrument()
    LOG.clear()
    c0 = _thread_cpu("specdec-inference")
    ttft = asyncio.run(main_async(worker))
    cpu = _thread_cpu("specdec-inference") - c0
    for t, what in LOG:
        print(f"{1000 * (t - T0[0]):8.0f} ms  {what}")
    v = sorted(ttft.values())
    print(f"TTFT (queued -> first token on the loop) p50 {statistics.median(v):.3f} s, "
          f"min {v[0]:.3f}, max {v[-1]:.3f}; inference thread CPU {cpu:.2f} s "
          f"({1000 * cpu / (N * MAX_TOKENS):.1f} ms a token); wall {LOG[-1][0] - T0[0]:.2f} s")
    worker.stop()


async def _warm(worker: InferenceWorker) -> None:
    ids = worker.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=8, draft=worker.cfg.speculation)),
              asyncio.get_running_loop())
    assert worker.queue.put_nowait(job)
    while not isinstance(await job.events.get(), (type(None),)) and job.state != "finished":
        pass
    await asyncio.sleep(0.2)


def _thread_cpu(name: str) -> float:
    """CPU seconds of this process's thread called ``name`` (/proc, Linux)."""
    import os
    import threading
    for t in threading.enumerate():
        if t.name == name and t.native_id is not None:
            with open(f"/proc/{os.getpid()}/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


if __name__ == "__main__":
    main()
