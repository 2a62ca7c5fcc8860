"""The ASGI middleware stack (``specdec.server.middleware``) in front of a small echo app,
in-process: body limits announced or chunked, API keys and tenants, the Host allow-list,
the in-flight cap, bounded metric labels and one access line per request with its reason."""

from __future__ import annotations

import json
import logging

from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from specdec.server.metrics import Metrics
from specdec.server.middleware import (ENDPOINTS, TENANT_SCOPE_KEY, endpoint_label, error_reason,
                                       host_name, wrap)


async def echo(scope, receive, send):
    """Answers the body's length and the tenant the key middleware chose."""
    body, more = b"", True
    while more:
        msg = await receive()
        body, more = body + msg.get("body", b""), msg.get("more_body", False)
    out = json.dumps({"bytes": len(body), "tenant": scope.get(TENANT_SCOPE_KEY)}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": out})


def client(keys=(), limit=2048, hosts=None, in_flight=None, metrics=None):
    app = wrap(echo, metrics or Metrics(), keys, limit, hosts, in_flight)
    return TestClient(app, base_url="http://localhost")


@given(st.text(max_size=30))
def test_metric_labels_are_bounded(path):
    assert endpoint_label(path) in (*ENDPOINTS, "other")


def test_labels_hosts_and_reasons():
    assert endpoint_label("/v1/models/smol") == "/v1/models"
    assert endpoint_label("/v1/chat/completions/x") == "other"
    assert [host_name(h) for h in (b"LocalHost:8080", b"[::1]:8080", b"::1", b"box")] == [
        "localhost", "[::1]", "::1", "box"]
    assert error_reason(b'{"error": {"message": "n: bad\\nmore"}}') == "n: bad"
    assert error_reason(b"Internal Server Error") == "Internal Server Error"
    assert error_reason(b"") is None


def test_bodies_past_the_limit_are_413_announced_or_chunked():
    c = client(limit=2048)
    assert c.post("/v1/echo", content=b"x" * 2048).json()["bytes"] == 2048
    r = c.post("/v1/echo", content=b"x" * 2049)
    assert r.status_code == 413 and "body is 2049 bytes" in r.json()["error"]["message"]
    r = c.post("/v1/echo", content=iter([b"x" * 1500, b"x" * 1500]))  # no content-length
    assert r.status_code == 413 and "more than 2048" in r.json()["error"]["message"]


def test_keys_guard_the_apis_and_choose_the_tenant():
    c = client(keys=("k1", "k2"))
    r = c.post("/v1/echo")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "The API key is missing" in r.json()["error"]["message"]
    assert "is wrong" in c.post("/v1/echo", headers={"Authorization": "Bearer k3"}).text
    assert c.post("/v1/echo", headers={"Authorization": "Bearer k2"}).json()["tenant"] == "key1"
    assert c.post("/api/chat", headers={"x-api-key": "k1"}).json()["tenant"] == "key0"
    assert c.get("/metrics").status_code == 401 and c.get("/health").status_code == 200
    assert client(keys=("k",)).get("/v1/x", headers={"x-api-key": "k"}).json()["tenant"] == ""


def test_a_foreign_host_is_refused_and_past_the_cap_is_503():
    c = client(hosts=("localhost",))
    assert c.get("/v1/x").status_code == 200
    r = c.get("/v1/x", headers={"Host": "evil.example:80"})
    assert r.status_code == 400 and "Host 'evil.example' is not served" in r.json()["error"]["message"]
    full = client(in_flight=0)
    r = full.post("/v1/chat/completions", content=b"{}")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert full.get("/health").status_code == 200  # probes always answered


def test_each_request_is_counted_and_logged_once(caplog):
    metrics = Metrics()
    c = client(limit=1024, metrics=metrics)
    with caplog.at_level(logging.INFO, logger="specdec.access"):
        c.post("/v1/chat/completions", content=b"x" * 2000)
        c.get("/nowhere")
    lines = [r.getMessage() for r in caplog.records if r.name == "specdec.access"]
    assert len(lines) == 2 and lines[0].startswith("POST /v1/chat/completions 413 ")
    assert 'reason="The request body is 2000 bytes' in lines[0] and "reason" not in lines[1]
    text = metrics.render().decode()
    assert 'specdec_requests_total{endpoint="/v1/chat/completions",status="413"} 1.0' in text
    assert 'specdec_requests_total{endpoint="other",status="200"} 1.0' in text
