"""Ollama's API on `specdec serve`, through the real ``ollama`` Python client.

Each greedy answer is compared token-exactly with the same request through
``/v1/chat/completions`` (or ``/v1/completions`` for a raw prompt): the Ollama surface is
an adapter, so it must change nothing. One smollm2 server serves the module; the tool
loop needs a template that renders tools (Qwen2.5-Coder-0.5B), on a second server, slow.
"""

from __future__ import annotations

import json
from typing import Literal

import ollama
import pytest
from conftest import requires_model
from pydantic import BaseModel
from serverproc import MODEL

pytestmark = pytest.mark.slow  # server processes on a real model

ASK = [{"role": "user", "content": "Name three colours of the rainbow."}]
GREEDY = {"num_predict": 16, "temperature": 0}


@pytest.fixture(scope="module")
def server(smol):  # the package's shared server (tests/server/conftest.py)
    return smol


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base, timeout=300)


def openai_chat(server, messages, max_tokens=16, **kw):
    return server.openai().chat.completions.create(model=MODEL, messages=messages,
                                                    max_tokens=max_tokens, temperature=0, **kw)


def test_list_show_ps_version_and_the_probe(server, client):
    [m] = client.list().models
    assert m.model == f"{MODEL}:latest" and m.details.format == "gguf" and m.size > 0
    assert m.details.family == "llama" and m.details.parameter_size == "135M"
    context = server.health()["context_length"]
    for name in (MODEL, f"{MODEL}:latest"):
        info = client.show(name)
        assert info.modelinfo["general.architecture"] == "llama"
        assert info.modelinfo["llama.context_length"] == context
        assert info.capabilities == ["completion"]  # smollm2's template renders no tools
        assert "<|im_start|>" in info.template
    [running] = client.ps().models
    assert running.size_vram == 0 and running.context_length == context
    http = server.http()
    assert http.post("/api/show", json={"name": MODEL}).status_code == 200  # the legacy field
    assert http.get("/api/version").json()["version"].count(".") == 2
    assert http.get("/").text == "Ollama is running"
    assert http.head("/").status_code == 200


def test_chat_equals_the_openai_greedy_answer(server, client):
    r = client.chat(MODEL, ASK, stream=False, options=GREEDY)
    ref = openai_chat(server, ASK)
    assert r.message.content == ref.choices[0].message.content and r.message.content
    assert r.done and r.done_reason == "length" == ref.choices[0].finish_reason
    assert r.prompt_eval_count == ref.usage.prompt_tokens
    assert r.eval_count == ref.usage.completion_tokens == 16
    assert r.model == MODEL and r.created_at.endswith("Z")
    assert r.total_duration >= r.eval_duration > 0 and r.prompt_eval_duration >= 0


