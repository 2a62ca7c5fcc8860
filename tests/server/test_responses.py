"""OpenAI's Responses API (``/v1/responses``) through the real OpenAI SDK against `specdec serve`.

SmolLM2-135M (one module-scoped server) checks text, streaming, the store
(``previous_response_id``, GET, DELETE, ``store: false``), ``text.format`` and dropped
hosted tools, each greedy answer token-exact against ``/v1/chat/completions``. Function
calls need a template that renders tools: Qwen2.5-Coder-0.5B, on a second server (slow).
The Codex CLI is tested in tests/server/test_agent_clis.py. The chunk-to-item folding of a think
template's reasoning (no installed model thinks) is in test_responses_events.py.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
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
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


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


def test_instructions_and_message_items_map_to_chat_messages(client):
    instructions = "You are a pirate. Answer in one sentence."
    r = create(client, instructions=instructions, input=QUESTION)
    text, _ = chat_text(client, [{"role": "system", "content": instructions},
                                 {"role": "user", "content": QUESTION}])
    assert r.output_text == text and r.instructions == instructions
    items = create(client, input=[
        {"role": "developer", "content": instructions},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    assert items.output_text == text


def test_stream_events_in_order_and_equal_to_the_whole_answer(client):
    whole = create(client, input=QUESTION)
    events = list(create(client, input=QUESTION, stream=True))
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == events[-4].text == final.output_text == whole.output_text
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert final.status == "completed" and final.usage.output_tokens == whole.usage.output_tokens
    assert events[-2].item.id == events[2].item.id == final.output[0].id


def test_max_output_tokens_cut_is_incomplete(client):
    r = create(client, input="Count from one to fifty in words.", max_output_tokens=4)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4 and r.output[0].status == "incomplete"
    events = list(create(client, input="Count from one to fifty in words.", max_output_tokens=4,
                         stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == r.output_text


def test_previous_response_id_continues_the_conversation(client):
    first = create(client, input=QUESTION)
    second = create(client, input="And of Germany?", previous_response_id=first.id)
    text, usage = chat_text(client, [{"role": "user", "content": QUESTION},
                                     {"role": "assistant", "content": first.output_text},
                                     {"role": "user", "content": "And of Germany?"}])
    assert second.output_text == text and second.previous_response_id == first.id
    assert second.usage.input_tokens == usage.prompt_tokens
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0  # the first turn, from the cache
    third = create(client, input="And of Italy?", previous_response_id=second.id)
    assert third.usage.input_tokens > second.usage.total_tokens  # the chain, not one turn


def test_unknown_previous_response_id_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        create(client, input="hi", previous_response_id="resp_nope")
    assert e.value.body["param"] == "previous_response_id" and "resp_nope" in e.value.body["message"]


def test_get_and_delete_a_stored_response(client):
    r = create(client, input=QUESTION, max_output_tokens=4)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage
    deleted = client.responses.delete(r.id)  # the SDK returns None for a 200
    assert deleted is None
    for call in (client.responses.retrieve, client.responses.delete):
        with pytest.raises(openai.NotFoundError):
            call(r.id)
    with pytest.raises(openai.NotFoundError):
        create(client, input="hi", previous_response_id=r.id)


def test_store_false_is_not_kept(client, server):
    r = create(client, input=QUESTION, max_output_tokens=4, store=False)
    assert r.store is False and r.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    raw = httpx.delete(f"{server.base}/v1/responses/{r.id}")
    assert raw.status_code == 404 and raw.json()["error"]["code"] == "response_not_found"


def test_text_format_json_schema_gives_json_that_validates(client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = create(client, input="Invent a person.", text={"format": fmt}, max_output_tokens=24)
    jsonschema.validate(json.loads(r.output_text), PERSON)
    text, _ = chat_text(client, [{"role": "user", "content": "Invent a person."}], max_tokens=24,
                        response_format={"type": "json_schema", "json_schema": {
                            "name": "person", "schema": PERSON, "strict": True}})
    assert r.output_text == text and r.text.format.type == "json_schema"


def test_hosted_tools_are_dropped_not_refused(client):
    plain = create(client, input=QUESTION)
    r = create(client, input=QUESTION, tools=[{"type": "web_search"},
                                              {"type": "code_interpreter", "container": {"type": "auto"}}])
    assert r.output_text == plain.output_text
    assert r.model_extra["dropped_tools"] == ["web_search", "code_interpreter"]
    assert [t.type for t in r.tools] == ["web_search", "code_interpreter"]  # echoed as sent


def test_what_cannot_be_served_is_a_400_that_says_so(client):
    image = {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}
    cases = [({"input": [image]}, "text-only"),
             ({"input": [{"type": "computer_call", "id": "c"}]}, "not supported"),
             ({"input": "hi", "tools": [WEATHER]}, "does not support tools"),
             ({"input": "hi", "tools": [{"type": "web_search"}],
               "tool_choice": {"type": "web_search"}}, "cannot run"),
             ({"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
              "needs tools"),
             ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens")]
    for kw, words in cases:
        kw.setdefault("max_output_tokens", 4)
        with pytest.raises(openai.BadRequestError, match=words):
            client.responses.create(model=MODEL, **kw)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.responses.create(model="gpt-nope", input="hi")
    with pytest.raises(openai.NotFoundError, match="item_reference"):  # as OpenAI's: a 404
        client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": "msg_nope"}])


def test_unknown_fields_are_accepted_and_ignored(client):
    plain = create(client, input=QUESTION)
    r = create(client, input=QUESTION, include=["reasoning.encrypted_content"],
               prompt_cache_key="k", user="u", service_tier="auto", truncation="auto",
               metadata={"run": "1"}, extra_body={"some_future_field": {"x": 1}})
    assert r.output_text == plain.output_text and r.metadata == {"run": "1"}


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
