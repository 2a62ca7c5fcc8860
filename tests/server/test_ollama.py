"""Ollama's API on a real `specdec serve`, through the real ``ollama`` Python client: the
models list, show and ps from the real weights, the real-model smoke (a greedy answer equals
``/v1/chat/completions``' token for token) and its logprobs, on the package's shared SmolLM2
server; the tool loop on the shared Qwen2.5-Coder-0.5B server (a template that renders tools).
What each request becomes, streaming and refusals: in-process, test_ollama_wire.py; the bytes
the client gets: test_golden.py.
"""

from __future__ import annotations

import json

import ollama
import pytest
from conftest import requires_model
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


def test_logprobs_are_the_chat_endpoint_s(server, client):
    r = client.chat(MODEL, ASK, options={"num_predict": 4, "temperature": 0}, logprobs=True,
                    top_logprobs=2)
    ref = openai_chat(server, ASK, 4, logprobs=True, top_logprobs=2).choices[0].logprobs.content
    assert [lp.token for lp in r.logprobs] == [lp.token for lp in ref] and len(ref) == 4
    assert [lp.logprob for lp in r.logprobs] == pytest.approx([lp.logprob for lp in ref], abs=1e-3)
    assert all(len(lp.top_logprobs) == 2 for lp in r.logprobs)


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
