"""Anthropic's Messages API on `specdec serve`, through the real ``anthropic`` SDK and raw
HTTP: greedy answers equal /v1/chat/completions' for the mapped request (token-exact), the
SSE event order, usage and count_tokens, the prefix cache across Claude Code's per-run
billing line, stop sequences, errors in Anthropic's shape, model aliases. One server on
SmolLM2-135M (an API key, ``--model-alias 'claude-*'``) serves the fast tests; tool use
(SmolLM2's template renders no tools) runs on a second, Qwen2.5-Coder-0.5B server. The
real Claude Code CLI is tested in tests/server/test_agent_clis.py.
"""

from __future__ import annotations

import json
import threading

import anthropic
import pytest
from conftest import requires_model
from serverproc import LONG, Server, wait_for

pytestmark = pytest.mark.slow  # server processes on a real model

KEY = "K-anthropic-test"
ALIAS = "claude-specdec-test"
N = 16
HELLO = [{"role": "user", "content": "Hi there"}]
QUESTION = [{"role": "user", "content": "Name three colors of the rainbow."}]
SYSTEM = "You are a helpful assistant. Answer briefly."


def billing(run: str) -> dict:
    return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{run}; "
            "cc_entrypoint=sdk-cli;"}


@pytest.fixture(scope="module")
def server():
    s = Server("--model", "smollm2-135m", "--model-alias", "claude-*", "--max-batch", "1",
               api_key=KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0, timeout=300)


