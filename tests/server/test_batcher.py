"""The batcher's scheduling (``specdec.server.engine.batcher``).

In process (fast): a real ``InferenceWorker`` on SmolLM2-135M, its ``Batcher`` driven round
by round on the test thread: at most ``max_batch`` rows, FIFO admission as slots free, the
KV budget holding a job back, a cancelled job freeing its slot, no drafts while a prompt
waits for its prefill, and every job's tokens equal to plain greedy decoding alone.
On a real `specdec serve` (slow; up to 3 requests decoding together, 5 waiting): a mixed
batch (drafters, k, a stop string, a client leaving mid-stream, requests joining as others
finish, a conversation's second turn reusing the prefix cache) gives every request exactly
what plain decoding gives it alone; a full batch plus a full queue answers 503."""

from __future__ import annotations

import asyncio
import threading

import httpx
import mlx.core as mx
import pytest
from conftest import plain_reference
from serverproc import LONG, MODEL, Server, raw_request, wait_for

from specdec import generate
from specdec.decode.generation import Generation
from specdec.drafters.spec import DraftSpec
from specdec.prompts import parity_prompts, short_questions
from specdec.server.engine.batcher import Batcher
from specdec.server.engine.prefill import CHUNK
from specdec.server.config import ServerConfig
from specdec.server.engine.events import DoneEvent, ErrorEvent, GenRequest, Job, TokenEvent
from specdec.server.engine.kv_budget import Footprint, KVBudget
from specdec.server.http.metrics import Metrics
from specdec.server.engine.worker import InferenceWorker

P = parity_prompts()

@pytest.fixture(scope="module")
def server():  # a server process on a real model: each test using it is slow
    s = Server("--max-batch", "3", "--queue-size", "5")
    yield s
    s.stop()


def plain(messages, max_tokens, stop=None):
    """Plain greedy decoding alone, once per session per arguments (``plain_reference``)."""
    kw = {"stop": tuple(stop)} if stop else {}  # a tuple: the reference's key is hashed
    return plain_reference(MODEL, messages, max_tokens, **kw).text


