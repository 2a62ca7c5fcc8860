"""OpenAI-style errors: one exception type, one body shape, handlers for FastAPI.

Contract: every error the server answers has the body
``{"error": {"message", "type", "param", "code"}}`` and the status of the failure:
400 invalid request (FastAPI's 422 validation errors are turned into 400s), 401 bad or
missing API key, 404 unknown model or path, 405 wrong method, 413 body too large, 503
queue full or shutting down (with ``Retry-After``), 500 a bug. ``APIError`` carries all
of it; ``error_response`` renders one; ``install_handlers(app)`` maps FastAPI's own
exceptions onto that shape so no request ever gets FastAPI's default ``{"detail": ...}``.
Messages say what to change, not just what is wrong.
Tests: tests/server/test_errors.py.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

log = logging.getLogger("specdec.server")

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 413: "invalid_request_error", 503: "server_error",
          500: "server_error"}
# pydantic error types -> OpenAI-ish codes
_CODES = {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter",
          "json_invalid": "invalid_json"}
# union members and validators appear in pydantic locations as tags like "list[int]"
_TAG = re.compile(r"[\[\]\-]|^(str|int|float|bool|list|dict|none|literal)$")


class APIError(Exception):
    """An error to answer with ``status`` and the OpenAI error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


# Anthropic's error types by status (its Messages API documents these).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}


def surface_body(err: APIError, path: str) -> dict[str, Any]:
    """The error body in the wire shape of the surface ``path`` belongs to: Anthropic's
    for ``/v1/messages``, Ollama's (``{"error": message}``) for ``/api/``, else OpenAI's."""
    if path.startswith("/v1/messages"):
        kind = _ANTHROPIC_TYPES.get(err.status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": err.message}}
    if path.startswith("/api/"):
        return {"error": err.message}
    return err.body()


def error_response(err: APIError, path: str = "") -> JSONResponse:
    return JSONResponse(surface_body(err, path), status_code=err.status, headers=err.headers)


def _param(loc: tuple) -> str | None:
    parts = [str(p) for p in loc[1:] if isinstance(p, int) or not _TAG.search(str(p))]
    return ".".join(parts) or None


def validation_error(errors: Sequence[Mapping[str, Any]]) -> APIError:
    """The first pydantic/FastAPI validation error as a 400 (the count of the rest)."""
    first = errors[0]
    kind, param = first.get("type", ""), _param(tuple(first.get("loc", ())))
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", first.get("msg", ""))
        return APIError(400, f"The request body is not valid JSON ({detail}). Send a JSON "
                        "object with Content-Type: application/json.", code="invalid_json")
    msg = first.get("msg", "invalid value")
    if kind == "extra_forbidden":
        msg = "unknown parameter; this server does not support it (see GET /openapi.json)"
    elif kind == "missing" and param is None:
        msg = "the request needs a JSON object body"
    elif kind.endswith("_type") and param is None:
        msg = "the request body must be a JSON object"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    where = f"{param}: " if param else ""
    return APIError(400, f"{where}{msg}{more}", param=param, code=_CODES.get(kind, "invalid_value"))


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(exc.errors())), request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            err = APIError(404, f"Unknown path {request.url.path!r}. This server serves "
                           "/v1/chat/completions, /v1/completions, /v1/messages, /v1/responses, "
                           "/v1/models, Ollama's /api/*, /health, /metrics.", code="unknown_url")
        elif exc.status_code == 405:
            err = APIError(405, f"{request.method} is not allowed on {request.url.path}.",
                           code="method_not_allowed")
        else:
            err = APIError(exc.status_code, str(exc.detail))
        err.headers.update(exc.headers or {})
        return error_response(err, request.url.path)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        return error_response(internal_error(exc, request.url.path), request.url.path)


def internal_error(exc: BaseException, where: str) -> APIError:
    """A bug's 500: the detail (which may quote a client's text) only in the server log,
    under a request id the body names, so an operator can find it."""
    rid = "req_" + uuid.uuid4().hex[:16]
    log.error("internal error %s on %s", rid, where, exc_info=exc)
    return APIError(500, f"internal error (request id {rid}); the server log has the detail",
                    code="internal_error")
