"""Anthropic's wire as a pure translation, in-process without a model (the app in front of
``test_app.ScriptedWorker``, a word-level tokenizer): the engine renders and tokenizes the
prompt once and fits ``max_tokens`` to the room; the wire's prompt size, count_tokens and
usage are the engine's. The real-client end to end: test_anthropic.py (slow)."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from specdec.core.text import encode_prompt
from specdec.server.config import ServerConfig
from specdec.server.http.app import create_app
from specdec.server.http.metrics import Metrics

from .test_app import ScriptedWorker
from .tiny_api import word_tokenizer

CONTEXT = 40
HI = [{"role": "user", "content": "hi hello hi"}]


def serve(script=("hello", " hi")):
    worker = ScriptedWorker(word_tokenizer(), list(script), context_length=CONTEXT)
    cfg = ServerConfig(model="m", allowed_hosts=("testserver",))
    return TestClient(create_app(cfg, worker, Metrics())), worker


def prompt_ids(worker, messages):
    return encode_prompt(worker.tokenizer, messages, chat=True)


def test_max_tokens_is_fitted_to_the_room_once_by_the_engine():
    client, worker = serve()
    n = len(prompt_ids(worker, HI))
    for asked, want in ((5, 5), (CONTEXT - n, CONTEXT - n), (10_000, CONTEXT - n)):
        r = client.post("/v1/messages", json={"model": "m", "max_tokens": asked, "messages": HI})
        assert r.status_code == 200, r.text
        assert worker.requests[-1].gen.max_tokens == want
        assert worker.requests[-1].prompt_ids == prompt_ids(worker, HI)
        assert r.json()["content"] == [{"type": "text", "text": "hello hi"}]
    assert len(worker.requests) == 3  # one queued request each; nothing tokenized twice


def test_each_request_is_rendered_once():
    """The wire renders nothing itself: one chat-template render per request (the engine's);
    before #45 the Messages wire rendered and tokenized the prompt a second time."""
    client, worker = serve()
    real, renders = worker.tokenizer.apply_chat_template, []
    worker.tokenizer.apply_chat_template = lambda *a, **k: renders.append(1) or real(*a, **k)
    client.post("/v1/messages", json={"model": "m", "max_tokens": 10_000, "messages": HI})
    client.post("/v1/messages", json={"model": "m", "max_tokens": 3, "messages": HI, "stream": True})
    client.post("/v1/messages/count_tokens", json={"model": "m", "messages": HI})
    assert (len(renders), len(worker.requests)) == (3, 2)


def test_a_prompt_that_fills_the_context_is_a_400_not_a_clamp_to_nothing():
    client, worker = serve()
    long = [{"role": "user", "content": "hi " * CONTEXT}]
    r = client.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": long})
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
    assert r.json()["type"] == "error" and worker.requests == []


def test_count_tokens_is_the_size_of_the_prompt_a_request_runs():
    client, worker = serve()
    billing = {"system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"}]}
    for extra in ({}, billing):  # Claude Code's per-run header block is not the prompt
        body = {"model": "m", "messages": HI, **extra}
        count = client.post("/v1/messages/count_tokens", json=body).json()["input_tokens"]
        client.post("/v1/messages", json={**body, "max_tokens": 3})
        assert count == len(worker.requests[-1].prompt_ids) == len(prompt_ids(worker, HI))


def test_the_stream_starts_with_the_engines_prompt_size_and_ends_as_anthropics():
    client, worker = serve()
    r = client.post("/v1/messages", json={"model": "m", "max_tokens": 8, "messages": HI,
                                          "stream": True})
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert events[0]["message"]["usage"]["input_tokens"] == len(worker.requests[-1].prompt_ids)
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "hello hi"
    end = next(e for e in events if e["type"] == "message_delta")
    assert end["delta"]["stop_reason"] == "end_turn"
