"""Anthropic's wire as a pure translation, in-process without a model (the app in front of
``test_app.ScriptedWorker``, a word-level tokenizer): the engine renders and tokenizes the
prompt once and fits ``max_tokens`` to the room; the wire's prompt size, count_tokens and
usage are the engine's; through the real SDK, each request (history blocks, thinking and betas,
``output_config``, a tool-result turn) makes the chat path's engine request, and errors have
Anthropic's shape. The real-model smoke and the prefix cache: test_anthropic.py (slow)."""

from __future__ import annotations

import json

import anthropic
import pytest
from starlette.testclient import TestClient

from specdec.core.text import encode_prompt
from specdec.server.config import ServerConfig
from specdec.server.http.app import create_app
from specdec.server.http.metrics import Metrics

from .golden import KEY, TEMPLATE, job_view, scripted_app
from .test_app import ScriptedWorker
from .tiny_api import PLAIN_TEMPLATE, word_tokenizer

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


# -- through the real SDK, in-process: what a request becomes is the chat path's ------------

SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTION = [{"role": "user", "content": "Name three colors of the rainbow."}]
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def sdk(template: str = TEMPLATE):
    """The anthropic SDK over the scripted app (``TestClient`` is its httpx client)."""
    app, worker = scripted_app(["ok"], template=template)
    http = TestClient(app)
    client = anthropic.Anthropic(base_url="http://testserver", api_key=KEY, http_client=http,
                                 max_retries=0)
    return client, http, worker


def made(worker) -> dict:
    """What the last request asks of the engine (its logprobs are the wire's own business)."""
    view = job_view(worker.requests[-1], worker.tokenizer)
    return {k: v for k, v in view.items() if k not in ("logprobs", "top_logprobs")}


def as_chat(http, worker, messages, max_tokens=16, **kw) -> dict:
    r = http.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, json={
        "model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return made(worker)


def create(client, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("max_tokens", 16)
    kw.setdefault("extra_body", {}).setdefault("temperature", 0)  # newer SDKs dropped the argument
    return client.messages.create(model="claude-x", **kw)


def test_history_blocks_system_role_and_dropped_thinking_make_the_chat_request():
    client, http, worker = sdk()
    create(client, messages=[
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "greet back", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xx"}, {"type": "text", "text": "Hello!"}]},
        {"role": "user", "content": [{"type": "text", "text": "Name a color.",
                                      "cache_control": {"type": "ephemeral"}}]}])
    got = made(worker)
    assert got == as_chat(http, worker, [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a color."}])
    assert "greet back" not in got["prompt"]


def test_thinking_betas_and_the_beta_query_string_change_nothing():
    client, http, worker = sdk()
    create(client, system=SYSTEM, metadata={"user_id": "u1"},
           extra_body={"context_management": {"edits": []}, "service_tier": "auto",
                       "output_config": {"effort": "low"}, "some_future_field": 1},
           extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14,foo"})
    plain = made(worker)
    assert plain == as_chat(http, worker, [{"role": "system", "content": SYSTEM}, *QUESTION])
    client.beta.messages.create(model="claude-x", max_tokens=16, system=SYSTEM, messages=QUESTION,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                betas=["context-management-2025-06-27"], extra_body={"temperature": 0})
    assert made(worker) == plain  # this template has no thinking switch
    r = http.post("/v1/messages?beta=true", headers={"x-api-key": KEY}, json={
        "model": "claude-x", "max_tokens": 16, "temperature": 0, "system": SYSTEM,
        "messages": QUESTION})
    assert r.status_code == 200 and made(worker) == plain


def test_output_config_format_is_the_chat_json_schema():
    client, http, worker = sdk()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    create(client, extra_body={"temperature": 0, "output_config": {
        "format": {"type": "json_schema", "schema": schema}}})
    assert made(worker) == as_chat(http, worker, QUESTION, response_format={
        "type": "json_schema", "json_schema": {"name": "output", "schema": schema}})


def test_a_tool_result_turn_makes_the_chat_request_and_count_tokens_counts_it():
    client, http, worker = sdk()
    history = [*QUESTION, {"role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]}]
    result = {"type": "tool_result", "tool_use_id": "toolu_01",
              "content": [{"type": "text", "text": "Sunny, 18 degrees Celsius."}]}
    messages = [*history, {"role": "user", "content": [result]}]
    kw = dict(messages=messages, tools=[WEATHER], tool_choice={"type": "none"})
    create(client, **kw)
    got = made(worker)
    assert got == as_chat(http, worker, [*QUESTION, {
        "role": "assistant", "content": "Let me check.", "tool_calls": [{
            "id": "toolu_01", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny, 18 degrees Celsius."}],
        tools=[{"type": "function", "function": {
            "name": "get_weather", "description": WEATHER["description"],
            "parameters": WEATHER["input_schema"]}}], tool_choice="none")
    count = client.messages.count_tokens(model="claude-x", **kw).input_tokens
    assert count == len(worker.requests[-1].prompt_ids)
    failed = [*history, {"role": "user", "content": [{**result, "is_error": True}]}]
    error_count = client.messages.count_tokens(model="claude-x", messages=failed, tools=[WEATHER],
                                               tool_choice={"type": "none"}).input_tokens
    assert error_count > count  # "Error: " went into the tool message


def test_errors_have_anthropics_shape():
    client, http, worker = sdk(template=PLAIN_TEMPLATE)  # a template that renders no tools
    bad_key = anthropic.Anthropic(base_url="http://testserver", api_key="wrong", http_client=http,
                                  max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model="claude-x", max_tokens=16, messages=QUESTION)
    assert e.value.status_code == 401 and e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        create(client, extra_body={"temperature": 3})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "temperature" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="image blocks are not supported"):
        create(client, messages=[{"role": "user", "content": [
            {"type": "image",
             "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    with pytest.raises(anthropic.BadRequestError, match="does not support tools"):
        create(client, tools=[{"name": "f", "input_schema": {"type": "object"}}])
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="llama-nope", max_tokens=16, messages=QUESTION)
    assert e.value.body["error"]["type"] == "not_found_error"
    assert "llama-nope" in e.value.body["error"]["message"]
    r = http.post("/v1/messages", headers={"x-api-key": KEY},
                  json={"model": "claude-x", "messages": QUESTION})
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: Field required"}}
    assert worker.requests == []