def create(client, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("max_tokens", N)
    kw.setdefault("extra_body", {}).setdefault("temperature", 0)  # newer SDKs dropped the argument
    return client.messages.create(model=ALIAS, **kw)


def chat_text(server, messages, max_tokens=N, **kw) -> dict:
    """The same request through /v1/chat/completions: (text, usage, finish_reason)."""
    r = server.http().post("/v1/chat/completions", json={
        "model": ALIAS, "messages": messages, "max_tokens": max_tokens, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return {"text": choice["message"]["content"], "usage": r.json()["usage"],
            "finish": choice["finish_reason"]}


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def raw_events(server, body: dict, path: str = "/v1/messages") -> list[tuple[str, dict]]:
    events = []
    with server.http().stream("POST", path, json=body, headers={"x-api-key": server.api_key}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for frame in r.read().decode().split("\n\n"):
            if frame.strip():
                name, data = frame.split("\n", 1)
                data = json.loads(data.removeprefix("data: "))
                events.append((name.removeprefix("event: "), data))
    return events


def test_create_equals_chat_completions_greedy(server, client):
    m = create(client, system=SYSTEM, metadata={"user_id": "u1"},
               extra_body={"context_management": {"edits": []}, "service_tier": "auto",
                           "output_config": {"effort": "low"}, "some_future_field": 1},
               extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14,foo"})
    ref = chat_text(server, [{"role": "system", "content": SYSTEM}, *QUESTION])
    assert m.type == "message" and m.role == "assistant" and m.model == ALIAS
    assert m.id.startswith("msg_") and [b.type for b in m.content] == ["text"]
    assert text_of(m) == ref["text"] and text_of(m)
    assert m.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[ref["finish"]]
    assert m.stop_sequence is None
    u = m.usage
    assert u.output_tokens == ref["usage"]["completion_tokens"]
    assert u.input_tokens + u.cache_read_input_tokens == ref["usage"]["prompt_tokens"]
    assert u.cache_creation_input_tokens == 0


def test_stream_equals_create_and_events_are_in_order(server, client):
    whole = create(client)
    with client.messages.stream(model=ALIAS, max_tokens=N, messages=QUESTION) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert "".join(pieces) == text_of(final) == text_of(whole)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    events = raw_events(server, {"model": ALIAS, "max_tokens": N, "temperature": 0,
                                 "messages": QUESTION, "stream": True})
    names = [n for n, _ in events]
    assert all(data["type"] == name for name, data in events)
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    prompt = whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    assert start["usage"]["input_tokens"] == prompt
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == text_of(whole)
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": whole.stop_reason, "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == whole.usage.output_tokens


def test_a_stream_queued_past_its_first_seconds_gets_headers_and_pings(server, client):
    """Claude Code's fetch gives up on a response without headers after 300 s (a long
    prefill): a stream not started within seconds sends message_start, then pings."""
    blocker = threading.Thread(target=lambda: server.http().post(
        "/v1/completions", json={**LONG, "max_tokens": 300, "stream": False}))
    blocker.start()
    wait_for(lambda: server.health()["running"], what="the blocker to run")
    body = {"model": ALIAS, "max_tokens": N, "temperature": 0, "messages": QUESTION, "stream": True}
    with server.http().stream("POST", "/v1/messages", json=body) as r:  # left after message_start
        assert r.status_code == 200 and next(r.iter_lines()) == "event: message_start"
    wait_for(lambda: server.health()["queue_depth"] == 0, timeout=10, what="the withdrawn job")
    assert blocker.is_alive()
    with server.http().stream("POST", "/v1/messages", json=body) as r:
        assert r.status_code == 200 and blocker.is_alive()  # headers before the first token
        frames = r.read().decode().split("\n\n")
    blocker.join()
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames if f.strip()]
    assert names[:2] == ["message_start", "ping"] and names[-1] == "message_stop"
    assert "content_block_delta" in names and "error" not in names
    text = "".join(json.loads(f.split("data: ", 1)[1])["delta"]["text"] for f in frames
                   if f.startswith("event: content_block_delta"))
    assert text == text_of(create(client))


def test_count_tokens_and_the_billing_line_keeps_the_prompt_and_cache(server, client):
    system = [billing("a1f"),
              {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    counts = [client.messages.count_tokens(model=ALIAS, system=s, messages=QUESTION).input_tokens
              for s in (system, [billing("9c0"), system[1]], SYSTEM)]
    assert counts[0] == counts[1] == counts[2] > 0  # the billing block is not in the prompt
    first = create(client, system=system)
    second = create(client, system=[billing("77e"), system[1]])
    for m in (first, second):
        assert m.usage.input_tokens + m.usage.cache_read_input_tokens == counts[0]
    assert second.usage.cache_read_input_tokens > 0 and text_of(second) == text_of(first)
    ref = chat_text(server, [{"role": "system", "content": SYSTEM}, *QUESTION])
    assert text_of(first) == ref["text"]


def test_stop_sequences(server, client):
    full = text_of(create(client))
    words = full.split()
    assert len(words) > 3, full
    stop = " " + words[2]
    m = create(client, stop_sequences=["zzqx", stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert text_of(m) == full[: full.index(stop)]
    with client.messages.stream(model=ALIAS, max_tokens=N, messages=QUESTION,
                                stop_sequences=[stop]) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    assert text_of(final) == text_of(m)
    unmatched = create(client, stop_sequences=["zzqx"])
    assert unmatched.stop_sequence is None and text_of(unmatched) == full


def test_max_tokens_beyond_the_context_is_clamped(server, client):
    # Claude Code sends 32000 (or 64000): more than SmolLM2's context holds
    m = create(client, messages=HELLO, max_tokens=32000, stop_sequences=["\n"])
    assert m.stop_reason in ("end_turn", "stop_sequence") and m.usage.output_tokens < 64
    assert text_of(m) == chat_text(server, HELLO, max_tokens=64, stop=["\n"])["text"]


def test_beta_query_string_and_thinking_on_a_model_without_a_switch(server, client):
    plain = create(client)
    beta = client.beta.messages.create(model=ALIAS, max_tokens=N, messages=QUESTION,
                                       thinking={"type": "enabled", "budget_tokens": 1024},
                                       betas=["context-management-2025-06-27"])
    assert text_of(beta) == text_of(plain)  # SmolLM2's template has no thinking switch
    r = server.http().post("/v1/messages?beta=true", headers={"x-api-key": KEY},
                           json={"model": ALIAS, "max_tokens": N, "temperature": 0,
                                 "messages": QUESTION})
    assert r.status_code == 200 and text_of(plain) == r.json()["content"][0]["text"]


def test_output_config_format_is_the_json_schema_grammar(server, client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    m = create(client, messages=[{"role": "user", "content": "How many legs has a cat? JSON."}],
               max_tokens=24, extra_body={"output_config": {"format": {"type": "json_schema",
                                                                       "schema": schema}}})
    ref = chat_text(server, [{"role": "user", "content": "How many legs has a cat? JSON."}],
                    max_tokens=24, response_format={"type": "json_schema", "json_schema": {
                        "name": "output", "schema": schema}})
    assert text_of(m) == ref["text"] and isinstance(json.loads(text_of(m))["n"], int)


def test_history_blocks_system_role_and_dropped_thinking(server, client):
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "greet back", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xx"},
                    {"type": "text", "text": "Hello!"}]},
                {"role": "user", "content": [{"type": "text", "text": "Name a color.",
                                              "cache_control": {"type": "ephemeral"}}]}]
    m = create(client, messages=messages)
    ref = chat_text(server, [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello!"},
                             {"role": "user", "content": "Name a color."}])
    assert text_of(m) == ref["text"]


def test_errors_have_anthropics_shape(server, client):
    bad_key = anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model=ALIAS, max_tokens=N, messages=HELLO)
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
        client.messages.create(model="gpt-4o", max_tokens=N, messages=HELLO)
    assert e.value.body["error"]["type"] == "not_found_error"
    assert "gpt-4o" in e.value.body["error"]["message"]
    r = server.http().post("/v1/messages", headers={"x-api-key": KEY},
                           json={"model": ALIAS, "messages": HELLO})
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: Field required"}}


# -- tool use: Qwen2.5-Coder-0.5B, whose template renders tools --------------------------

QWEN = "qwen2.5-coder-0.5b"
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "description": "The city name"}}, "required": ["city"]}}
WEB = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
PARIS = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def qwen_client(qwen):
    return anthropic.Anthropic(base_url=qwen.base, api_key=qwen.api_key, max_retries=0, timeout=600)


@pytest.mark.slow
@requires_model(QWEN)
def test_forced_tool_use_whole_and_streamed(qwen):
    client = qwen_client(qwen)
    kw = dict(model=ALIAS, max_tokens=40, messages=PARIS, tools=[WEATHER, WEB],
              tool_choice={"type": "tool", "name": "get_weather"})
    m = client.messages.create(**kw)
    [call] = [b for b in m.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input.get("city"), str) and m.stop_reason == "tool_use"
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    [streamed] = [b for b in final.content if b.type == "tool_use"]
    assert (streamed.name, streamed.input) == ("get_weather", call.input)
    assert final.stop_reason == "tool_use"
    events = raw_events(qwen, {**kw, "stream": True})
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    partial = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
    assert json.loads(partial) == call.input


@pytest.mark.slow
@requires_model(QWEN)
def test_a_tool_result_turn_is_served_as_the_chat_path_serves_it(qwen):
    client = qwen_client(qwen)
    history = [*PARIS, {"role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]}]
    result = {"type": "tool_result", "tool_use_id": "toolu_01",
              "content": [{"type": "text", "text": "Sunny, 18 degrees Celsius."}]}
    messages = [*history, {"role": "user", "content": [result]}]
    m = client.messages.create(model=ALIAS, max_tokens=24, messages=messages,
                               tools=[WEATHER], tool_choice={"type": "none"})
    ref = chat_text(qwen, [*PARIS, {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "toolu_01", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny, 18 degrees Celsius."}],
        max_tokens=24, tools=[{"type": "function", "function": {
            "name": "get_weather", "description": WEATHER["description"],
            "parameters": WEATHER["input_schema"]}}], tool_choice="none")
    assert text_of(m) == ref["text"] and text_of(m)
    count = client.messages.count_tokens(model=ALIAS, messages=messages, tools=[WEATHER],
                                         tool_choice={"type": "none"}).input_tokens
    assert count == m.usage.input_tokens + m.usage.cache_read_input_tokens
    failed = [*history, {"role": "user", "content": [{**result, "is_error": True}]}]
    error_count = client.messages.count_tokens(model=ALIAS, messages=failed, tools=[WEATHER],
                                               tool_choice={"type": "none"}).input_tokens
    assert error_count > count  # "Error: " went into the tool message


# -- the real Claude Code CLI ------------------------------------------------------------