def chat(server, messages, max_tokens, spec, stop=None):
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "speculative": spec}
    if stop:
        body["stop"] = stop
    r = httpx.post(server.base + "/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def user(text):
    return [{"role": "user", "content": text}]


@pytest.mark.slow
def test_mixed_batch_equals_each_request_alone(server):
    # prompts of 120-190 tokens: the demo's and textwrap's (476, 449) were prefilled twice
    # each, on the server and for the reference, for nothing a shorter one does not show
    edit, story, doc = user(P["code_fnmatch_rename"]), user(P["code_shlex_quote"]), user(P["code_fnmatch_translate"])
    words = plain(story, 20).split()
    stop = words[len(words) // 2]  # a stop string inside the answer
    cases = {  # name: (messages, max tokens, speculative options, stop)
        "edit": (edit, 24, {"draft_type": "suffix"}, None),
        "story": (story, 20, {"draft_type": "ngram", "num_draft_tokens": 2}, [stop]),
        "count": (user("Count from 1 to 20, separated by commas."), 16, {"draft_type": "none"}, None),
        "doc": (doc, 20, {"draft_type": "suffix", "num_draft_tokens": 6}, None),
    }
    got, first_done = {}, threading.Event()

    def run(name):
        msgs, n, spec, stop_ = cases[name]
        got[name] = chat(server, msgs, n, spec, stop_)
        if name == "edit":
            first_done.set()

    cancelled = server.metric("specdec_requests_cancelled_total")
    leaver = raw_request(server.port, LONG)  # takes a row, then leaves mid-stream
    threads = [threading.Thread(target=run, args=(n,)) for n in cases]
    for t in threads:
        t.start()  # 1 + 4 requests for 3 rows: two wait and join as rows free up
    # four prefills come first: a loaded machine (a CI host) may take longer than the 30 s default
    wait_for(lambda: server.metric("specdec_generated_tokens_total") > 8, timeout=180, what="tokens")
    leaver.close()
    first_done.wait(600)
    edit_text = got["edit"]["choices"][0]["message"]["content"]
    turn2 = edit + [{"role": "assistant", "content": edit_text},
                    {"role": "user", "content": "Now add a docstring."}]
    cases["turn2"] = (turn2, 16, {"draft_type": "suffix"}, None)
    run("turn2")  # joins the running batch; starts like the finished "edit" request
    for t in threads:
        t.join(600)
    for name, (msgs, n, _, stop_) in cases.items():
        assert got[name]["choices"][0]["message"]["content"] == plain(msgs, n, stop_), name
    assert got["story"]["choices"][0]["finish_reason"] == "stop"
    assert got["turn2"]["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
    assert sum(got[n]["usage"]["accepted_tokens"] for n in cases) > 0  # rows speculated
    assert server.metric("specdec_requests_cancelled_total") == cancelled + 1
    wait_for(lambda: server.health()["running"] == 0, timeout=20, what="an idle server")


@pytest.mark.slow
def test_short_requests_arriving_together_equal_each_alone(server):
    """Short questions sent at once (prefilled together when they arrive within one
    scheduling round, with their shared system prompt from the prefix cache): each
    answer equals plain decoding alone."""
    cases = [(user(q), 24, {"draft_type": d}) for q, d in zip(short_questions(3), ("none", "suffix", "ngram"))]
    got = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, chat(server, *cases[i])))
               for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for i, (msgs, n, _) in enumerate(cases):
        assert got[i]["choices"][0]["message"]["content"] == plain(msgs, n), i


@pytest.mark.slow
def test_prompts_arriving_together_share_a_prefill(server):
    """Requests that arrive together and start with the same long document: the first to
    finish its prefill hands a fork of its cache to the others still waiting (the prefix
    store only hears of a cache when its request finishes), so they report hundreds of
    cached prompt tokens; every answer still equals plain decoding alone."""
    doc = P["code_textwrap_doc"]
    cases = [(user(doc), 16, {"draft_type": "none"}), (user(doc), 16, {"draft_type": "suffix"}),
             (user(doc + " Keep each comment short."), 16, {"draft_type": "suffix"})]
    got = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, chat(server, *cases[i])))
               for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for i, (msgs, n, _) in enumerate(cases):
        assert got[i]["choices"][0]["message"]["content"] == plain(msgs, n), i
    cached = sorted(got[i]["usage"]["prompt_tokens_details"]["cached_tokens"] for i in got)
    prompt = got[0]["usage"]["prompt_tokens"]
    assert prompt > 300 and cached[-1] > prompt - 20 and cached[-2] > prompt - 40, (cached, prompt)


@pytest.mark.slow
def test_full_batch_and_full_queue_answer_503(server):
    socks = [raw_request(server.port, LONG) for _ in range(3)]
    wait_for(lambda: server.health()["running"] == 3, what="3 running rows")
    socks += [raw_request(server.port, LONG) for _ in range(5)]
    wait_for(lambda: server.health()["queue_depth"] == 5, what="5 waiting requests")
    full = httpx.post(server.base + "/v1/completions", json={**LONG, "stream": False, "max_tokens": 2})
    assert full.status_code == 503 and full.json()["error"]["code"] == "queue_full"
    for s in socks:
        s.close()
    wait_for(lambda: server.health()["running"] == 0 and server.health()["queue_depth"] == 0,
             timeout=30, what="every request to leave")


@pytest.mark.slow
def test_tree_budget_is_refused_while_batching(server):
    r = httpx.post(server.base + "/v1/completions", json={
        "model": MODEL, "prompt": "Hi", "max_tokens": 2, "speculative": {"draft_tree_budget": 8}})
    assert r.status_code == 400 and "--max-batch 1" in r.json()["error"]["message"]


# -- the scheduling in process: a real worker's batcher, driven round by round ------------


SPEC = DraftSpec("suffix", num_draft_tokens=2, gate=False)  # drafts at every step, cheaply


@pytest.fixture(scope="module")
def worker():
    """A loaded ``InferenceWorker`` whose inference thread never starts: each test gives it
    a fresh ``Batcher`` (and its max_batch, KV budget) and calls ``run_once`` itself."""
    w = InferenceWorker(ServerConfig(model=MODEL, save_interval=0, max_batch=4), Metrics())
    w.load()
    return w


