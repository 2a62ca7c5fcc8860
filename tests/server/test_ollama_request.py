"""Ollama's request bodies translated onto the engine's request value, a ``ChatSpec``
(``specdec.server.wires.ollama_request``): options as sampling fields, ``format`` and ``think``,
tool messages matched to the calls before them, ``:latest`` names, raw generation, and each
400 naming the field as the client sent it."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from specdec.server.engine.spec import Asked
from specdec.server.http.errors import APIError
from specdec.server.wires.ollama_request import ChatBody, GenerateBody, Surface

from .tiny_api import tiny_api

MODEL = "smollm2-135m"
HI = [{"role": "user", "content": "hi"}]


def surface(thinks=False, switch=False, has_template=True):
    return Surface(tiny_api(), has_template, thinks, switch)


def chat(**body):
    return surface().chat_spec(ChatBody.model_validate({"model": MODEL, **body}), MODEL)


def test_options_become_sampling_fields():
    req = chat(messages=HI, format="json", options={
        "num_predict": 7, "seed": 3, "temperature": 0.5, "repeat_penalty": 1.1, "stop": ["\n"]})
    asked = req.sampling
    assert (req.max_tokens, asked.seed, asked.temperature, asked.repetition_penalty, req.stop) == (
        7, 3, 0.5, 1.1, ("\n",))
    assert req.response_format == {"type": "json_object"}
    unlimited = chat(messages=HI, options={"num_predict": -1, "seed": -1})
    assert unlimited.max_tokens is None and unlimited.sampling.seed is None  # to EOS; unseeded
    # every sampling option Ollama names as the engine does; others (and the engine's own
    # name of repeat_penalty) are ignored: the server's defaults
    sent = {"top_k": 5, "top_p": 0.9, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": 0.25}
    assert vars(chat(messages=HI, options={**sent, "num_ctx": 4096, "repetition_penalty": 2.0}).sampling) == {
        **vars(Asked()), **sent}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat(messages=HI, format=schema).response_format["json_schema"]["schema"] == schema


def test_tool_messages_answer_the_calls_before_them():
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [
                {"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                {"id": "t2", "function": {"name": "time", "arguments": "{}"}}]},
            {"role": "tool", "tool_name": "time", "content": "noon"},
            {"role": "tool", "content": "rain"}]
    req = chat(messages=msgs)
    calls = req.messages[1]["tool_calls"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"} and calls[1]["id"] == "t2"
    assert [m["tool_call_id"] for m in req.messages[2:]] == ["t2", calls[0]["id"]]
    in_order = chat(messages=[*msgs[:2], {"role": "tool", "content": "rain"},
                              {"role": "tool", "content": "noon"}])
    first = in_order.messages[1]["tool_calls"][0]["id"]  # a fresh id: the call came without one
    assert [m["tool_call_id"] for m in in_order.messages[2:]] == [first, "t2"]
    with pytest.raises(APIError) as e:
        chat(messages=[*msgs, {"role": "tool", "content": "again"}])
    assert e.value.param == "messages" and "messages[4]" in e.value.message


@pytest.mark.parametrize("body, param, needle", [
    ({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, "images",
     "messages[0]: images are not supported"),
    ({"messages": HI, "format": "yaml"}, "format", "format must be \"json\" or a JSON schema"),
    ({"messages": HI, "options": {"temperature": 9.0}}, "options.temperature", "options.temperature"),
    ({"messages": HI, "options": {"num_predict": 0, "top_p": 2.0}}, "options.top_p", "top_p"),
    # the sampling options' types are the engine's to check too
    ({"messages": HI, "options": {"temperature": "hot"}}, "options.temperature", "valid number"),
    ({"messages": HI, "options": {"seed": "-1"}}, "options.seed", "valid integer"),
    ({"messages": HI, "options": {"presence_penalty": None}}, "options.presence_penalty", "valid number"),
])
def test_refusals_name_what_was_sent(body, param, needle):
    with pytest.raises(APIError) as e:
        chat(**body)
    assert (e.value.status, e.value.param) == (400, param) and needle in e.value.message


def test_bodies_are_strict_in_types_and_lax_in_fields():
    with pytest.raises(ValidationError):
        ChatBody.model_validate({"model": MODEL, "options": {"num_predict": "5"}})
    body = ChatBody.model_validate({"model": MODEL, "messages": [], "some_new_field": 1})
    assert body.stream is True


def test_think_and_model_names():
    assert surface(thinks=True, switch=True).think("high") == {"enable_thinking": True}
    assert surface(thinks=True, switch=False).think(True) == {}
    assert surface(thinks=True, switch=True).think(None) == {}
    with pytest.raises(APIError, match="does not support thinking"):
        surface().think(True)
    assert surface().think(False) == {}
    assert surface().model(f"{MODEL}:latest") == MODEL
    with pytest.raises(APIError) as e:
        surface().model("llama3:latest")
    assert e.value.status == 404


def test_generate_with_and_without_the_template():
    s = surface()
    req = s.generate_spec(GenerateBody(model=MODEL, prompt="hi", system="be brief"), MODEL)
    assert req.chat and [m["role"] for m in req.messages] == ["system", "user"]
    raw = s.generate_spec(GenerateBody(model=MODEL, prompt="hi", raw=True, logprobs=True,
                                       top_logprobs=2), MODEL)
    assert not raw.chat and (raw.prompt, raw.logprobs, raw.top_logprobs) == ("hi", True, 2)
    with pytest.raises(APIError) as e:
        s.generate_spec(GenerateBody(model=MODEL, prompt="hi", raw=True, logprobs=True,
                                     top_logprobs=6), MODEL)
    assert e.value.param == "top_logprobs"
    with pytest.raises(APIError, match="system needs the chat template, and raw the prompt"):
        s.generate_spec(GenerateBody(model=MODEL, prompt="hi", raw=True, system="x"), MODEL)
    with pytest.raises(APIError, match="fill-in-the-middle"):
        s.generate_spec(GenerateBody(model=MODEL, prompt="hi", suffix="end"), MODEL)
    no_template = surface(has_template=False)
    with pytest.raises(APIError, match="this model has no chat template"):
        no_template.generate_spec(GenerateBody(model=MODEL, prompt="hi", format="json"), MODEL)
