"""OpenAI-style errors (``specdec.server.http.errors``): one body shape with the status's type,
the wire shape of each surface, pydantic's validation errors as 400s naming their
parameter, and FastAPI's own failures (404, 405, 422, a bug) answered in that shape."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.testclient import TestClient

from specdec.server.http.errors import (APIError, error_response, install_handlers, surface_body,
                                   validation_error)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    n: int = 1
    stop: list[str] | str | None = None


def errors_of(payload):
    with pytest.raises(ValidationError) as e:
        Body.model_validate(payload)
    return list(e.value.errors())


def test_the_body_and_its_type_by_status():
    err = APIError(400, "n: must be 1", param="n")
    assert err.body() == {"error": {"message": "n: must be 1", "type": "invalid_request_error",
                                    "param": "n", "code": None}}
    assert APIError(503, "busy").type == "server_error"
    assert APIError(418, "x").type == "invalid_request_error"
    assert APIError(400, "x", type="custom").type == "custom" and str(err) == "n: must be 1"


def test_each_surface_gets_its_own_wire_shape():
    err = APIError(503, "queue full", headers={"Retry-After": "1"})
    assert surface_body(err, "/v1/messages") == {"type": "error", "error": {
        "type": "overloaded_error", "message": "queue full"}}
    assert surface_body(err, "/api/chat") == {"error": "queue full"}
    assert surface_body(err, "/v1/chat/completions") == err.body()
    r = error_response(err, "/v1/chat/completions")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"


@pytest.mark.parametrize("payload, message, param, code", [
    ({"n": 1}, "model: Field required", "model", "missing_required_parameter"),
    ({"model": "m", "n": "x"}, "n: Input should be a valid integer", "n", "invalid_value"),
    ({"model": "m", "best_of": 2}, "best_of: unknown parameter", "best_of", "unknown_parameter"),
    ({"model": "m", "stop": [1]}, "stop.0: Input should be a valid string", "stop.0",
     "invalid_value"),
    ([], "the request body must be a JSON object", None, "invalid_value"),
])
def test_validation_errors_name_their_parameter(payload, message, param, code):
    err = validation_error([{**e, "loc": ("body", *e["loc"])} for e in errors_of(payload)])
    assert (err.status, err.param, err.code) == (400, param, code)
    assert err.message.startswith(message)


def test_the_count_of_the_other_problems_and_invalid_json():
    err = validation_error([{**e, "loc": ("body", *e["loc"])} for e in errors_of({"n": "x"})])
    assert err.message.endswith("(and 1 more problems)")
    bad = validation_error([{"type": "json_invalid", "loc": ("body", 3),
                             "ctx": {"error": "Expecting value"}}])
    assert bad.code == "invalid_json" and "not valid JSON (Expecting value)" in bad.message


def test_fastapis_own_failures_come_in_the_same_shape():
    app = FastAPI()
    install_handlers(app)

    @app.post("/v1/echo")
    def echo(body: Body) -> dict:
        return {"n": body.n}

    @app.get("/v1/boom")
    def boom() -> dict:
        raise RuntimeError("kaput")

    @app.get("/api/refuse")
    def refuse() -> dict:
        raise APIError(404, "model 'x' not found")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.post("/v1/echo", json={"model": "m", "n": "many"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    r = client.get("/v1/nowhere")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
    r = client.get("/v1/echo")
    assert r.status_code == 405
    assert r.json()["error"]["message"] == "GET is not allowed on /v1/echo."
    r = client.get("/v1/boom")
    assert r.status_code == 500
    message = r.json()["error"]["message"]  # the detail is in the log only
    assert message.startswith("internal error (request id req_") and "kaput" not in message
    assert client.get("/api/refuse").json() == {"error": "model 'x' not found"}
