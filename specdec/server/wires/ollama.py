"""Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version,
GET|HEAD /) as a thin adapter onto ``Api.chat``: the routes.

Invariant: each generation is one request run by ``Api.chat`` (built by ``ollama_request``);
its OpenAI chunks become NDJSON lines (``stream`` defaults to true, as in Ollama) or one
object (``ollama_stream``). Omitted options keep the server's defaults (greedy unless
``--temp``), not Ollama's temperature 0.8. Accepted and ignored: ``keep_alive``, load-time
options (``num_ctx``, ``num_gpu``, ``num_thread``...), ``num_keep``, ``repeat_last_n``,
``typical_p``, ``tfs_z``, ``mirostat*``, ``penalize_newline``, a message's ``thinking``.
Tests: tests/server/test_ollama.py.
"""

from __future__ import annotations

import time
from typing import Any, TYPE_CHECKING

from fastapi import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from ..engine.events import NoTokens
from ..http.errors import APIError
from .ollama_models import model_card, now, show
from .ollama_request import ChatBody, GenerateBody, ShowBody, Surface, read_body
from .ollama_stream import Piece, Shape, chat_fields, generate_fields, ndjson_lines, whole_answer
from ..engine.spec import ChatSpec

if TYPE_CHECKING:  # the engine's handle is passed in (``register``); its type only
    from ..engine.api import Api


# Clients gate features on the server's version (tools from 0.3, structured outputs from
# 0.5, thinking from 0.9); 0.13.0 (Nov 2025) has all this surface implements.
OLLAMA_VERSION = "0.13.0"
NDJSON = "application/x-ndjson"
NEVER = "2318-01-01T00:00:00Z"  # the model stays loaded as long as the server runs


# -- routes --------------------------------------------------------------------------------


async def _run(api: Api, request: Request, spec: ChatSpec,
               name: str, stream: bool, shape: Shape, started: float) -> Response:
    """``spec`` through ``api.chat`` (a text completion runs there as well: the chunks
    then carry ``text``), answered whole or as NDJSON."""
    try:
        chunks = await api.chat(await api.queue(request, spec))
    except NoTokens:
        return Response(status_code=499)  # the client left before the first token
    if not stream:
        return JSONResponse(await whole_answer(chunks, name, shape, started))
    return StreamingResponse(ndjson_lines(chunks, name, shape, started), media_type=NDJSON)


def _loaded(name: str, shape: Shape) -> JSONResponse:
    """Ollama's answer to a request with nothing to generate: the model is loaded."""
    return JSONResponse({"model": name, "created_at": now(), **shape(Piece()),
                         "done_reason": "load", "done": True})


def register(app: Any, api: Api) -> None:
    """Add this surface's routes to ``app``, each served through ``api.chat``."""
    with api.worker.tokenizer_lock:
        has_template = getattr(api.worker.tokenizer, "chat_template", None) is not None
    s = Surface(api, has_template, api.traits.think, api.traits.thinking_switch)
    card = model_card(api)

    @app.post("/api/chat")
    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request, ChatBody)
        name = s.model(body.model)
        if not body.messages:
            return _loaded(body.model, chat_fields)
        return await _run(api, request, s.chat_spec(body, name), body.model, body.stream,
                          chat_fields, started)

    @app.post("/api/generate")
    async def generate(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request, GenerateBody)
        name = s.model(body.model)
        if not body.prompt and not body.system:
            return _loaded(body.model, generate_fields)
        return await _run(api, request, s.generate_spec(body, name), body.model, body.stream,
                          generate_fields, started)

    @app.get("/api/tags")
    async def tags() -> dict:
        return {"models": [card.listing]}

    @app.post("/api/show")
    async def show_model(request: Request) -> dict:
        body = await read_body(request, ShowBody)
        name = body.model or body.name
        if not name:
            raise APIError(400, "send the model's name: {\"model\": NAME} (GET /api/tags)",
                           param="model")
        s.model(name)
        return show(api, card, s.thinks)

    @app.get("/api/ps")
    async def ps() -> dict:
        return {"models": [{**card.listing, "expires_at": NEVER, "size_vram": 0,
                            "context_length": api.worker.context_length}]}

    @app.get("/api/version")
    async def version() -> dict:
        return {"version": OLLAMA_VERSION}

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)  # a liveness probe, no operation
    async def root() -> Response:
        return PlainTextResponse("Ollama is running")  # clients probe this before /api/*
