"""The FastAPI application: every wire's routes in front of the inference worker.

Contract: ``create_app(cfg, worker, metrics)`` returns the ASGI app to serve: ``GET /v1/models``
(and ``/v1/models/{id}``, with the context length), ``GET /health`` and ``GET /metrics``;
every wire's routes (``wires/``: OpenAI's chat and text completions, Anthropic's
``/v1/messages``, OpenAI's ``/v1/responses``, Ollama's ``/api/*``), each a translation of
``Api.chat`` (one request model, one generation path). The request logic is ``engine.api``; the app's shutdown
stops the worker, which saves the shared memory. Tests: tests/server/test_app.py, tests/server/.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from ..wires import anthropic, chat, ollama, responses
from ..engine.api import Api
from ..config import ServerConfig
from .errors import install_handlers
from .metrics import CONTENT_TYPE, Metrics
from .middleware import wrap
from ..engine.worker import InferenceWorker


def create_app(cfg: ServerConfig, worker: InferenceWorker, metrics: Metrics) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(worker.stop)

    app = FastAPI(title="specdec", description="OpenAI-compatible speculative decoding server",
                  lifespan=lifespan)
    install_handlers(app)
    api = Api(cfg, worker)
    metrics.watch(lambda: len(worker.queue), lambda: worker.busy, lambda: worker.kv_reserved,
                  lambda: worker.kv.budget if worker.kv is not None else 0)
    _routes(app, api, cfg, worker, metrics)
    return wrap(app, metrics, cfg.keys(), cfg.max_body_bytes, cfg.host_allowlist(),
                cfg.max_in_flight(), cfg.body_timeout)


def _routes(app: FastAPI, api: Api, cfg: ServerConfig, worker: InferenceWorker,
            metrics: Metrics) -> None:
    model_card = {"id": cfg.model_id, "object": "model", "created": 0, "owned_by": "specdec",
                  "context_length": worker.context_length}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        api.check_model(model_id)
        return model_card

    @app.get("/health")
    async def health() -> Response:
        body = {"status": "ok" if worker.alive else "stopping", "model": cfg.model_id,
                "context_length": worker.context_length, "queue_depth": len(worker.queue),
                "queue_size": cfg.queue_size, "running": worker.busy,
                "max_batch": worker.max_batch, "one_at_a_time": worker.one_at_a_time,
                "memory": {k: v for k, v in worker.memory.info().items() if k != "file"},
                "kv": worker.kv.info(worker.kv_reserved) if worker.kv is not None else None,
                "mlx_limits": worker.limits.info() if worker.limits is not None else None}
        return JSONResponse(body, status_code=200 if worker.alive else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    for wire in (chat, anthropic, responses, ollama):  # translations of ``Api.chat``
        wire.register(app, api)