def test_stream_is_the_default_and_concatenates_to_the_whole_answer(server, client):
    whole = client.chat(MODEL, ASK, stream=False, options=GREEDY)
    parts = list(client.chat(MODEL, ASK, stream=True, options=GREEDY))
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    last = parts[-1]
    assert last.message.content == "" and last.done_reason == "length"
    assert last.eval_count == 16 and last.prompt_eval_count == whole.prompt_eval_count
    with server.http().stream("POST", "/api/chat", json={  # no "stream": Ollama streams
            "model": MODEL, "messages": ASK, "options": GREEDY}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert len(lines) == len(parts) and lines[-1]["done"] is True


def test_generate_maps_onto_the_chat_template_and_raw_onto_completions(server, client):
    r = client.generate(MODEL, "Name three colours of the rainbow.", options=GREEDY)
    assert r.response == client.chat(MODEL, ASK, options=GREEDY).message.content
    system = [{"role": "system", "content": "Answer in French."}, *ASK]
    r = client.generate(MODEL, ASK[0]["content"], system="Answer in French.", options=GREEDY)
    assert r.response == openai_chat(server, system).choices[0].message.content
    raw = client.generate(MODEL, "1, 2, 3,", raw=True, options={"num_predict": 8})
    ref = server.openai().completions.create(model=MODEL, prompt="1, 2, 3,", max_tokens=8)
    assert raw.response == ref.choices[0].text and raw.eval_count == 8
    streamed = list(client.generate(MODEL, "1, 2, 3,", raw=True, stream=True,
                                    options={"num_predict": 8}))
    assert "".join(p.response for p in streamed) == raw.response and streamed[-1].done
    assert client.generate(MODEL, "").done_reason == "load"  # clients preload this way
    assert client.chat(MODEL, []).done_reason == "load"


class Place(BaseModel):
    age: int
    city: Literal["Lyon", "Paris", "Oslo", "Lima"]


def test_format_schema_and_json(server, client):
    ask = [{"role": "user", "content": "Alice Smith is 34 and lives in Lyon. Give her as JSON."}]
    r = client.chat(MODEL, ask, format=Place.model_json_schema(),
                    options={"num_predict": 24, "temperature": 0})
    assert Place.model_validate_json(r.message.content) == Place(age=34, city="Lyon")
    ref = openai_chat(server, ask, 24, response_format={"type": "json_schema", "json_schema": {
        "name": "ollama_format", "schema": Place.model_json_schema()}})
    assert r.message.content == ref.choices[0].message.content
    j = client.chat(MODEL, ask, format="json", options={"num_predict": 24, "temperature": 0})
    ref = openai_chat(server, ask, 24, response_format={"type": "json_object"})
    assert j.message.content == ref.choices[0].message.content and j.message.content.startswith("{")


def test_options_reach_the_sampler(server, client):
    stop = client.chat(MODEL, ASK, options={**GREEDY, "stop": [","]})
    ref = openai_chat(server, ASK, stop=[","])
    assert stop.message.content == ref.choices[0].message.content and stop.done_reason == "stop"
    seeded = {"num_predict": 12, "temperature": 0.9, "seed": 7, "top_k": 20, "num_ctx": 99999}
    a, b = (client.chat(MODEL, ASK, options=seeded).message.content for _ in range(2))
    ref = server.openai().chat.completions.create(model=MODEL, messages=ASK, max_tokens=12,
                                                  temperature=0.9, seed=7, extra_body={"top_k": 20})
    assert a == b == ref.choices[0].message.content


def test_logprobs_are_the_chat_endpoint_s(server, client):
    r = client.chat(MODEL, ASK, options={"num_predict": 4, "temperature": 0}, logprobs=True,
                    top_logprobs=2)
    ref = openai_chat(server, ASK, 4, logprobs=True, top_logprobs=2).choices[0].logprobs.content
    assert [lp.token for lp in r.logprobs] == [lp.token for lp in ref] and len(ref) == 4
    assert [lp.logprob for lp in r.logprobs] == pytest.approx([lp.logprob for lp in ref], abs=1e-3)
    assert all(len(lp.top_logprobs) == 2 for lp in r.logprobs)


def refused(status, match, call):
    with pytest.raises(ollama.ResponseError, match=match) as e:
        call()
    assert e.value.status_code == status


def test_errors_are_ollama_shaped_with_their_status(server, client):
    refused(404, "does not exist", lambda: client.chat("llama3.2", ASK))
    refused(404, "does not exist", lambda: client.show("llama3.2:latest"))
    refused(400, "options.temperature", lambda: client.chat(MODEL, ASK, options={"temperature": 5}))
    refused(400, "images are not supported", lambda: client.chat(
        MODEL, [{**ASK[0], "images": ["aGVsbG8="]}]))
    refused(400, "does not support thinking", lambda: client.chat(MODEL, ASK, think=True))
    refused(400, "does not support tools", lambda: client.chat(MODEL, ASK, tools=[WEATHER]))
    refused(400, "suffix", lambda: client.generate(MODEL, "def f(", suffix="return 1"))
    refused(400, "system", lambda: client.generate(MODEL, "1, 2,", system="x", raw=True))
    refused(400, "a tool message answers", lambda: client.chat(
        MODEL, [*ASK, {"role": "tool", "tool_name": "f", "content": "1"}]))
    r = server.http().post("/api/chat", content=b"{nope")
    assert r.status_code == 400 and set(r.json()) == {"error"}


# -- tool calls: a template that renders tools ---------------------------------------------

QWEN = "qwen2.5-coder-0.5b"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name"}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
RESULT = "Sunny, 18 degrees Celsius."


@pytest.mark.slow
@requires_model(QWEN)
def test_tool_calls_whole_streamed_and_answered(qwen):
    """Qwen answers the weather question with a call (see test_server_tools_qwen). The
    ``tool`` turn, which has no call id in Ollama's format, must render exactly the
    prompt OpenAI's history with ids does: same prompt tokens, same greedy answer."""
    client = ollama.Client(host=qwen.base, timeout=600, headers=qwen.headers())
    opts = {"num_predict": 40, "temperature": 0}
    r = client.chat(QWEN, QUESTION, tools=[WEATHER], options=opts)
    [call] = r.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    assert r.message.content == "" and r.done_reason == "stop"
    parts = list(client.chat(QWEN, QUESTION, tools=[WEATHER], options=opts, stream=True))
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert calls == [call] and not "".join(p.message.content for p in parts)  # whole, once
    assert parts[-1].done
    history = [*QUESTION, r.message,
               {"role": "tool", "tool_name": "get_weather", "content": RESULT}]
    again = client.chat(QWEN, history, tools=[WEATHER], options=opts)
    sent = ollama.Tool.model_validate(WEATHER).model_dump(exclude_none=True)  # as sent
    ref = qwen.openai().chat.completions.create(
        model=QWEN, max_tokens=40, temperature=0, tools=[sent], messages=[
            *QUESTION, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT}])
    assert again.prompt_eval_count == ref.usage.prompt_tokens
    assert again.message.content == (ref.choices[0].message.content or "")
    ref_calls = ref.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in again.message.tool_calls or []] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in ref_calls]
