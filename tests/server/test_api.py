"""`specdec serve` through the real OpenAI client: outputs, streaming, usage, errors.

One real server process (SmolLM2-135M, suffix drafting, an API key, a 64 KiB body limit)
serves the whole module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from serverproc import MODEL, Server

from specdec.backend import preload_env
from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow  # server processes on a real model

KEY = "test-key-123"
PROMPT = parity_prompts()["code_fnmatch_rename"]  # a code edit: the answer quotes the prompt
N_TOKENS = 32


@pytest.fixture(scope="module")
def server():
    s = Server("--draft-type", "suffix", "--max-body-bytes", "65536", api_key=KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


@pytest.fixture(scope="module")
def cli_reference():
    """What `specdec generate` prints for the same prompt, drafter and length."""
    r = subprocess.run([sys.executable, "-m", "specdec", "generate", "--json", "--prompt", PROMPT,
                        "--max-tokens", str(N_TOKENS), "--draft-type", "suffix"],
                       capture_output=True, text=True, env=preload_env(), timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def chat(client, **kw):
    kw.setdefault("messages", [{"role": "user", "content": PROMPT}])
    return client.chat.completions.create(model=MODEL, **kw)


def assert_usage(u, completion_tokens=None):
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    extra = u.model_extra
    assert 0 <= extra["accepted_tokens"] <= extra["drafted_tokens"]
    if extra["drafted_tokens"]:
        assert extra["acceptance_rate"] == pytest.approx(extra["accepted_tokens"] / extra["drafted_tokens"], abs=1e-4)
    assert extra["mean_acceptance_length"] >= 1.0
    # every step emits >= 1 token; the steps that verified a draft drafted >= 1 each
    assert extra["draft_steps"] <= min(extra["decode_steps"], extra["drafted_tokens"])
    assert (extra["draft_steps"] > 0) == (extra["drafted_tokens"] > 0)
    assert extra["decode_steps"] <= u.completion_tokens + 1
    if completion_tokens is not None:
        assert u.completion_tokens == completion_tokens


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    h = server.health()
    assert h["status"] == "ok" and h["context_length"] == 8192


def test_greedy_chat_equals_specdec_generate(client, cli_reference):
    r = chat(client, max_tokens=N_TOKENS)
    assert r.choices[0].message.content == cli_reference["text"]
    assert r.choices[0].finish_reason == "length"
    assert_usage(r.usage, len(cli_reference["tokens"]))
    assert r.usage.model_extra["accepted_tokens"] > 0  # the edit quotes the prompt


def test_streamed_chat_equals_whole(client, cli_reference):
    parts, finish, usage = [], None, None
    for chunk in chat(client, max_tokens=N_TOKENS, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(parts) == cli_reference["text"] and finish == "length"
    assert_usage(usage, len(cli_reference["tokens"]))


def test_completions_equal_the_python_api(client, smollm):
    import specdec

    prompt = "def fibonacci(n):\n    "
    ref = specdec.generate(*smollm, prompt, drafter="suffix", max_tokens=20, chat=False)
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20)
    assert r.choices[0].text == ref.text
    assert_usage(r.usage, len(ref.tokens))
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=20, stream=True) if c.choices)
    assert streamed == ref.text
    ids = client.completions.create(model=MODEL, prompt=ref.prompt_tokens, max_tokens=20)
    assert ids.choices[0].text == ref.text  # token ids as the prompt


def test_stop_strings(client, cli_reference):
    text = cli_reference["text"]
    stop = "def "  # inside the reference answer
    assert stop in text
    r = chat(client, max_tokens=N_TOKENS, stop=[stop, "never-there"])
    assert r.choices[0].message.content == text[: text.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(
        client, max_tokens=N_TOKENS, stop=stop, stream=True) if c.choices)
    assert streamed == text[: text.index(stop)]


def test_same_seed_same_sample(client):
    # a stateless drafter: the same request gets the same drafts, hence the same draws
    kw = {"messages": [{"role": "user", "content": "Write a poem about rain."}], "max_tokens": 24,
          "temperature": 1.0, "extra_body": {"speculative": {"draft_type": "ngram"}}}
    a = chat(client, seed=7, **kw).choices[0].message.content
    b = chat(client, seed=7, **kw).choices[0].message.content
    c = chat(client, seed=8, **kw).choices[0].message.content
    assert a == b and a != c


def test_logprobs(client):
    r = chat(client, max_tokens=8, logprobs=True, top_logprobs=3)
    items = r.choices[0].logprobs.content
    assert len(items) == r.usage.completion_tokens == 8
    for it in items:
        tops = [t.logprob for t in it.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert it.top_logprobs[0].token == it.token and it.logprob == pytest.approx(tops[0])  # greedy
    c = client.completions.create(model=MODEL, prompt="1, 2, 3,", max_tokens=6, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert all(max(t.values()) == pytest.approx(v) for t, v in zip(lp.top_logprobs, lp.token_logprobs))


def test_speculative_options_and_plain_agree(client, cli_reference):
    plain = chat(client, max_tokens=N_TOKENS, extra_body={"speculative": {"draft_type": "none"}})
    chain = chat(client, max_tokens=N_TOKENS,
                 extra_body={"speculative": {"draft_type": "ngram-mod,ngram", "num_draft_tokens": 8}})
    assert plain.choices[0].message.content == chain.choices[0].message.content == cli_reference["text"]
    assert plain.usage.model_extra["drafted_tokens"] == 0
    assert chain.usage.model_extra["accepted_tokens"] > 0


def error_of(exc_info) -> dict:
    body = exc_info.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_api_key(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.get(server.base + "/v1/models", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base + "/v1", api_key="nope", max_retries=0).models.list()
    assert httpx.get(server.base + "/health").status_code == 200  # open: no key needed


def test_unknown_model_and_path(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert error_of(e)["code"] == "model_not_found" and MODEL in error_of(e)["message"]
    with server.http() as h:
        r = h.get("/v1/nothing")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
        assert h.get("/v1/chat/completions").status_code == 405


def test_oversized_body_413(server):
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 70_000}]}
    with server.http() as h:
        r = h.post("/v1/chat/completions", json=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        payload = json.dumps(big).encode()
        chunked = h.post("/v1/chat/completions", content=iter([payload[:40_000], payload[40_000:]]),
                         headers={"Content-Type": "application/json"})  # no Content-Length
        assert chunked.status_code == 413
        assert h.get("/v1/models").status_code == 200  # the same connection still works


def test_context_length_exceeded(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=8192)
    err = error_of(e)
    assert err["code"] == "context_length_exceeded"
    assert "8192" in err["message"] and "in the messages" in err["message"]


def test_unsupported_values_are_400_with_reasons(client):
    cases = [({"n": 2}, "n=2"), ({"presence_penalty": 2.5}, "presence_penalty"),
             ({"logit_bias": {"999999": 1.0}}, "vocabulary"),
             ({"extra_body": {"speculative": {"draft_type": "magic"}}}, "draft_type"),
             ({"extra_body": {"speculative": {"draft_type": "model"}}}, "--draft-model"),
             ({"messages": []}, "messages"), ({"top_logprobs": 2}, "logprobs")]
    for kw, needle in cases:
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, max_tokens=4, **kw)
        assert needle in error_of(e)["message"], kw


def test_32_concurrent_streams_complete_correctly(server, client):
    msgs = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    ref = chat(client, messages=msgs, max_tokens=12).choices[0].message.content
    results, latencies = {}, []

    def one(i):
        t0 = time.perf_counter()
        text, finish = [], None
        for chunk in chat(client, messages=msgs, max_tokens=12, stream=True):
            for c in chunk.choices:
                text.append(c.delta.content or "")
                finish = c.finish_reason or finish
        latencies.append(time.perf_counter() - t0)
        results[i] = ("".join(text), finish)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    wall = time.perf_counter() - t0
    assert not any(t.is_alive() for t in threads), "clients still waiting after 300 s"
    assert len(results) == 32 and all(v == (ref, "length") for v in results.values())
    latencies.sort()
    print(f"\n32 streams: wall {wall:.1f}s, p50 {latencies[15]:.1f}s, p95 {latencies[30]:.1f}s")
    assert server.health()["queue_depth"] == 0
