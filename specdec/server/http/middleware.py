"""ASGI middleware around the FastAPI app, outermost first: ``AccessLog`` (one line per
request, with the error's reason), ``CountRequests`` (every status in the metrics),
``LimitInFlight`` (503 + Retry-After past the in-flight cap, before any work),
``AllowHosts`` (400 for a foreign Host: no DNS rebinding), ``RequireKey`` (401 without the
Bearer or ``x-api-key`` key; /health open), ``LimitBody`` (413 past the limit, announced or
chunked).

Invariant: a refusal drains the body up to ``DRAIN_CAP`` first, so an uploading client
reads the answer; every body read (LimitBody's and each refusal's drain) waits at most
``body_timeout`` seconds for the next piece (``--body-timeout``, one value for the stack).
Tests: tests/server/test_middleware.py. Details: docs/batching-and-server.md#middleware."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, error_response
from .metrics import Metrics

DRAIN_CAP = 64 << 20
BODY_READ_TIMEOUT_S = 30.0  # --body-timeout's default: the longest wait for a body's next piece
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/messages",
             "/v1/messages/count_tokens", "/v1/responses", "/v1/models", "/api/chat",
             "/api/generate", "/api/tags", "/api/show", "/api/version", "/api/ps", "/health",
             "/metrics")


def endpoint_label(path: str) -> str:
    """A bounded label set: fuzzed or scanned paths must not grow the metrics."""
    for e in ENDPOINTS:
        if path == e or (e in ("/v1/models", "/v1/responses") and path.startswith(e + "/")):
            return e
    return "other"


async def drain(receive: Receive, timeout: float, seen: int = 0) -> None:
    """Read the body up to DRAIN_CAP; a client that stops sending is not waited for past
    ``timeout`` seconds (a refused slowloris held its task until shutdown)."""
    more = True
    while more and seen <= DRAIN_CAP:
        try:
            msg = await asyncio.wait_for(receive(), timeout)
        except asyncio.TimeoutError:
            return
        if msg["type"] != "http.request":
            return
        seen += len(msg.get("body", b""))
        more = msg.get("more_body", False)


async def refuse(err: APIError, scope: Scope, receive: Receive, send: Send, timeout: float,
                 seen: int = 0, body_done: bool = False) -> None:
    if not body_done:
        await drain(receive, timeout, seen)
    await error_response(err, scope["path"])(scope, receive, send)


ACCESS = logging.getLogger("specdec.access")
_REASON_BYTES = 4096  # enough of an error body to read its message
_SSE_ERROR = b'data: {"error": '


def error_reason(body: bytes) -> str | None:
    """The first line of an OpenAI error body's message (or of the body, if not one)."""
    text = body.decode("utf-8", "replace")
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text
    return str(message).strip().split("\n", 1)[0] or None


