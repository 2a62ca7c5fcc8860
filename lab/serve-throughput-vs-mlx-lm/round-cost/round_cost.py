"""Our batched plain round vs mlx_lm's BatchGenerator round, in process, same model and rows:
calling-thread CPU per round (``time.thread_time``: graph building, mlx's per-op dispatch,
Python; mlx runs the kernels on its stream thread), wall per round, and the mlx ops in one
round's graph (``mx.export_to_dot`` of what the round hands ``mx.async_eval``).

    python lab/serve-throughput-vs-mlx-lm/round-cost/round_cost.py 8 24 3 "" capped
        # rows, steps, repeats, served configs ("": none; "none,default": the server's
        # batcher too, each its own model load), "capped": ours and mlx_lm's again under the
        # server's mlx buffer-cache limit

Both decode the same N short questions (chat template, greedy, no stop tokens so no row
finishes), prefilled first and not timed; then ``steps`` rounds of each, interleaved
``repeats`` times. "ours" is ``decode.loop.step`` on a ``Batch`` of plain rows (the
server's plain path: pipelined); "mlx_lm" is ``BatchGenerator.next``. Their first tokens
are compared (they must agree)."""

import asyncio
import os
import re
import sys
import tempfile
import time
from collections import Counter

from dataclasses import replace

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

import specdec
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.decode.generation import Generation
from specdec.decode.request import Request, prefill_together
from specdec.drafters import NoDrafter
from specdec.prompts import short_questions
from specdec.server.config import ServerConfig
from specdec.server.engine.kv_budget import CACHE_LIMIT
from specdec.server.engine.events import GenRequest, Job
from specdec.server.engine.worker import InferenceWorker
from specdec.server.http.metrics import Metrics

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 64
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
DRAFTS = [d for d in (sys.argv[4] if len(sys.argv) > 4 else "none").split(",") if d]  # served: --draft-type, or "default"
CAPPED = len(sys.argv) > 5 and sys.argv[5] == "capped"
GRAPHS: list[Counter] = []
OPS: dict[str, Counter] = {}  # ops in each graph handed to mx.async_eval while counting


def counting(on: bool) -> None:
    """While on, every ``mx.async_eval`` first counts the unevaluated ops it is handed."""
    if not hasattr(mx, "_async_eval"):
        mx._async_eval = mx.async_eval

    def counted(*args):
        arrays = [a for a in _flat(args)]
        with tempfile.NamedTemporaryFile("r", suffix=".dot") as f:
            mx.export_to_dot(f.name, *arrays)
            dot = f.read()
        # op nodes are rectangles, labelled with the primitive (mlx's export_to_dot)
        GRAPHS.append(Counter(re.findall(r'label ="([^"]+)", shape=rectangle', dot)))
        return mx._async_eval(*args)
    mx.async_eval = counted if on else mx._async_eval


def _flat(x):
    if isinstance(x, mx.array):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flat(y)


class Ours:
    def __init__(self, model, prompts):
        reqs = [Request(model, p, Generation(max_tokens=100_000), drafter=NoDrafter()) for p in prompts]
        for r in reqs:
            r.start()
        self.batch = Batch(model)
        self.batch.join_rows([r.row() for r in reqs], prefill_together(model, reqs))
        self.tokens = [[] for _ in prompts]

    def round(self) -> None:
        for i, s in enumerate(loop.step(self.batch)):
            self.tokens[i] += s.tokens


class Theirs:
    def __init__(self, model, prompts):
        self.gen = BatchGenerator(model, completion_batch_size=32, prefill_batch_size=8)
        uids = self.gen.insert(prompts, max_tokens=[100_000] * len(prompts))
        self.index = {u: i for i, u in enumerate(uids)}
        self.tokens = [[] for _ in prompts]
        while not all(self.tokens):  # prefill: every row has its first token
            self.round()

    def round(self) -> None:
        _, responses = self.gen.next()
        for r in responses:
            self.tokens[self.index[r.uid]].append(r.token)


