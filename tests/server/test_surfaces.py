"""The conformance table: the same cases through every wire the server speaks — OpenAI chat
completions, Anthropic messages, OpenAI responses, Ollama chat — must make the same engine
request (prompt, limits, stops, sampling, grammar: one request model, one generation path),
and refuse in each wire's own shape: in-process, in front of the scripted worker (no model).
On the shared Qwen server, one real-model smoke per wire: the text case answered whole and
streamed equals chat completions' token for token. Raw HTTP here; the SDK and CLI tests are in
tests/server/test_{anthropic,responses,ollama,golden,agent_clis}.py."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.testclient import TestClient
from conftest import requires_model

from .golden import KEY, job_view, scripted_app

MODEL = "qwen2.5-coder-0.5b"  # a template that renders tools
WEATHER = {"name": "get_weather", "description": "Current weather of a city.",
           "schema": {"type": "object", "properties": {"city": {"type": "string"}},
                      "required": ["city"]}}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
ASK = "What is the weather in Paris? Answer in one sentence."


def case(user=ASK, *, max_tokens=16, tools=False, force=None, result=None, stop=None,
         schema=None) -> dict:
    """A neutral request: every surface renders it in its own wire format."""
    return {"user": user, "max_tokens": max_tokens, "tools": [WEATHER] if tools else [],
            "force": force, "result": result, "stop": stop, "schema": schema}


CASES = {
    "text": case("Name three colours of the rainbow."),
    "stop": case("Count from 1 to 9, one number per line.", stop=["4"]),
    "forced tool call": case(tools=True, force="get_weather", max_tokens=40),
    "tool-result turn": case(tools=True, result="Sunny, 18 degrees Celsius.", max_tokens=24),
    "json schema": case("Invent a person.", schema=PERSON, max_tokens=40),
}


def chat_body(c: dict) -> dict:
    msgs = [{"role": "user", "content": c["user"]}]
    if c["result"] is not None:
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": c["result"]}]
    body = {"model": MODEL, "messages": msgs, "max_tokens": c["max_tokens"], "temperature": 0}
    if c["tools"]:
        body["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["schema"]}} for t in c["tools"]]
    if c["force"]:
        body["tool_choice"] = {"type": "function", "function": {"name": c["force"]}}
    if c["stop"]:
        body["stop"] = c["stop"]
    if c["schema"]:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": c["schema"]}}
    return body


def messages_body(c: dict) -> dict:
    msgs = [{"role": "user", "content": c["user"]}]
    if c["result"] is not None:
        msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": c["result"]}]}]
    body = {"model": MODEL, "messages": msgs, "max_tokens": c["max_tokens"], "temperature": 0}
    if c["tools"]:
        body["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["schema"]} for t in c["tools"]]
    if c["force"]:
        body["tool_choice"] = {"type": "tool", "name": c["force"]}
    if c["stop"]:
        body["stop_sequences"] = c["stop"]
    return body


def responses_body(c: dict) -> dict:
    items: list = [{"role": "user", "content": c["user"]}]
    if c["result"] is not None:
        items += [{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
                  {"type": "function_call_output", "call_id": "call_1", "output": c["result"]}]
    body = {"model": MODEL, "input": items, "max_output_tokens": c["max_tokens"], "temperature": 0, "store": False}
    if c["tools"]:
        body["tools"] = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["schema"]} for t in c["tools"]]
    if c["force"]:
        body["tool_choice"] = {"type": "function", "name": c["force"]}
    if c["schema"]:
        body["text"] = {"format": {"type": "json_schema", "name": "p", "schema": c["schema"]}}
    return body


def ollama_body(c: dict) -> dict:
    msgs = [{"role": "user", "content": c["user"]}]
    if c["result"] is not None:
        msgs += [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                 {"role": "tool", "content": c["result"], "tool_name": "get_weather"}]
    options = {"num_predict": c["max_tokens"], "temperature": 0}
    if c["stop"]:
        options["stop"] = c["stop"]
    body = {"model": MODEL, "messages": msgs, "options": options, "stream": False}
    if c["tools"]:
        body["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["schema"]}} for t in c["tools"]]
    if c["schema"]:
        body["format"] = c["schema"]
    return body


def read_chat(b: dict) -> dict:
    msg = b["choices"][0]["message"]
    return {"text": msg.get("content") or "", "calls": [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in msg.get("tool_calls") or []]}


def read_messages(b: dict) -> dict:
    return {"text": "".join(x["text"] for x in b["content"] if x["type"] == "text"),
            "calls": [[x["name"], x["input"]] for x in b["content"] if x["type"] == "tool_use"]}


def read_responses(b: dict) -> dict:
    text = "".join(p.get("text", "") for o in b["output"] if o["type"] == "message" for p in o["content"])
    return {"text": text, "calls": [[o["name"], json.loads(o["arguments"])] for o in b["output"] if o["type"] == "function_call"]}


def read_ollama(b: dict) -> dict:
    msg = b["message"]
    return {"text": msg.get("content") or "", "calls": [[c["function"]["name"], c["function"]["arguments"]] for c in msg.get("tool_calls") or []]}


SURFACES = {  # path, body, reader, whether it has the case's feature
    "chat": ("/v1/chat/completions", chat_body, read_chat, lambda c: True),
    "messages": ("/v1/messages", messages_body, read_messages, lambda c: c["schema"] is None),
    "responses": ("/v1/responses", responses_body, read_responses, lambda c: c["stop"] is None),
    "ollama": ("/api/chat", ollama_body, read_ollama, lambda c: c["force"] is None),
}


# -- in-process: every wire makes the chat request ------------------------------------------


def engine_request(surface: str, c: dict) -> dict:
    """The engine request the scripted app's ``surface`` made of case ``c``."""
    app, worker = scripted_app(["ok"])
    path, render, _, _ = SURFACES[surface]
    with TestClient(app) as client:
        r = client.post(path, json={**render(c), "model": "m"},
                        headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, (surface, r.text)
    [job] = worker.requests
    view = job_view(job, worker.tokenizer)
    fmt = view["response_format"]  # its schema's name is a label: the grammar is the schema
    schema = fmt and {"type": fmt["type"], "schema": fmt.get("json_schema", {}).get("schema")}
    return {"schema": schema, **{k: view[k] for k in ("prompt", "max_tokens", "stop", "sampling")}}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("surface", ["messages", "responses", "ollama"])
def test_every_surface_makes_the_chat_request(surface, name):
    c = CASES[name]
    if not SURFACES[surface][3](c):
        pytest.skip(f"{surface} has no such field ({name})")
    assert engine_request(surface, c) == engine_request("chat", c)


def test_every_surface_refuses_in_its_own_shape():
    shapes = {"chat": lambda b: b["error"]["code"] == "model_not_found",
              "messages": lambda b: b["type"] == "error" and b["error"]["type"] == "not_found_error",
              "responses": lambda b: b["error"]["code"] == "model_not_found",
              "ollama": lambda b: "does not exist" in b["error"]}
    app, worker = scripted_app(["ok"])
    with TestClient(app) as client:
        for surface, (path, render, _, _) in SURFACES.items():
            r = client.post(path, json={**render(CASES["text"]), "model": "no-such-model"},
                            headers={"Authorization": f"Bearer {KEY}"})
            assert r.status_code == 404 and shapes[surface](r.json()), (surface, r.text)
    assert worker.requests == []


# -- on the shared Qwen server: one real-model smoke per wire -----------------------------


@pytest.fixture(scope="module")
def server(qwen):  # the package's shared Qwen server (tests/server/conftest.py)
    return qwen


@pytest.fixture(scope="module")
def reference(server):
    """The text case's chat-completions answer, computed once."""
    return ask(server, "chat", CASES["text"])


def ask(server, surface: str, c: dict) -> dict:
    path, render, read, _ = SURFACES[surface]
    r = httpx.post(server.base + path, json=render(c), headers=server.headers(), timeout=600)
    assert r.status_code == 200, (surface, r.text)
    return read(r.json())


@pytest.mark.slow
@requires_model(MODEL)
@pytest.mark.parametrize("surface", ["messages", "responses", "ollama"])
def test_every_surface_answers_as_chat_completions(server, reference, surface):
    got = ask(server, surface, CASES["text"])
    assert got == reference and got["text"]


def stream_text(server, surface: str, c: dict) -> str:
    """The text a surface streams, read from its own event format."""
    path, render, _, _ = SURFACES[surface]
    body = {**render(c), "stream": True}
    text = ""
    with httpx.stream("POST", server.base + path, json=body, headers=server.headers(), timeout=600) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if surface == "ollama" and line:
                text += json.loads(line)["message"].get("content", "")
            elif line.startswith("data: {"):
                ev = json.loads(line[6:])
                if surface == "chat" and ev.get("choices"):
                    text += ev["choices"][0]["delta"].get("content") or ""
                elif surface == "messages" and ev["type"] == "content_block_delta":
                    text += ev["delta"].get("text", "")
                elif surface == "responses" and ev["type"] == "response.output_text.delta":
                    text += ev["delta"]
    return text


@pytest.mark.slow
@requires_model(MODEL)
@pytest.mark.parametrize("surface", list(SURFACES))
def test_every_surface_streams_what_it_answers_whole(server, reference, surface):
    assert stream_text(server, surface, CASES["text"]) == reference["text"]
