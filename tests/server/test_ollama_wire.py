"""Ollama's wire in-process, in front of the scripted worker (no model): each request makes the
engine request the OpenAI path makes of the same ask — ``generate`` the chat template's,
``raw`` the completion's, ``format`` the grammar, ``options`` the sampler — a body without
``stream`` streams, a load-only request runs nothing, and refusals are Ollama's shape with
their status. Body translation unit by unit: test_ollama_request.py; the real-model smoke and
the real client's tool loop: test_ollama.py; the bytes the ollama SDK gets: test_golden.py."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from .golden import KEY, job_view, scripted_app
from .tiny_api import PLAIN_TEMPLATE

ASK = [{"role": "user", "content": "Name three colours of the rainbow."}]
GREEDY = {"num_predict": 16, "temperature": 0}
AUTH = {"Authorization": f"Bearer {KEY}"}
SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


@pytest.fixture
def app():
    app, worker = scripted_app(["ok"])
    with TestClient(app, headers=AUTH) as http:
        yield http, worker


def made(http, worker, path: str, body: dict) -> dict:
    """The engine request ``body`` posted to ``path`` made (its schema's name is a label)."""
    r = http.post(path, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    view = job_view(worker.requests[-1], worker.tokenizer)
    fmt = view.pop("response_format")
    return {**view, "schema": fmt and (fmt.get("json_schema") or {}).get("schema", fmt["type"])}


def test_chat_and_generate_make_the_openai_requests(app):
    http, worker = app
    chat = made(http, worker, "/v1/chat/completions", {"messages": ASK, "max_tokens": 16, "temperature": 0})
    assert made(http, worker, "/api/chat", {"messages": ASK, "options": GREEDY, "stream": False}) == chat
    assert made(http, worker, "/api/generate", {"prompt": ASK[0]["content"], "options": GREEDY,
                                                "stream": False}) == chat
    system = [{"role": "system", "content": "Answer in French."}, *ASK]
    assert made(http, worker, "/api/generate", {
        "prompt": ASK[0]["content"], "system": "Answer in French.", "options": GREEDY,
        "stream": False}) == made(http, worker, "/v1/chat/completions", {
            "messages": system, "max_tokens": 16, "temperature": 0})
    assert made(http, worker, "/api/generate", {
        "prompt": "1, 2, 3,", "raw": True, "options": {"num_predict": 8}, "stream": False}) == made(
        http, worker, "/v1/completions", {"prompt": "1, 2, 3,", "max_tokens": 8})


def test_format_is_the_grammar_and_options_reach_the_sampler(app):
    http, worker = app
    ollama = {"messages": ASK, "stream": False}
    openai = {"messages": ASK, "max_tokens": 24, "temperature": 0}
    for fmt, response_format in (
            (SCHEMA, {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}),
            ("json", {"type": "json_object"})):
        assert made(http, worker, "/api/chat", {**ollama, "format": fmt, "options": {
            "num_predict": 24, "temperature": 0}}) == made(
            http, worker, "/v1/chat/completions", {**openai, "response_format": response_format})
    seeded = {"num_predict": 12, "temperature": 0.9, "seed": 7, "top_k": 20, "num_ctx": 99999,
              "stop": [","]}
    got = made(http, worker, "/api/chat", {**ollama, "options": seeded})
    assert got == made(http, worker, "/v1/chat/completions", {
        "messages": ASK, "max_tokens": 12, "temperature": 0.9, "seed": 7, "top_k": 20, "stop": [","]})
    assert got["sampling"] == {"temperature": 0.9, "seed": 7, "top_k": 20}


def test_a_body_without_stream_streams_and_a_load_runs_nothing(app):
    http, worker = app
    with http.stream("POST", "/api/chat", json={"model": "m", "messages": ASK}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert "".join(x["message"]["content"] for x in lines) == "ok" and lines[-1]["done"] is True
    n = len(worker.requests)
    for path, body in (("/api/generate", {"prompt": ""}), ("/api/chat", {"messages": []})):
        r = http.post(path, json={"model": "m", "stream": False, **body})
        assert r.json()["done_reason"] == "load"  # clients preload this way
    assert len(worker.requests) == n


def test_errors_are_ollama_shaped_with_their_status():
    app, worker = scripted_app(["ok"], template=PLAIN_TEMPLATE)  # renders no tools, no thinking
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with TestClient(app, headers=AUTH) as http:
        for status, needle, path, body in (
                (404, "does not exist", "/api/chat", {"model": "llama3.2", "messages": ASK}),
                (404, "does not exist", "/api/show", {"model": "llama3.2:latest"}),
                (400, "options.temperature", "/api/chat", {"messages": ASK, "options": {"temperature": 5}}),
                (400, "images are not supported", "/api/chat",
                 {"messages": [{**ASK[0], "images": ["aGVsbG8="]}]}),
                (400, "does not support thinking", "/api/chat", {"messages": ASK, "think": True}),
                (400, "does not support tools", "/api/chat", {"messages": ASK, "tools": [tool]}),
                (400, "suffix", "/api/generate", {"prompt": "def f(", "suffix": "return 1"}),
                (400, "system", "/api/generate", {"prompt": "1, 2,", "system": "x", "raw": True}),
                (400, "a tool message answers", "/api/chat",
                 {"messages": [*ASK, {"role": "tool", "tool_name": "f", "content": "1"}]})):
            r = http.post(path, json={"model": "m", "stream": False, **body})
            assert r.status_code == status and set(r.json()) == {"error"}, (needle, r.text)
            assert needle in r.json()["error"], (needle, r.text)
        r = http.post("/api/chat", content=b"{nope")
        assert r.status_code == 400 and set(r.json()) == {"error"}
    assert worker.requests == []
