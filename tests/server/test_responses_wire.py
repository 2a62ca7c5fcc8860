"""OpenAI's Responses wire in-process, through the real OpenAI SDK over the scripted app (no
model): each request makes the chat path's engine request (instructions and message items,
``previous_response_id``'s chain, ``text.format``, dropped hosted tools, ignored fields), a cut
answer is ``incomplete``, the store keeps, returns and deletes what it should, and what cannot
be served is a 400 that says so. The real-model smoke and function calls on Qwen:
test_responses.py; the bytes the SDK and Codex get: test_golden.py."""

from __future__ import annotations

import openai
import pytest
from starlette.testclient import TestClient

from .golden import KEY, job_view, scripted_app
from .tiny_api import PLAIN_TEMPLATE

QUESTION = "What is the capital of France?"
USER = [{"role": "user", "content": QUESTION}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


class Wire:
    """The OpenAI SDK over the scripted app, and the engine requests it made."""

    def __init__(self, script=("Paris", "."), ending="stop", template=None):
        app, self.worker = scripted_app(list(script), ending,
                                        **({"template": template} if template else {}))
        self.http = TestClient(app, headers={"Authorization": f"Bearer {KEY}"})
        self.sdk = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY,
                                 http_client=self.http, max_retries=0)

    def create(self, **kw):
        kw.setdefault("max_output_tokens", 12)
        return self.sdk.responses.create(model="gpt-x", temperature=0, **kw)

    def made(self) -> dict:
        view = job_view(self.worker.requests[-1], self.worker.tokenizer)
        view["store"] = None  # the Responses store is the wire's, not the engine's
        return view

    def as_chat(self, messages, **kw) -> dict:
        kw.setdefault("max_tokens", 12)
        self.sdk.chat.completions.create(model="gpt-x", messages=messages, temperature=0, **kw)
        return self.made()


def test_instructions_and_message_items_make_the_chat_request():
    w = Wire()
    instructions = "You are a pirate. Answer in one sentence."
    r = w.create(instructions=instructions, input=QUESTION)
    assert r.instructions == instructions and r.output_text == "Paris."
    made = w.made()
    assert made == w.as_chat([{"role": "system", "content": instructions}, *USER])
    w.create(input=[{"role": "developer", "content": instructions},
                    {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": QUESTION}]}])
    assert w.made() == made


def test_a_cut_answer_is_incomplete_whole_and_streamed():
    w = Wire(script=["One", ",", " two", ","], ending="length")
    r = w.create(input="Count from one to fifty in words.", max_output_tokens=4)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and w.made()["max_tokens"] == 4
    events = list(w.create(input="Count from one to fifty in words.", max_output_tokens=4,
                           stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == r.output_text == "One, two,"


def test_previous_response_id_makes_the_chat_request_of_the_whole_chain():
    w = Wire()
    first = w.create(input=QUESTION)
    second = w.create(input="And of Germany?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    chain = [*USER, {"role": "assistant", "content": "Paris."},
             {"role": "user", "content": "And of Germany?"}]
    assert w.made() == w.as_chat(chain)
    w.create(input="And of Italy?", previous_response_id=second.id)
    assert w.made() == w.as_chat([*chain, {"role": "assistant", "content": "Paris."},
                                  {"role": "user", "content": "And of Italy?"}])


def test_the_store_returns_deletes_and_forgets():
    w = Wire()
    with pytest.raises(openai.NotFoundError) as e:
        w.create(input="hi", previous_response_id="resp_nope")
    assert e.value.body["param"] == "previous_response_id" and "resp_nope" in e.value.body["message"]
    r = w.create(input=QUESTION, max_output_tokens=4)
    got = w.sdk.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage
    assert w.sdk.responses.delete(r.id) is None  # the SDK returns None for a 200
    for call in (w.sdk.responses.retrieve, w.sdk.responses.delete):
        with pytest.raises(openai.NotFoundError):
            call(r.id)
    with pytest.raises(openai.NotFoundError):
        w.create(input="hi", previous_response_id=r.id)
    r = w.create(input=QUESTION, max_output_tokens=4, store=False)
    assert r.store is False and r.output_text
    with pytest.raises(openai.NotFoundError):
        w.sdk.responses.retrieve(r.id)
    raw = w.http.delete(f"/v1/responses/{r.id}")
    assert raw.status_code == 404 and raw.json()["error"]["code"] == "response_not_found"


def test_text_format_hosted_tools_and_unknown_fields_make_the_chat_request():
    w = Wire()
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = w.create(input="Invent a person.", text={"format": fmt}, max_output_tokens=24)
    assert r.text.format.type == "json_schema"
    assert w.made() == w.as_chat([{"role": "user", "content": "Invent a person."}], max_tokens=24,
                                 response_format={"type": "json_schema", "json_schema": {
                                     "name": "person", "schema": PERSON, "strict": True}})
    w.create(input=QUESTION)
    plain = w.made()
    r = w.create(input=QUESTION, tools=[{"type": "web_search"},
                                        {"type": "code_interpreter", "container": {"type": "auto"}}])
    assert w.made() == plain and r.model_extra["dropped_tools"] == ["web_search", "code_interpreter"]
    assert [t.type for t in r.tools] == ["web_search", "code_interpreter"]  # echoed as sent
    r = w.create(input=QUESTION, include=["reasoning.encrypted_content"], prompt_cache_key="k",
                 user="u", service_tier="auto", truncation="auto", metadata={"run": "1"},
                 extra_body={"some_future_field": {"x": 1}})
    assert w.made() == plain and r.metadata == {"run": "1"}


def test_what_cannot_be_served_is_a_400_that_says_so():
    w = Wire(template=PLAIN_TEMPLATE)  # renders no tools
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
            w.sdk.responses.create(model="gpt-x", **kw)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        w.sdk.responses.create(model="llama-nope", input="hi")
    with pytest.raises(openai.NotFoundError, match="item_reference"):  # as OpenAI's: a 404
        w.sdk.responses.create(model="gpt-x", input=[{"type": "item_reference", "id": "msg_nope"}])
    assert w.worker.requests == []
