"""The server's parts without a server: the shared memory's files, the job queue, and
top-k log-probabilities in the engine."""

from __future__ import annotations

import asyncio
import threading

import pytest
from conftest import cached_tiny

from specdec.drafters.ngram_mod import NgramModTable, tokenizer_fingerprint
from specdec.server.engine.memory import SharedMemory
from specdec.drafters import DraftSpec
from specdec.decode.generation import Generation
from specdec.server.engine.events import DoneEvent, GenRequest, Job, JobQueue, TokenEvent, coalesced


def test_shared_memory_files(tmp_path, smollm):
    tok = smollm[1]
    path = str(tmp_path / "mem")
    mem = SharedMemory.open(path, tok, DraftSpec("suffix", suffix_history=1000))
    assert not mem.save()  # nothing changed: nothing written
    mem.commit(list(range(100, 160)))
    assert mem.save() and not mem.dirty
    stale = tmp_path / ".mem.staging"
    stale.write_bytes(b"half a file")
    again = SharedMemory.open(path, tok, DraftSpec("suffix", suffix_history=1000))
    assert not stale.exists() and again.table.used == mem.table.used
    assert list(again.history.docs) == [list(range(100, 160))]
    NgramModTable(tokenizer_fingerprint="other").save(path)
    with pytest.raises(ValueError, match="--memory-file"):
        SharedMemory.open(path, tok, DraftSpec("suffix", suffix_history=1000))
    with pytest.raises(ValueError, match="not writable|does not exist"):
        SharedMemory.open(str(tmp_path / "missing-dir" / "mem"), tok, DraftSpec("suffix", suffix_history=1000))
    assert tokenizer_fingerprint(tok) == again.fingerprint


class CountingLoop(asyncio.SelectorEventLoop):
    """A real event loop that counts the cross-thread wakes it is sent."""

    wakes = 0

    def call_soon_threadsafe(self, *args, **kw):
        self.wakes += 1
        return super().call_soon_threadsafe(*args, **kw)


def test_a_rounds_events_reach_the_loop_in_one_wake_and_in_order():
    """Inside ``coalesced`` (a batcher round) the worker thread's events for every job go
    in one wake of the loop at the block's end, each job's in the order emitted (a done
    event after its tokens); outside it each event is its own wake."""
    loop = CountingLoop()
    try:
        jobs = [Job(GenRequest([1], Generation(max_tokens=2)), loop) for _ in range(3)]

        def a_round():
            with coalesced():
                for t in (7, 8):
                    for j in jobs:
                        j.emit(TokenEvent(str(t), t))
                with coalesced():  # nested: sent with the outer block
                    jobs[0].emit(DoneEvent("length"))
                assert loop.wakes == 0

        worker = threading.Thread(target=a_round)
        worker.start()
        worker.join()
        assert loop.wakes == 1 and all(j.events.empty() for j in jobs)
        loop.run_until_complete(asyncio.sleep(0))
        got = [[getattr(e, "token", None) or e.finish_reason for e in _drained(j)] for j in jobs]
        assert got == [[7, 8, "length"], [7, 8], [7, 8]]
        jobs[1].emit(DoneEvent("length"))
        jobs[2].emit(DoneEvent("length"))
        assert loop.wakes == 3
    finally:
        loop.close()


def _drained(job):
    out = []
    while not job.events.empty():
        out.append(job.events.get_nowait())
    return out


def test_job_queue_bounded_and_withdrawable():
    loop = asyncio.new_event_loop()
    try:
        q = JobQueue(2)
        jobs = [Job(GenRequest([1], Generation(max_tokens=1)), loop) for _ in range(3)]
        assert q.put_nowait(jobs[0]) and q.put_nowait(jobs[1]) and not q.put_nowait(jobs[2])
        assert q.remove(jobs[0]) and not q.remove(jobs[0])
        assert q.put_nowait(jobs[2])  # the withdrawn job's place
        assert q.get(0.01) is jobs[1] and q.get(0.01) is jobs[2] and q.get(0.01) is None
    finally:
        loop.close()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_top_logprobs_plain_and_speculative(temperature):
    from specdec.drafters import NgramDrafter
    from specdec.engine import token_stream
    from specdec.core.sampling import SamplingParams

    model = cached_tiny("llama")
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    runs = {}
    for name, drafter in (("plain", None), ("spec", NgramDrafter(1, 3))):
        runs[name] = list(token_stream(model, prompt, drafter=drafter, max_tokens=12,
                                       top_logprobs=4, sampling=SamplingParams(temperature, seed=3)))
    for e in runs["plain"] + runs["spec"]:
        assert len(e.top) == 4 and [lp for _, lp in e.top] == sorted((lp for _, lp in e.top), reverse=True)
        if temperature == 0:
            assert e.top[0] == (e.token, pytest.approx(e.logprob, abs=1e-5))
        elif e.token in dict(e.top):
            assert dict(e.top)[e.token] == pytest.approx(e.logprob, abs=1e-5)
    if temperature == 0:  # same tokens, same distributions at every position
        assert [e.token for e in runs["plain"]] == [e.token for e in runs["spec"]]
        for a, b in zip(runs["plain"], runs["spec"]):
            assert [t for t, _ in a.top] == [t for t, _ in b.top]
            assert [lp for _, lp in a.top] == pytest.approx([lp for _, lp in b.top], abs=1e-4)
    assert runs["plain"][0].top is not None
    assert all(e.top is None for e in token_stream(model, prompt, max_tokens=3))  # off by default