class Rounds:
    """Jobs through ``worker``'s new batcher, one ``run_once`` per round, on this thread."""

    def __init__(self, worker, max_batch, kv=None):
        worker.max_batch, worker.kv = max_batch, kv
        worker.batcher = Batcher(worker, None)  # no cost curve: rows draft unpriced
        self.worker, self.batcher = worker, worker.batcher
        self.loop = asyncio.new_event_loop()
        self.events: dict[Job, list] = {}
        self.admitted: list[Job] = []  # in the order they left the queue

    def submit(self, ids, max_tokens, spec=SPEC) -> Job:
        job = Job(GenRequest(prompt_ids=ids, gen=Generation(max_tokens=max_tokens, draft=spec), store=False),
                  self.loop)  # store=False: no job drafts from an earlier one's answer
        assert self.worker.queue.put_nowait(job)
        self.events[job] = []
        return job

    def round(self) -> None:
        queued = [j for j in self.events if j.state == "queued"]
        self.batcher.run_once(0)
        self.admitted += [j for j in queued if j.state != "queued"]
        self.loop.run_until_complete(asyncio.sleep(0))  # the jobs' emit callbacks run
        for job, got in self.events.items():
            while not job.events.empty():
                got.append(job.events.get_nowait())

    def until(self, done, check=lambda: None, rounds=400) -> None:
        for _ in range(rounds):
            if done():
                return
            self.round()
            check()
        raise AssertionError("the batcher did not get there in %d rounds" % rounds)

    def finish(self, check=lambda: None) -> None:
        self.until(lambda: all(j.state in ("finished", "cancelled") for j in self.events), check)
        self.loop.close()

    def tokens(self, job) -> list[int]:
        return [e.token for e in self.events[job] if isinstance(e, TokenEvent)]

    def done(self, job) -> DoneEvent:
        assert isinstance(self.events[job][-1], DoneEvent), self.events[job][-1]
        return self.events[job][-1]


def chat_ids(worker, text):
    return worker.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                add_generation_prompt=True)


_greedy: dict = {}
REF_TOKENS = 12  # the longest job here: a prompt's reference is decoded once, to this length


def greedy(worker, ids, max_tokens):
    """Plain greedy decoding of ``ids`` alone: its first ``max_tokens`` tokens."""
    assert max_tokens <= REF_TOKENS
    if tuple(ids) not in _greedy:
        _greedy[tuple(ids)] = generate(worker.model, worker.tokenizer, list(ids), drafter=None,
                                       max_tokens=REF_TOKENS).tokens
    return _greedy[tuple(ids)][:max_tokens]


def test_at_most_max_batch_rows_admitted_first_in_first_out(worker):
    # three jobs for two rows: the third waits for the first to leave (a fourth added only
    # a prefill and a reference; the KV budget and cancel tests admit in order too)
    run = Rounds(worker, max_batch=2)
    lengths = [4, 8, 6]
    jobs = [run.submit(chat_ids(worker, q), n) for q, n in zip(short_questions(3), lengths)]
    sizes = []

    def check():
        sizes.append(worker.busy)
        assert worker.busy <= 2, worker.busy

    run.finish(check)
    assert max(sizes) == 2  # the cap was reached, not merely respected
    assert run.admitted == jobs
    for job, n in zip(jobs, lengths):
        assert run.done(job).finish_reason in ("length", "stop")
        assert run.tokens(job) == greedy(worker, job.request.prompt_ids, n)


