"""A tool loop through the real OpenAI SDK against `specdec serve` on Qwen2.5-Coder-0.5B.

Greedy, as the model really answers (checked by hand first): for "What is the weather
like in Paris today?" with a ``get_weather(city)`` tool it writes the untagged call
``{"name": "get_weather", "arguments": {"city": "Paris"}}`` (not the ``<tool_call>`` tags
its template asks for). Given the tool's result it calls ``get_weather`` again (this
0.5B model does not answer from a result by itself), so the loop's final answer is asked
for with ``tool_choice: "none"``, which renders the prompt without tools and returns the
reply as content. One server (a batch of one, so no cost curve is measured) serves the
module.
"""

from __future__ import annotations

import json

import openai
import pytest
from conftest import requires_model

MODEL = "qwen2.5-coder-0.5b"
pytestmark = [pytest.mark.slow, requires_model(MODEL)]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name"}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
RESULT = "Sunny, 18 degrees Celsius."


@pytest.fixture(scope="module")
def client(qwen):  # the package's shared Qwen server (tests/server/conftest.py)
    return qwen.openai()


def chat(client, messages, **kw):
    kw.setdefault("max_tokens", 40)
    return client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER],
                                          temperature=0, **kw)


def assert_paris(call):
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_weather_question_returns_a_call(client, choice):
    r = chat(client, QUESTION, tool_choice=choice)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and message.content is None
    [call] = message.tool_calls
    assert_paris(call)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forcing_tool_choice_gets_a_call_where_auto_would_not(client, choice):
    """A greeting answered with prose under ``auto`` gets a valid call when ``required``
    or the named function forces one: the grammar admits nothing else, and the forced
    tokens are the greedy choice among what it admits (speculation included)."""
    hello = [{"role": "user", "content": "Hello! How are you?"}]
    assert chat(client, hello).choices[0].finish_reason == "stop"
    r = chat(client, hello, tool_choice=choice, max_tokens=60)
    assert r.choices[0].finish_reason == "tool_calls"
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
    plain = chat(client, hello, tool_choice=choice, max_tokens=60,
                 extra_body={"speculative": {"draft_type": "none"}})
    assert plain.choices[0].message.tool_calls[0].function.arguments == call.function.arguments


def test_weather_question_streams_the_call(client):
    chunks = list(chat(client, QUESTION, stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    assert all(not d.content for d in deltas)  # no tag or JSON text leaks into content
    parts = [t for d in deltas for t in d.tool_calls or []]
    head = parts[0]
    assert head.index == 0 and head.id.startswith("call_") and head.type == "function"
    assert head.function.name == "get_weather" and head.function.arguments == ""
    assert all(p.index == 0 and p.id is None for p in parts[1:])
    assert json.loads("".join(p.function.arguments for p in parts)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_loop_call_result_answer(client):
    first = chat(client, QUESTION)
    [call] = first.choices[0].message.tool_calls
    history = QUESTION + [first.choices[0].message,  # as clients append it
                          {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    again = chat(client, history)  # served; this model calls again
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # the first turn's prefix reused
    assert again.choices[0].finish_reason in ("tool_calls", "length")
    for c in again.choices[0].message.tool_calls:
        assert_paris(c)
    chunks = list(chat(client, history, tool_choice="none", stream=True, max_tokens=64))
    answer = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert RESULT in answer and chunks[-1].choices[0].finish_reason == "stop"
    assert not any(c.choices[0].delta.tool_calls for c in chunks)


def test_requests_the_server_refuses(client):
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        chat(client, QUESTION, tool_choice={"type": "function", "function": {"name": "get_time"}})
    with pytest.raises(openai.BadRequestError, match="text-only"):
        chat(client, [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
