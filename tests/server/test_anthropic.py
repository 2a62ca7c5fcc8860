"""Anthropic's Messages API on a real `specdec serve`, through the real ``anthropic`` SDK: the
real-model smoke (a greedy answer equals /v1/chat/completions' for the mapped request, token
for token), a stream queued behind a busy slot (headers and pings at once), the prefix cache
across Claude Code's per-run billing line, and stop sequences matched on the model's text, on
the package's shared SmolLM2 server; forced tool use on the shared Qwen2.5-Coder-0.5B server
(SmolLM2's template renders no tools). What a request becomes, errors' shape and the bytes of
each reply: in-process, test_anthropic_wire.py and test_golden.py; Claude Code:
test_agent_clis.py.
"""

from __future__ import annotations

import json

import anthropic
import pytest
from conftest import requires_model
from serverproc import LONG, raw_request, wait_for

pytestmark = pytest.mark.slow  # server processes on a real model

KEY = "K-anthropic-test"
ALIAS = "claude-specdec-test"
N = 16
QUESTION = [{"role": "user", "content": "Name three colors of the rainbow."}]
SYSTEM = "You are a helpful assistant. Answer briefly."


def billing(run: str) -> dict:
    return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{run}; "
            "cc_entrypoint=sdk-cli;"}


@pytest.fixture(scope="module")
def server(smol):  # the package's shared SmolLM2 server (tests/server/conftest.py)
    return smol


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
    with server.http().stream("POST", path, json=body, headers=server.headers()) as r:
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


def test_a_stream_queued_past_its_first_seconds_gets_headers_and_pings(server, client):
    """Claude Code's fetch gives up on a response without headers after 300 s (a long
    prefill): a stream not started within seconds sends message_start, then pings. The
    blocker (an endless plain stream, the one batch row) runs until the queued stream has
    its headers, then leaves: the stream cannot have started before."""
    blocker = raw_request(server.port, LONG)
    try:
        wait_for(lambda: server.health()["running"], what="the blocker to run")
        body = {"model": ALIAS, "max_tokens": N, "temperature": 0, "messages": QUESTION, "stream": True}
        # a 60 s timeout: without early headers the stream would wait out the blocker's minutes
        with server.http(timeout=60).stream("POST", "/v1/messages", json=body) as r:  # left after message_start
            assert r.status_code == 200 and next(r.iter_lines()) == "event: message_start"
        wait_for(lambda: server.health()["queue_depth"] == 0, timeout=10, what="the withdrawn job")
        with server.http(timeout=60).stream("POST", "/v1/messages", json=body) as r:
            health = server.health()
            assert r.status_code == 200 and (health["running"], health["queue_depth"]) == (1, 1)
            blocker.close()  # headers before the first token; now its row frees up
            frames = r.read().decode().split("\n\n")
    finally:
        blocker.close()
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


# -- the real Claude Code CLI ------------------------------------------------------------