def test_the_request_value_reaches_the_row_unchanged(worker):
    """#45: the batcher passes the job's ``Generation`` itself to its ``Request`` (no field
    re-spelled on the way), and the row drafts the spec's k: one value, one road."""
    run = Rounds(worker, max_batch=1)
    spec = DraftSpec("ngram", num_draft_tokens=3, gate=False)
    job = run.submit(chat_ids(worker, short_questions(1)[0]), 2, spec)
    run.round()
    (a,) = run.batcher.prefilling or run.batcher.running
    assert a.req.gen is job.request.gen and a.req.row().k == 3 == a.req.k
    run.finish()
    assert len(run.tokens(job)) <= 2
    # and a request's cost gate carries what its tenant's gates learnt: ``drafter_for`` hands
    # it ``learnt_for(req)`` (tests/server/test_tenants.py checks the partition itself)
    curve, kept = {L: 0.01 * (1 + 0.1 * L) for L in range(1, 5)}, worker.curve
    worker.curve = curve  # known: the gate is on (k = 3 prices blocks 1..4)
    try:
        alice, bob = (GenRequest([1], Generation(draft=DraftSpec("suffix", num_draft_tokens=3)), t)
                      for t in ("alice", "bob"))
        gate = worker.drafter_for(alice)
        assert gate.memory is worker.learnt_for(alice).on(curve) is not worker.learnt_for(bob).on(curve)
    finally:
        worker.curve = kept


def test_a_job_past_the_kv_budget_waits_for_a_row_to_leave(worker):
    ids = [chat_ids(worker, q) for q in short_questions(3)]
    row = max(map(len, ids)) + 8
    fp = Footprint.measure(worker.model)
    kv = KVBudget(int(2.5 * fp.row_bytes(row)), fp)  # two rows of these jobs, not three
    run = Rounds(worker, max_batch=4, kv=kv)
    first, second, third = [run.submit(p, n) for p, n in zip(ids, (4, 8, 8))]
    seen = []

    def check():
        seen.append(worker.busy)
        assert worker.busy <= 2 and worker.kv_reserved <= kv.budget, (worker.busy, worker.kv_reserved)
        if third.state != "queued":
            assert "finished" in (first.state, second.state)

    run.until(lambda: third.state != "queued", check)
    run.finish(check)
    assert max(seen) == 2 and run.admitted == [first, second, third]
    for job in (first, second, third):
        assert run.tokens(job) == greedy(worker, job.request.prompt_ids, job.request.gen.max_tokens)


def test_a_cancelled_job_frees_its_slot_and_the_others_are_unchanged(worker):
    run = Rounds(worker, max_batch=2)
    qs = short_questions(4)
    leaver, stays, waits, gone = [run.submit(chat_ids(worker, q), n)
                                  for q, n in zip(qs, (12, 10, 6, 6))]
    worker.cancel(gone)  # left while queued: it never runs
    run.until(lambda: len(run.tokens(leaver)) >= 2)
    assert waits.state == "queued" and stays.state == "running"
    worker.cancel(leaver)
    run.until(lambda: waits.state != "queued")
    assert stays.state == "running"  # the cancelled row's slot, not a finished one's
    run.finish()
    assert run.done(leaver).finish_reason == "cancelled" and run.done(gone).finish_reason == "cancelled"
    assert run.tokens(gone) == [] and run.admitted == [leaver, stays, waits]
    want = greedy(worker, leaver.request.prompt_ids, 12)
    assert run.tokens(leaver) == want[:len(run.tokens(leaver))] and len(run.tokens(leaver)) < 12
    for job in (stays, waits):
        assert run.tokens(job) == greedy(worker, job.request.prompt_ids, job.request.gen.max_tokens)


def test_no_drafts_while_a_prompt_waits_for_its_prefill(worker):
    run = Rounds(worker, max_batch=2)
    ngram = DraftSpec("ngram", num_draft_tokens=4, gate=False)
    counting = run.submit(chat_ids(worker, "Count from 1 to 60, separated by commas."), 12, ngram)
    run.until(lambda: worker.busy and worker.batcher.running)
    stats = worker.batcher.running[0].req.stats
    run.until(lambda: stats.draft_steps >= 2)  # alone, it drafts
    long_ids = chat_ids(worker, "Summarise: " + " ".join(["the cat sat on the mat"] * 88))
    assert len(long_ids) > 2 * CHUNK  # several rounds of prefill
    late = run.submit(long_ids, 2)
    waiting = 0
    while late.state == "queued" or worker.batcher.prefilling:
        drafts, tokens = stats.draft_steps, len(run.tokens(counting))
        run.round()
        if worker.batcher.prefilling:  # this round's step ran while a prompt waited
            waiting += 1
            assert stats.draft_steps == drafts
            # it kept decoding (the first plain step may be pipelined: it lands a round later)
            assert len(run.tokens(counting)) > tokens or waiting == 1
    assert waiting >= 2
    run.finish()
    assert run.tokens(counting) == greedy(worker, counting.request.prompt_ids, 12)
    assert run.done(late).finish_reason == "length"