class AccessLog:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status, body = time.perf_counter(), [500], bytearray()
        reason: list[str | None] = [None]

        async def record(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            elif msg["type"] == "http.response.body":
                chunk = msg.get("body", b"")
                if status[0] >= 400 and len(body) < _REASON_BYTES:
                    body.extend(chunk[: _REASON_BYTES - len(body)])
                elif chunk.startswith(_SSE_ERROR) and reason[0] is None:  # a stream failed
                    reason[0] = error_reason(chunk[len(b"data: "):].strip())
            await send(msg)

        try:
            await self.app(scope, receive, record)
        except BaseException as e:
            reason[0] = f"{type(e).__name__}: {e}"
            raise
        finally:
            if status[0] >= 400 and reason[0] is None:
                reason[0] = error_reason(bytes(body)) or _STATUS_REASONS.get(status[0])
            self._line(scope, status[0], time.perf_counter() - start, reason[0])

    @staticmethod
    def _line(scope: Scope, status: int, seconds: float, reason: str | None) -> None:
        client = scope.get("client")
        who = f"{client[0]}:{client[1]}" if client else "-"
        why = f" reason={json.dumps(reason, ensure_ascii=False)}" if reason else ""
        ACCESS.info("%s %s %d %.3fs client=%s%s", scope["method"], scope["path"], status,
                    seconds, who, why)


_STATUS_REASONS = {499: "the client closed the connection", 500: "no answer (the app crashed)"}


class CountRequests:
    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = [500]  # if nothing was sent, the app crashed

        async def record(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, record)
        finally:
            self.metrics.on_request(endpoint_label(scope["path"]), status[0])


TENANT_SCOPE_KEY = "specdec.tenant"  # the ASGI scope entry RequireKey sets
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
# what a key guards besides the APIs: the metrics and the schema of every route
GUARDED = ("/metrics", "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect")


def host_name(header: bytes) -> str:
    """``Host`` without its port (``[::1]:8080`` -> ``[::1]``), lower-cased."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[: text.find("]") + 1] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


class AllowHosts:
    def __init__(self, app: ASGIApp, hosts: tuple[str, ...], body_timeout: float):
        self.app, self.hosts, self.body_timeout = app, {h.lower() for h in hosts}, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = host_name(dict(scope["headers"]).get(b"host", b""))
        if given in self.hosts:
            return await self.app(scope, receive, send)
        err = APIError(400, f"Host {given!r} is not served here: this server answers only "
                       f"{', '.join(sorted(self.hosts))} (start it with --allowed-hosts to add "
                       "names).", code="invalid_host")
        await refuse(err, scope, receive, send, self.body_timeout)


class RequireKey:
    def __init__(self, app: ASGIApp, keys: tuple[str, ...], body_timeout: float):
        self.app, self.body_timeout = app, body_timeout
        self.keys = [(f"Bearer {k}".encode(), k.encode()) for k in keys]
        # with several keys each is a tenant (its own prefix cache and drafting memory);
        # with one, everything is shared as before
        self.tenants = [f"key{i}" if len(keys) > 1 else "" for i in range(len(keys))]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path.startswith(("/v1", "/api/")) or path in GUARDED):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        given, anthropic = headers.get(b"authorization", b""), headers.get(b"x-api-key", b"")
        # every key and both headers compared, always: the time says nothing of which matched
        matched = None
        for i, (bearer, key) in enumerate(self.keys):
            if hmac.compare_digest(given, bearer) | hmac.compare_digest(anthropic, key):
                matched = i
        if matched is not None:
            scope[TENANT_SCOPE_KEY] = self.tenants[matched]
            return await self.app(scope, receive, send)
        what = "is missing" if not (given or anthropic) else "is wrong"
        err = APIError(401, f"The API key {what}: send the header 'Authorization: Bearer <key>' "
                       "(or Anthropic's 'x-api-key: <key>') with the key the server was "
                       "started with (--api-key).",
                       code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        await refuse(err, scope, receive, send, self.body_timeout)


class LimitBody:
    def __init__(self, app: ASGIApp, limit: int, body_timeout: float):
        self.app, self.limit, self.body_timeout = app, limit, body_timeout

    def _too_large(self, size: str) -> APIError:
        return APIError(413, f"The request body is {size} bytes; this server accepts at most "
                        f"{self.limit} (--max-body-bytes). Shorten the prompt or raise the limit.",
                        code="request_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await refuse(self._too_large(declared.decode()), scope, receive, send,
                                self.body_timeout)
        chunks, size, more = [], 0, True
        while more:
            try:  # a client that stops sending its body (slowloris) does not hold a slot
                msg = await asyncio.wait_for(receive(), self.body_timeout)
            except asyncio.TimeoutError:
                err = APIError(408, f"the request body did not arrive within "
                               f"{self.body_timeout:g} s (--body-timeout)", code="request_timeout")
                return await refuse(err, scope, receive, send, self.body_timeout, body_done=True)
            if msg["type"] != "http.request":  # the client left before sending it all
                return
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            more = msg.get("more_body", False)
            if size > self.limit:
                err = self._too_large(f"more than {self.limit}")
                return await refuse(err, scope, receive, send, self.body_timeout, size,
                                    body_done=not more)
        await self.app(scope, _replay(b"".join(chunks), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class LimitInFlight:
    """At most ``limit`` requests in the app at once; the next get the queue's own 503
    with Retry-After. uvicorn's ``limit_concurrency`` alone counts connections and refuses
    every request, even the first, while a burst holds more sockets than the limit, with
    a bare text 503 and no Retry-After (a 1000-request burst got nothing but that)."""

    def __init__(self, app: ASGIApp, limit: int, body_timeout: float):
        self.app, self.limit, self.in_flight, self.body_timeout = app, limit, 0, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/health":  # probes always answered
            return await self.app(scope, receive, send)
        if self.in_flight >= self.limit:
            err = APIError(503, f"{self.limit} requests are in flight, this server's limit "
                           "(--queue-size + --max-batch + 64); retry later", code="queue_full",
                           headers={"Retry-After": "1"})
            return await refuse(err, scope, receive, send, self.body_timeout)
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def wrap(app: ASGIApp, metrics: Metrics, api_keys: tuple[str, ...], max_body_bytes: int,
         hosts: tuple[str, ...] | None = None, max_in_flight: int | None = None,
         body_timeout: float = BODY_READ_TIMEOUT_S) -> ASGIApp:
    """The stack; ``hosts`` None: any Host header (a server bound to a public address);
    ``body_timeout``: every layer's longest wait for the next piece of a body."""
    inner: ASGIApp = LimitBody(app, max_body_bytes, body_timeout)
    if api_keys:
        inner = RequireKey(inner, api_keys, body_timeout)
    if hosts is not None:
        inner = AllowHosts(inner, hosts, body_timeout)
    if max_in_flight is not None:
        inner = LimitInFlight(inner, max_in_flight, body_timeout)
    return AccessLog(CountRequests(inner, metrics))
