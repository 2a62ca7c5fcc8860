"""OpenAI's own wire (``wires/chat.py``) in-process without a model: its bodies go through
the one body reader (``http.body.read_json``: the same 400s as every other wire) and are
still documented in ``/openapi.json``. Answers and streams: test_app.py, test_api.py."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from specdec.server.config import ServerConfig
from specdec.server.http.app import create_app
from specdec.server.http.metrics import Metrics

from .test_app import ScriptedWorker
from .tiny_api import word_tokenizer


@pytest.fixture(scope="module")
def client():
    worker = ScriptedWorker(word_tokenizer(), ["hello"])
    cfg = ServerConfig(model="m", allowed_hosts=("testserver",))
    return TestClient(create_app(cfg, worker, Metrics()))


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("raw, needle", [
    (b'{"model": "m", ', "not valid JSON"),
    (b'{"model": "m", "temperature": NaN}', "not JSON"),
    (b'{"model": "m", "x": "\\ud800"}', "lone surrogate"),
    (b'{"model": "m", "x": ' + b"[" * 100 + b"]" * 100 + b"}", "nests deeper"),
    (b"[1]", "JSON object"),
])
def test_bad_json_is_the_body_readers_400(client, path, raw, needle):
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    err = r.json()["error"]
    assert (r.status_code, err["code"], needle in err["message"]) == (400, "invalid_json", True), err


def test_a_field_problem_names_its_parameter(client):
    r = client.post("/v1/chat/completions", json={"model": "m", "messages": [], "top_p": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] in ("messages", "top_p")


def test_the_bodies_are_documented(client):
    schema = client.get("/openapi.json").json()
    for path, model in (("/v1/chat/completions", "ChatCompletionRequest"),
                        ("/v1/completions", "CompletionRequest")):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert "speculative" in schema["components"]["schemas"][model]["properties"]