def test_a_burst_into_an_idle_batch_is_prefilled_before_its_first_step(worker):
    """A burst's jobs reach the queue a few ms apart, so the first is admitted alone; the
    ones that arrive during its prefill are prefilled in the same round, before the batch's
    first step, so every job's first token comes from that step: none waits for another's
    first step (p50 TTFT at 8 clients). Each answer is still plain greedy decoding's."""
    run = Rounds(worker, max_batch=3)
    qs = short_questions(3)  # their references are the FIFO test's too
    first, later = run.submit(chat_ids(worker, qs[0]), 3), []
    prefill_chunk = run.batcher._prefill_chunk

    def arrivals_meanwhile(a):
        prefill_chunk(a)
        if not later:  # the rest of the burst arrives while the first prompt prefills
            later.extend(run.submit(chat_ids(worker, q), 3) for q in qs[1:])
    run.batcher._prefill_chunk = arrivals_meanwhile
    run.round()
    assert len(later) == 2 and worker.busy == 3 and not run.batcher.prefilling
    assert all(run.tokens(j) for j in [first, *later])  # every first token came from one step
    run.finish()
    for job in [first, *later]:
        assert run.tokens(job) == greedy(worker, job.request.prompt_ids, 3)


def test_a_burst_past_one_chunk_is_prefilled_in_one_forward(worker):
    """Eight short prompts at once (more than one ``CHUNK`` padded) into an idle batch: one
    prefill forward for all of them, and the batch's first step gives each its first token
    (a running batch would take one ``CHUNK`` a round: see the test above)."""
    run = Rounds(worker, max_batch=8)
    jobs = [run.submit(chat_ids(worker, q), 3) for q in short_questions(8)]
    groups: list[int] = []
    together = run.batcher._prefill_together

    def counted(group):
        groups.append(len(group))
        together(group)
    run.batcher._prefill_together = counted
    run.round()
    assert max(len(j.request.prompt_ids) - 1 for j in jobs) * 8 > CHUNK and groups == [8]
    assert all(run.tokens(j) for j in jobs)
    worker.batcher.close()  # the answers: the test above (this one checks the schedule)


def test_a_priced_out_batch_asks_drafters_in_turn_and_every_answer_is_unchanged(worker):
    """Three rows drafting (ungated suffix at k = 8, and the server's default) on a price
    that rules out every block at three rows at the estimates but not at full acceptance
    (``BlockPrice.priced_out``): the batch pipelines plain steps, asking one row's drafter
    a step in turn, and every job's tokens equal plain greedy decoding alone (a row's
    drafter not asked catches up from its context)."""
    run = Rounds(worker, max_batch=3)
    run.batcher.price.reprice(lambda n: 1.0 + n)
    suffix = DraftSpec("suffix", num_draft_tokens=8, gate=False)
    specs = [suffix, worker.cfg.speculation, suffix]
    jobs = [run.submit(chat_ids(worker, q), REF_TOKENS, spec) for q, spec in zip(short_questions(3), specs)]
    run.finish()
    assert run.batcher.batch.probe >= 0  # rows were probed in turn
    for job in jobs:
        assert run.tokens(job) == greedy(worker, job.request.prompt_ids, REF_TOKENS)


@pytest.mark.parametrize("ending", ["finished", "cancelled"])
def test_an_emptied_batch_hands_its_buffers_back(worker, ending):
    """When the last row leaves (finished or cancelled mid-decode), mlx's buffer cache is
    emptied (and glibc's free heap trimmed): a burst's working set does not stay resident
    for good (#34 item 7)."""
    run = Rounds(worker, max_batch=3)
    jobs = [run.submit(chat_ids(worker, q), 6 if ending == "finished" else 400)
            for q in short_questions(3)]
    run.until(lambda: worker.busy == 3 and not worker.batcher.prefilling)
    run.round()
    assert mx.get_cache_memory() > 0  # decoding holds a working set
    if ending == "cancelled":
        for job in jobs:
            job.cancelled.set()
    run.finish()
    assert mx.get_cache_memory() == 0


