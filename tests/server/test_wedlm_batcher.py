"""WeDLM's lossy decoder as rows of the server's one scheduler, the batcher (issues #37,
#45), in process on the tiny random-weight WeDLM checkpoint: a real ``InferenceWorker`` with
``--decoder wedlm`` streams a job's tokens step by step, ends a cancelled job with
``cancelled`` and refuses what the decoder cannot do with a 400; driven round by round, its
``Batcher`` admits one job at a time, ends a failing job with its own 500 and serves the
next, ends a job cancelled mid-decode or cut by ``end_all`` (the drain deadline), and hands
an emptied batch's buffers back."""

from __future__ import annotations

import asyncio

import mlx.core as mx
import pytest

from specdec.core.sampling import SamplingParams
from specdec.core.wedlm import WedlmSettings
from specdec.decode.wedlm import wedlm_stream
from specdec.decode.generation import Generation
from specdec.loader.wedlm import load_wedlm
from specdec.server.config import ServerConfig
from specdec.server.http.errors import APIError
from specdec.server.engine.batcher import Batcher
from specdec.server.engine.admission import enqueue
from specdec.server.engine.events import DoneEvent, ErrorEvent, GenRequest, Job, TokenEvent
from specdec.server.http.metrics import Metrics
from specdec.server.engine.worker import InferenceWorker
from decode.test_wedlm import write_checkpoint

IDS = [5, 6, 7, 8, 9, 10]


def gen(**kw):
    return GenRequest(prompt_ids=IDS, gen=Generation(**{"max_tokens": 12, **kw}))


async def events(worker, request, cancel_after=None):
    job = Job(request, asyncio.get_running_loop())
    enqueue(worker.cfg, worker, job)
    out = []
    while True:
        e = await asyncio.wait_for(job.events.get(), 120)
        out.append(e)
        if isinstance(e, DoneEvent):
            return out
        if cancel_after is not None and len(out) == cancel_after:
            worker.cancel(job)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny checkpoint's directory and the library decoder's greedy tokens for ``IDS``."""
    d = str(write_checkpoint(tmp_path_factory.mktemp("wedlm")))
    ckpt = load_wedlm(d)
    want = list(wedlm_stream(ckpt.model, IDS, WedlmSettings(270, 4, 2.0), max_tokens=12,
                             eos=ckpt.tokenizer.eos_token_ids))
    return d, want


def config(d):
    return ServerConfig(model=d, decoder="wedlm", wedlm_window=4, entropy_threshold=2.0,
                        save_interval=0)


def test_worker_streams_cancels_and_refuses(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    d, want = checkpoint
    worker = InferenceWorker(config(d), Metrics())
    worker.start()
    try:
        got = asyncio.run(events(worker, gen()))
        assert [e.token for e in got if isinstance(e, TokenEvent)] == want
        assert got[-1].usage["lossless"] is False and worker.busy == 0
        cut = asyncio.run(events(worker, gen(max_tokens=64), cancel_after=1))
        assert cut[-1].finish_reason == "cancelled" and len(cut) < 64
        with pytest.raises(APIError) as e:
            asyncio.run(events(worker, gen(sampling=SamplingParams(temperature=0.5, top_p=0.5))))
        assert e.value.status == 400 and "top_p" in e.value.message
    finally:
        worker.stop()


def test_jobs_go_through_the_batchers_paths(checkpoint, tmp_path, monkeypatch):
    """The scheduler is the ``Batcher``: one job at a time (the next waits in the queue), a
    job whose decoder fails (an empty prompt) gets its own 500 and the next one the library's
    tokens, a job cancelled mid-decode ends ``cancelled``, ``end_all`` ends a running one
    with its error, and each emptied batch hands mlx's buffers back."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    d, want = checkpoint
    worker = InferenceWorker(config(d), Metrics())
    worker.load()  # no inference thread: this test runs the rounds
    batcher, loop, seen = worker.batcher, asyncio.new_event_loop(), {}
    assert isinstance(batcher, Batcher) and worker.max_batch == 1

    def submit(ids, max_tokens):
        job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=max_tokens)), loop)
        assert worker.queue.put_nowait(job)
        seen[job] = []
        return job

    def round_():
        batcher.run_once(0)
        loop.run_until_complete(asyncio.sleep(0))  # the jobs' emit callbacks run
        for job, got in seen.items():
            while not job.events.empty():
                got.append(job.events.get_nowait())

    failing, good = submit([], 8), submit(IDS, 12)
    round_()
    assert [type(e) for e in seen[failing]] == [ErrorEvent] and seen[failing][0].error.status == 500
    assert good.state == "queued"  # one at a time: it waits while the failing job runs
    while good.state != "finished":
        round_()
        assert len(batcher) <= 1
    assert [e.token for e in seen[good] if isinstance(e, TokenEvent)] == want
    assert seen[good][-1].usage["lossless"] is False and mx.get_cache_memory() == 0
    cut, waiting = submit(IDS, 64), submit(IDS, 64)
    round_()
    assert cut.state == "running" and waiting.state == "queued" and mx.get_cache_memory() > 0
    worker.cancel(cut)
    round_()
    assert seen[cut][-1].finish_reason == "cancelled" and len(batcher) == 0
    round_()
    assert waiting.state == "running"
    batcher.end_all(APIError(503, "shutting down", code="shutting_down"))
    round_()
    assert seen[waiting][-1].error.status == 503 and len(batcher) == 0 and worker.busy == 0
    assert mx.get_cache_memory() == 0
    loop.close()
