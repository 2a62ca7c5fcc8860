"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``): a pure
translation of the engine's stream (the request mapped by ``anthropic_request`` to the
engine's request value, its chunks folded by ``anthropic_reply`` into an Anthropic message
or SSE events).

Contract: the wire renders and tokenizes nothing: ``Api.queue`` does, once, and fits
``max_tokens`` to the room (``fit``); a request refused before its first token (or before
``HEADERS_AFTER_S``) gets a proper status, a slow stream gets headers and pings; the body is
read by ``body.read_json`` (a 400 in Anthropic's shape). Tests: tests/server/test_anthropic.py.
Details: docs/batching-and-server.md#the-anthropic-wire."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.events import NoTokens
from ..http.errors import APIError, internal_error, surface_body
from .anthropic_reply import Blocks, message
from .anthropic_request import CountRequest, MessagesRequest, chat_spec
from .chat import CLIENT_CLOSED, SSE_HEADERS, parse

if TYPE_CHECKING:  # the engine's handle is passed in (``register``)
    from ..engine.api import Api

HEADERS_AFTER_S = 5.0  # a stream not started by then gets its headers and pings meanwhile
PING_S = 10.0


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


async def _whole(chunks: AsyncGenerator[dict[str, Any], None], blocks: Blocks, msg_id: str, model: str) -> dict:
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            blocks.feed(chunk)
    blocks.end()
    return message(msg_id, model, [b.whole() for b in blocks.blocks], blocks.usage_json(),
                    blocks.stop_reason(), blocks.stop_sequence())


async def _first(pending: asyncio.Future, wait: float | None) -> bool:
    """Whether ``pending`` (``api.chat`` starting) finished within ``wait`` seconds."""
    done, _ = await asyncio.wait({pending}, timeout=wait)
    return bool(done)


async def _stream(pending: asyncio.Future, blocks: Blocks, msg_id: str, model: str,
                  n_prompt: int, no_tokens: type[Exception]) -> AsyncIterator[str]:
    usage = {"input_tokens": n_prompt, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": 0}
    yield _sse("message_start", {"message": message(msg_id, model, [], usage)})
    yield _sse("ping", {})
    try:
        while not await _first(pending, PING_S):  # a long prefill: keep the stream alive
            yield _sse("ping", {})
        chunks = pending.result()
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                for kind, data in blocks.feed(chunk):
                    yield _sse(kind, data)
        for kind, data in blocks.end():
            yield _sse(kind, data)
    except APIError as e:  # after the headers: the stream's own error event
        yield _sse("error", {"error": surface_body(e, "/v1/messages")["error"]})
    except no_tokens:  # the client left before the first token: nobody reads on
        return
    except Exception as e:  # noqa: BLE001 (a bug: still end the stream in Anthropic's shape)
        err = internal_error(e, "/v1/messages")
        yield _sse("error", {"error": surface_body(err, "/v1/messages")["error"]})
    finally:
        pending.cancel()  # the client left while the request waited (a no-op once started)


def register(app: Any, api: Api) -> None:
    """Add this surface's routes to ``app``, each served through ``api.chat``."""

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        req = await parse(request, MessagesRequest)
        api.check_model(req.model)  # a 404 before the mapping's 400s
        spec = chat_spec(req, api.traits.thinking_switch)
        queued = await api.queue(request, spec)  # refused here (400, 503): a status
        pending = asyncio.ensure_future(api.chat(request, spec, queued))
        pending.add_done_callback(lambda f: f.cancelled() or f.exception())  # read here or later
        try:  # an error before the first token: a proper status, not an event
            started = await _first(pending, HEADERS_AFTER_S if req.stream else None)
        except BaseException:
            pending.cancel()
            raise
        try:
            chunks = pending.result() if started else None
        except NoTokens:
            return Response(status_code=CLIENT_CLOSED)  # the client left: nobody reads an answer
        blocks, msg_id = Blocks(list(spec.stop) or None), "msg_" + uuid.uuid4().hex
        if not req.stream:
            if chunks is None:  # waited for without a limit: it has started
                raise RuntimeError("a non-streamed message's request did not start")
            return JSONResponse(await _whole(chunks, blocks, msg_id, req.model))
        return StreamingResponse(_stream(pending, blocks, msg_id, req.model, queued.prompt_tokens,
                                         NoTokens),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> dict[str, int]:
        req = await parse(request, CountRequest)
        api.check_model(req.model)
        return {"input_tokens": await api.count(chat_spec(req, api.traits.thinking_switch))}