def random_smollm_head(path, target):
    """A random EAGLE-3 head for SmolLM2-135M written in the published format (a small draft
    vocabulary: ids 0..255 map to themselves), so the server loads it from ``--draft-model``."""
    from specdec.eagle.head import Eagle3Head, HeadConfig
    from specdec.eagle.io import save_head

    cfg = HeadConfig(hidden_size=576, intermediate_size=256, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=49152, draft_vocab_size=256,
                     target_hidden_size=576, aux_layer_ids=(2, 15, 27), rms_norm_eps=1e-5)
    mx.random.seed(5)
    head = Eagle3Head(cfg, target.model.embed_tokens)
    head.t2d = mx.arange(49152) < 256
    save_head(head, path)
    return str(path)


@pytest.mark.slow  # a second worker loads the model; batched heads in the fast suite: tests/drafters/test_eagle.py
def test_eight_requests_drafting_with_an_eagle_head_each_equal_their_solo_answer(worker, tmp_path):
    """``specdec serve --draft-type eagle --draft-model DIR``: the worker loads the head (the
    target's embeddings), each request gets its own drafter over it; batched rows verify
    together and each row's head drafts from its own features (prefilled together too)."""
    import argparse

    from specdec.server.cli import add_serve_parser

    head_dir = random_smollm_head(tmp_path / "head", worker.model)
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    cfg = ServerConfig.from_args(parser.parse_args(
        ["serve", "--model", MODEL, "--draft-type", "eagle", "--draft-model", head_dir,
         "--num-draft-tokens", "2", "--no-gate", "--save-interval", "0", "--max-batch", "8"]))
    eagle = InferenceWorker(cfg, Metrics())
    eagle.load()
    assert eagle.head is not None and eagle.draft is None
    run = Rounds(eagle, max_batch=8)
    jobs = [run.submit(chat_ids(worker, q), 4, cfg.speculation) for q in short_questions(8)]
    run.finish()
    for job in jobs:  # a reference another test decoded, else just these 4 tokens
        ids = job.request.prompt_ids
        solo = _greedy.get(tuple(ids)) or generate(worker.model, worker.tokenizer, list(ids), drafter=None,
                                                  max_tokens=4).tokens
        assert run.tokens(job) == solo[:4]
    assert sum(run.done(j).usage["drafted_tokens"] for j in jobs) > 0


def test_a_row_that_fails_to_settle_gets_its_own_error_and_its_batchmates_finish(worker, monkeypatch):
    """Settling a finished row (its prompt cache, the shared memory) may fail (a cache out of
    step, as a rollback bug leaves it): that request gets its error and the row leaving in the
    same round finishes as plain decoding; a raise there left both clients waiting forever
    (seen with a planted recurrent-rewind bug: 16 chats hung for minutes)."""
    from specdec.cache.prompt_cache import PromptCache

    run = Rounds(worker, max_batch=2)
    broken, fine = [run.submit(chat_ids(worker, q), 4, DraftSpec("none")) for q in short_questions(2)]
    settle = PromptCache.settle

    def settle_or_fail(self, sequence):
        if list(sequence[:len(broken.request.prompt_ids)]) == broken.request.prompt_ids:
            raise RuntimeError("prompt cache out of step (planted)")
        settle(self, sequence)

    monkeypatch.setattr(PromptCache, "settle", settle_or_fail)
    states: list[set[str]] = []
    run.finish(lambda: states.append({broken.state, fine.state}))
    assert {"finished", "running"} not in states  # they left the batch in one round
    assert isinstance(run.events[broken][-1], ErrorEvent) and len(run.tokens(broken)) == 4
    assert run.done(fine).finish_reason == "length"
    assert run.tokens(fine) == greedy(worker, fine.request.prompt_ids, 4)
