"""OpenAI's Responses API (``/v1/responses``) as a thin adapter onto ``Api.chat``: the routes.

Contract: ``POST /v1/responses`` turns the request into one chat request
(``responses_input``), folds the chat chunks into output items, whole or as typed SSE
events (``responses_events.Folder``), and keeps the answer in a bounded
``ResponseStore`` (``store``, default true) behind ``previous_response_id``, GET and DELETE,
each seeing the calling API key's responses only. The body is read by ``body.read_json``
(every echoed field valid JSON text before any work). Accepted and ignored: include,
prompt_cache_key, user, service_tier, truncation, metadata (echoed), background,
top_logprobs, unknown fields. Tests: tests/server/test_responses.py,
tests/server/test_attacks.py (the wire x attack table).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.events import NoTokens
from ..http.body import read_json
from ..http.errors import APIError, validation_error
from .responses_events import Folder, skeleton
from .responses_input import (ResponsesRequest, chat_messages, chat_spec, input_items,
                                     map_tools)
from ..http.middleware import TENANT_SCOPE_KEY
from .responses_store import ResponseStore, Stored
from .chat import CLIENT_CLOSED, SSE_HEADERS

if TYPE_CHECKING:  # the engine's handle is passed in (``register``); its type only
    from ..engine.api import Api

__all__ = ["Folder", "ResponseStore", "Turn", "map_tools", "register"]  # tests import these here


@dataclass
class Turn:
    """One request in flight: its folder, and what the store keeps when it ends."""

    folder: Folder
    chunks: AsyncGenerator[dict[str, Any], None]
    earlier: Stored | None  # the previous response (its items are shared, never copied)
    new_items: list[dict[str, Any]]  # this turn's input (references resolved)
    store: ResponseStore | None
    tenant: str  # the API key's tenant: its own partition of the store

    def save(self) -> None:
        response = self.folder.response  # no finish reason: the client left, it was cut
        if self.store is not None and response["status"] != "failed" and self.folder.finish:
            self.store.put(self.tenant, response, self.new_items + response["output"],
                           self.earlier)


async def start_turn(request: Request, api: Api, store: ResponseStore) -> tuple[Turn, bool]:
    raw = await read_json(request)  # 400s for bad JSON, too deep, NaN, lone surrogates
    try:
        req = await run_in_threadpool(ResponsesRequest.model_validate, raw)  # 4 MiB: off the loop
    except ValidationError as e:  # validation_error reads loc[0] as FastAPI's "body"
        raise validation_error([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None
    tenant = request.scope.get(TENANT_SCOPE_KEY, "")
    earlier = store.get(tenant, req.previous_response_id, "previous_response_id") \
        if req.previous_response_id else None
    new_items = input_items(req, store, tenant)

    def conversation() -> list[dict[str, Any]]:  # a long chain: parsed off the event loop
        return chat_messages((earlier.history() if earlier else []) + new_items)

    messages = await run_in_threadpool(conversation)
    if req.instructions:
        messages.insert(0, {"role": "system", "content": req.instructions})
    if not messages:
        raise APIError(400, "input is empty: send a string or a list of message items",
                       param="input")
    tools = map_tools(req.tools)
    spec = chat_spec(req, messages, tools, api.traits.thinking_switch)
    chunks = await api.chat(await api.queue(request, spec))
    folder = Folder(skeleton(req, api.cfg.model_id, tools), tools.spaces)
    return Turn(folder, chunks, earlier, new_items, store if req.store else None, tenant), req.stream


async def stream_events(turn: Turn) -> AsyncIterator[str]:
    def frame(events: list[dict[str, Any]]) -> str:
        return "".join(f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n"
                       for e in events)

    yield frame(turn.folder.start())
    try:
        async with contextlib.aclosing(turn.chunks) as chunks:
            async for chunk in chunks:
                events = turn.folder.feed(chunk)
                if events:
                    yield frame(events)
    except APIError as e:
        yield frame(turn.folder.fail(e))
        return
    yield frame(turn.folder.end())
    turn.save()


def register(app: Any, api: Api) -> None:
    """Add this surface's routes to ``app``, each served through ``api.chat``."""

    store = app.state.responses_store = ResponseStore()

    @app.post("/v1/responses")
    async def create(request: Request) -> Response:
        try:
            turn, stream = await start_turn(request, api, store)
        except NoTokens:
            return Response(status_code=CLIENT_CLOSED)  # the client went away: nobody reads
        if stream:
            return StreamingResponse(stream_events(turn), media_type="text/event-stream",
                                     headers=SSE_HEADERS)
        async with contextlib.aclosing(turn.chunks) as chunks:
            async for chunk in chunks:
                turn.folder.feed(chunk)
        turn.folder.end()
        turn.save()
        return JSONResponse(turn.folder.response)

    @app.get("/v1/responses/{rid}")
    async def retrieve(rid: str, request: Request) -> Response:  # the caller's key's only
        stored = store.get(request.scope.get(TENANT_SCOPE_KEY, ""), rid)
        return Response(stored.response, media_type="application/json")

    @app.delete("/v1/responses/{rid}")
    async def delete(rid: str, request: Request) -> dict:
        store.delete(request.scope.get(TENANT_SCOPE_KEY, ""), rid)
        return {"id": rid, "object": "response", "deleted": True}
