"""The server's WeDLM scheduler in process (issue #37): a real ``InferenceWorker`` with
``--decoder wedlm`` on the tiny checkpoint streams a job's tokens step by step, ends a
cancelled job with ``cancelled``, and refuses what the decoder cannot do with a 400."""

from __future__ import annotations

import asyncio

import pytest

from specdec.core.sampling import SamplingParams
from specdec.core.wedlm import WedlmSettings
from specdec.decode.wedlm import wedlm_stream
from specdec.decode.generation import Generation
from specdec.loader.wedlm import load_wedlm
from specdec.server.config import ServerConfig
from specdec.server.http.errors import APIError
from specdec.server.engine.events import DoneEvent, GenRequest, Job, TokenEvent
from specdec.server.http.metrics import Metrics
from specdec.server.engine.worker import InferenceWorker
from decode.test_wedlm import write_checkpoint

IDS = [5, 6, 7, 8, 9, 10]


def gen(**kw):
    return GenRequest(prompt_ids=IDS, gen=Generation(**{"max_tokens": 12, **kw}))


async def events(worker, request, cancel_after=None):
    job = Job(request, asyncio.get_running_loop())
    worker.submit(job)
    out = []
    while True:
        e = await asyncio.wait_for(job.events.get(), 120)
        out.append(e)
        if isinstance(e, DoneEvent):
            return out
        if cancel_after is not None and len(out) == cancel_after:
            worker.cancel(job)


def test_worker_streams_cancels_and_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    d = str(write_checkpoint(tmp_path))
    cfg = ServerConfig(model=d, decoder="wedlm", wedlm_window=4, entropy_threshold=2.0,
                       save_interval=0)
    worker = InferenceWorker(cfg, Metrics())
    worker.start()
    try:
        ckpt = load_wedlm(d)
        want = list(wedlm_stream(ckpt.model, IDS, WedlmSettings(270, 4, 2.0), max_tokens=12,
                                 eos=ckpt.tokenizer.eos_token_ids))
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
