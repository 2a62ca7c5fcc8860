"""OpenAI's Responses API (``/v1/responses``) through the real OpenAI SDK against a real
`specdec serve`: the real-model smoke (an answer equals ``/v1/chat/completions``' token for
token, its usage the same) on the package's shared SmolLM2 server; forced and streamed function
calls on the shared Qwen2.5-Coder-0.5B server (a template that renders tools). What each
request becomes, the store and the refusals: in-process, test_responses_wire.py; the bytes the
SDK and Codex get: test_golden.py; the Codex CLI: test_agent_clis.py. The chunk-to-item folding
of a think template's reasoning (no installed model thinks) is in test_responses_events.py.
"""

from __future__ import annotations

import json

import pytest
from conftest import requires_model
from serverproc import MODEL

pytestmark = pytest.mark.slow  # server processes on a real model

QWEN = "qwen2.5-coder-0.5b"
QUESTION = "What is the capital of France?"
WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def server(smol):  # the package's shared server (tests/server/conftest.py)
    return smol


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def create(client, **kw):
    kw.setdefault("max_output_tokens", 12)
    return client.responses.create(model=MODEL, temperature=0, **kw)


def chat_text(client, messages, **kw):
    kw.setdefault("max_tokens", 12)
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)
    return r.choices[0].message.content, r.usage


def test_text_equals_chat_completions(client):
    r = create(client, input=QUESTION)
    text, usage = chat_text(client, [{"role": "user", "content": QUESTION}])
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    [item] = r.output
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert item.content[0].type == "output_text" and item.content[0].annotations == []
    assert r.output_text == item.content[0].text == text and text
    assert r.usage.input_tokens == usage.prompt_tokens
    assert r.usage.output_tokens == usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.model == MODEL and r.store is True and r.tools == [] and r.temperature == 0


# -- function calls, and the Codex CLI: Qwen2.5-Coder-0.5B (slow) --------------------------


@pytest.mark.slow
@requires_model(QWEN)
def test_forced_function_call_then_its_output_is_served(qwen):
    client = qwen.openai()
    ask = {"model": QWEN, "temperature": 0, "tools": [WEATHER], "max_output_tokens": 40}
    hello = "Hello! How are you?"
    r = client.responses.create(input=hello, tool_choice={"type": "function", "name": "get_weather"},
                                **ask)
    [call] = r.output
    assert call.type == "function_call" and call.id.startswith("fc_") and call.status == "completed"
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    chat = client.chat.completions.create(
        model=QWEN, temperature=0, max_tokens=40, messages=[{"role": "user", "content": hello}],
        tools=[{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert chat.choices[0].message.tool_calls[0].function.arguments == call.arguments
    turn = client.responses.create(input=[
        {"role": "user", "content": hello}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 18 C."}],
        tool_choice="none", **ask)
    assert turn.output[0].type == "message" and turn.output_text
    chained = client.responses.create(
        previous_response_id=r.id, tool_choice="none", input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 18 C."}], **ask)
    assert chained.output_text == turn.output_text


@pytest.mark.slow
@requires_model(QWEN)
def test_a_streamed_function_call(qwen):
    events = list(qwen.openai().responses.create(
        model=QWEN, temperature=0, tools=[WEATHER], max_output_tokens=40, stream=True,
        input="What is the weather like in Paris today?", tool_choice="required"))
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added" and events[2].item.type == "function_call"
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"} == json.loads(events[-3].arguments)
