"""The ASGI middleware stack (``specdec.server.http.middleware``) in process: in front of a small
echo app, body limits announced or chunked, API keys and tenants, the Host allow-list, the
in-flight cap, bounded metric labels and one access line per request with its reason; under a
real uvicorn on a loopback socket, refusals past the in-flight limit do not wait on a client
that stops sending its body (the app inside holds its slot until released). The server-process
tests are tests/server/test_api.py and test_attacks.py."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from serverproc import free_port
from starlette.testclient import TestClient

from specdec.server.http import middleware
from specdec.server.http.metrics import Metrics
from specdec.server.http.middleware import (ENDPOINTS, TENANT_SCOPE_KEY, endpoint_label, error_reason,
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


class HoldSlot:
    """An ASGI app: POST /hold answers only once ``release`` is set; anything else at once."""

    def __init__(self) -> None:
        self.release, self.holding = threading.Event(), threading.Event()

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":
            self.holding.set()
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def served():
    app, port = HoldSlot(), free_port()
    stack = middleware.wrap(app, Metrics(), (), 1 << 20, max_in_flight=1, body_timeout=0.5)
    server = uvicorn.Server(uvicorn.Config(stack, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.02)
    yield app, f"http://127.0.0.1:{port}", port
    app.release.set()
    server.should_exit = True
    thread.join(10)


def _half_body(port: int) -> socket.socket:
    """A slowloris: headers and half of the announced body, the rest never."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
              + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b"{" * 50)
    return s


def _status(s: socket.socket) -> int | None:
    s.settimeout(10)  # far past the 0.5 s body-read timeout: only a drain that never ends fails
    try:
        head = s.recv(64).split(b" ")
    except OSError:
        return None
    return int(head[1]) if len(head) > 1 and head[1].isdigit() else None


def test_a_refused_slowloris_is_answered_after_the_body_read_timeout(served):
    """The only slot is held; 4 sockets send half a body and stop. Each is refused (503)
    once the stack's body_timeout (0.5 s) passes, instead of its task waiting for the body
    until shutdown; after the holder finishes, a normal request is answered, and an admitted
    half body gets LimitBody's 408 after the same timeout."""
    app, base, port = served
    holder = threading.Thread(target=lambda: httpx.post(base + "/hold", content=b"{}", timeout=60))
    holder.start()
    assert app.holding.wait(10)
    slow = [_half_body(port) for _ in range(4)]
    try:
        statuses = [_status(s) for s in slow]
    finally:
        for s in slow:
            s.close()
    assert statuses == [503] * 4
    app.release.set()
    holder.join(10)
    assert httpx.post(base + "/v1/models", content=b"{}", timeout=10).status_code == 200
    admitted = _half_body(port)
    try:
        assert _status(admitted) == 408
    finally:
        admitted.close()
