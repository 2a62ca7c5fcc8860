"""Continuous batching on a real `specdec serve` (SmolLM2-135M, up to 3 requests decoding
together, 5 waiting): a mixed batch (drafters, k, a stop string, a client leaving
mid-stream, requests joining as others finish, a conversation's second turn reusing the
prefix cache) gives every request exactly what plain decoding gives it alone; a full
batch plus a full queue answers 503."""

from __future__ import annotations

import threading

import httpx
import pytest
from conftest import real_model
from serverproc import LONG, MODEL, Server, raw_request, wait_for

from specdec import generate
from specdec.prompts import parity_prompts, short_questions

pytestmark = pytest.mark.slow  # a server process on a real model

P = parity_prompts()

@pytest.fixture(scope="module")
def server():
    s = Server("--max-batch", "3", "--queue-size", "5")
    yield s
    s.stop()


def plain(messages, max_tokens, stop=None):
    model, tok = real_model(MODEL)
    return generate(model, tok, messages, drafter=None, max_tokens=max_tokens, stop=stop).text


def chat(server, messages, max_tokens, spec, stop=None):
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "speculative": spec}
    if stop:
        body["stop"] = stop
    r = httpx.post(server.base + "/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def user(text):
    return [{"role": "user", "content": text}]


def test_mixed_batch_equals_each_request_alone(server):
    edit, story, doc = user(P["code_fnmatch_rename"]), user(P["demo_colorsys"]), user(P["code_textwrap_doc"])
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
    wait_for(lambda: server.metric("specdec_generated_tokens_total") > 8, what="tokens")
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


def test_tree_budget_is_refused_while_batching(server):
    r = httpx.post(server.base + "/v1/completions", json={
        "model": MODEL, "prompt": "Hi", "max_tokens": 2, "speculative": {"draft_tree_budget": 8}})
    assert r.status_code == 400 and "--max-batch 1" in r.json()["error"]["message"]
