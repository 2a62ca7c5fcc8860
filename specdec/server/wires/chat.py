"""OpenAI's own wire: ``POST /v1/chat/completions`` and ``/v1/completions`` (JSON, or
Server-Sent Events ending with ``data: [DONE]``), a translation of ``Api.chat``'s stream.

Contract: the body is read by ``body.read_json`` (the one reader: every wire's 400s for bad
JSON, depth, NaN, lone surrogates) and checked by its pydantic model (``chat_schemas``); the
request runs as the ``ChatSpec`` its ``.spec`` maps it to (the engine's request value); a request that
ends before its first token answers with its error status (or 499 once the client left).
Tests: tests/server/test_app.py, tests/server/test_api.py, tests/server/test_body.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.events import DoneEvent, ErrorEvent, NoTokens, TokenEvent
from .chat_schemas import ChatCompletionRequest, CompletionRequest
from ..http.body import parse
from ..http.errors import APIError

if TYPE_CHECKING:  # the engine's handle is passed in (``register``); its types only
    from ..engine.api import Api
    from ..engine.run import Run

CLIENT_CLOSED = 499  # nginx's status for "the client went away"; only metrics ever see it
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_DONE = "data: [DONE]\n\n"


def sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def complete(api: Api, request: Request,
                   body: ChatCompletionRequest | CompletionRequest) -> Response:
    """One chat or text completion, whole or streamed."""
    try:
        run = await api.first(await api.queue(request, body.spec(api.traits.thinking_switch)))
    except NoTokens as e:
        return answer_without_tokens(e.event)
    if not body.stream:
        return await _whole(api, run)
    usage = body.stream_options is not None and body.stream_options.include_usage
    return StreamingResponse(_events(api, run, usage), media_type="text/event-stream",
                             headers=SSE_HEADERS)


async def _whole(api: Api, run: Run) -> Response:
    tokens: list[TokenEvent] = []
    event = run.first
    try:
        while isinstance(event, TokenEvent):
            tokens.append(event)
            event = await run.job.events.get()
    finally:
        run.watch.stop()
        api.worker.cancel(run.job)  # a no-op unless this handler was itself cancelled
    if isinstance(event, ErrorEvent) or event.finish_reason == "cancelled":
        return answer_without_tokens(event)
    return JSONResponse(run.responder.whole(tokens, event))


async def _events(api: Api, run: Run, include_usage: bool) -> AsyncIterator[str]:
    try:
        async for chunk in api.chunks(run, include_usage):
            yield sse(chunk)
    except APIError as e:
        yield sse(e.body())
    yield SSE_DONE


def answer_without_tokens(event: ErrorEvent | DoneEvent) -> Response:
    if isinstance(event, ErrorEvent):
        return JSONResponse(event.error.body(), status_code=event.error.status,
                            headers=event.error.headers)
    return Response(status_code=CLIENT_CLOSED)  # cancelled: nobody is there to read it


def document(app: Any, bodies: dict[str, type[BaseModel]]) -> None:
    """Name each route's body model in ``app``'s OpenAPI schema (``GET /openapi.json``, which
    the 400 for an unknown parameter points to): the routes read their bodies themselves."""
    make = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = make()
            models: dict[str, Any] = {}
            for path, model in bodies.items():
                js = model.model_json_schema(ref_template="#/components/schemas/{model}")
                models.update(js.pop("$defs", {}), **{model.__name__: js})
                ref = {"$ref": f"#/components/schemas/{model.__name__}"}
                schema["paths"][path]["post"]["requestBody"] = {
                    "required": True, "content": {"application/json": {"schema": ref}}}
            schema.setdefault("components", {}).setdefault("schemas", {}).update(models)
        return app.openapi_schema

    app.openapi = openapi


def register(app: Any, api: Api) -> None:
    """Add OpenAI's completion routes to ``app`` (their bodies documented)."""
    document(app, {"/v1/chat/completions": ChatCompletionRequest,
                   "/v1/completions": CompletionRequest})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(api, request, await parse(request, ChatCompletionRequest))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(api, request, await parse(request, CompletionRequest))