class Served:
    """The server's batcher (``specdec serve --draft-type none``'s worker, fp32) on this
    thread, a round being ``run_once`` and the event loop's turn, as ``host-work/profile_batch``
    drives it; end-of-sequence ignored so no row finishes."""

    def __init__(self, draft: str, prompts):
        cfg = ServerConfig(model="smollm2-135m", dtype="float32", save_interval=0, queue_size=128)
        if draft != "default":  # default: the server's own settings
            cfg = replace(cfg, speculation=replace(cfg.speculation, draft_type=draft))
        self.worker = InferenceWorker(cfg, Metrics())
        self.worker.load()
        self.worker.tokenizer.eos_token_ids = set()  # no row finishes: every round has N rows
        self.loop, self.jobs = asyncio.new_event_loop(), []
        for p in prompts:
            job = Job(GenRequest(prompt_ids=p, gen=Generation(max_tokens=100_000, draft=cfg.speculation)),
                      self.loop)
            assert self.worker.queue.put_nowait(job)
            self.jobs.append(job)
        self.tokens = [[] for _ in prompts]
        while not all(self.tokens):
            self.round()

    def round(self) -> None:
        self.worker.batcher.run_once(0)
        self.loop.run_until_complete(asyncio.sleep(0))
        for i, j in enumerate(self.jobs):
            while not j.events.empty():
                e = j.events.get_nowait()
                if hasattr(e, "token"):
                    self.tokens[i].append(e.token)


class Capped:
    """A runner under the server's mlx buffer-cache limit (``kv_budget.CACHE_LIMIT``, set by
    ``set_limits`` at server start) instead of mlx's default (its memory limit)."""

    def __init__(self, runner, limit: int):
        self.runner, self.limit, self.tokens = runner, limit, runner.tokens

    def round(self) -> None:
        default = mx.set_cache_limit(self.limit)  # returns the limit it replaces
        try:
            self.runner.round()
        finally:
            mx.set_cache_limit(default)


def timed(runner, steps: int) -> tuple[float, float, float]:
    """Per round: calling-thread CPU, wall, whole-process CPU (every thread, kernel time too)."""
    c0, t0, p0 = time.thread_time(), time.perf_counter(), os.times()
    for _ in range(steps):
        runner.round()
    p1 = os.times()
    return ((time.thread_time() - c0) / steps, (time.perf_counter() - t0) / steps,
            (p1.user + p1.system - p0.user - p0.system) / steps)


def main() -> None:
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    print("dtype", model.layers[0].self_attn.q_proj.weight.dtype, "load", os.getloadavg()[0], flush=True)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in short_questions(64)[:N]]
    runners = {"ours": Ours(model, prompts), "mlx_lm": Theirs(model, prompts)}
    if CAPPED:  # both again under the server's buffer-cache limit
        runners["ours-capped"] = Capped(runners["ours"], CACHE_LIMIT)
        runners["mlx_lm-capped"] = Capped(runners["mlx_lm"], CACHE_LIMIT)
    for draft in DRAFTS:  # the server's rounds (its own model load)
        runners[f"served-{draft}"] = Served(draft, prompts)
    for name, r in runners.items():  # warm, then one round's graph counted
        timed(r, 4)
        mx.reset_peak_memory()
        cached = mx.get_cache_memory()
        r.round()  # what one round allocates and frees: the buffer cache reuses it, under its limit
        print(f"{name:7s} mlx buffer cache {cached >> 20} MiB before a round, {mx.get_cache_memory() >> 20} "
              f"after; peak in use {mx.get_peak_memory() >> 20} MiB", flush=True)
        GRAPHS.clear()
        counting(True)
        r.round()
        counting(False)
        ops = sum(GRAPHS, Counter())
        OPS[name] = ops
        print(f"{name:7s} ops handed to async_eval in one round: {sum(ops.values())} "
              f"({len(GRAPHS)} calls)", flush=True)
    for name, ops in OPS.items():
        if name != "mlx_lm":
            diff = {k: ops[k] - OPS["mlx_lm"][k] for k in ops | OPS["mlx_lm"] if ops[k] != OPS["mlx_lm"][k]}
            print(f"{name} - mlx_lm, per op: {diff}", flush=True)
    results = {name: [] for name in runners}
    for rep in range(REPEATS):
        for name, r in runners.items():
            cpu, wall, proc = timed(r, STEPS)
            results[name].append((cpu, wall, proc))
            print(f"repeat {rep} {name:7s} calling-thread CPU {1000 * cpu:5.1f} ms a round "
                  f"({1000 * cpu / N:4.2f} ms a token), process CPU {1000 * proc:5.1f}, wall "
                  f"{1000 * wall:5.1f} ms a round", flush=True)
    for name, rs in results.items():
        cpu, wall, proc = (sorted(x)[len(x) // 2] for x in zip(*rs))
        print(f"median {name:7s} calling-thread CPU {1000 * cpu:5.1f} ms a round, process CPU "
              f"{1000 * proc:5.1f}, wall {1000 * wall:5.1f} ms a round")
    b = runners["mlx_lm"].tokens
    for name, r in runners.items():
        same = sum(x[: min(len(x), len(y))] == y[: min(len(x), len(y))] for x, y in zip(r.tokens, b))
        print(f"{name}: rows whose tokens agree with mlx_lm's (over the shorter): {same}/{N}")


if __name__ == "__main__":
    main()
