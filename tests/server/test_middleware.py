"""specdec/server/middleware.py's stack (``wrap``) under a real uvicorn on a loopback
socket, in process: refusals past the in-flight limit do not wait on a client that stops
sending its body. The app inside is a stand-in for a long generation (it holds its slot
until released); the server-process tests are tests/server/test_api.py and test_attacks.py."""

from __future__ import annotations

import asyncio
import socket
import threading

import httpx
import pytest
import uvicorn
from serverproc import free_port

from specdec.server import middleware
from specdec.server.metrics import Metrics


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
    stack = middleware.wrap(app, Metrics(), (), 1 << 20, max_in_flight=1)
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


def test_a_refused_slowloris_is_answered_after_the_body_read_timeout(served, monkeypatch):
    """The only slot is held; 4 sockets send half a body and stop. Each is refused (503)
    once the body-read timeout passes, instead of its task waiting for the body until
    shutdown; after the holder finishes, a normal request is answered."""
    monkeypatch.setattr(middleware, "BODY_READ_TIMEOUT_S", 0.5)
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
