"""One reader for the JSON bodies of the wires whose routes read ``request.json()``
themselves (Anthropic's, the Responses API's, Ollama's): every parse failure is a 400 in
the wire's own error shape (``errors.surface_body`` picks it by path), never a 500.

Contract: ``read_json`` parses off the event loop (a 4 MiB body must not stall ``/health``)
and refuses, each with a 400 that says what to change: text that is not JSON, JSON nested
deeper than ``MAX_BODY_DEPTH`` (checked by an iterative walk: no recursion to overflow),
NaN/Infinity (not JSON; they could not be echoed back), strings holding lone surrogates
(not UTF-8; they could not be echoed or stored), a top level that is not an object. The
size limit is ``middleware.LimitBody``'s, ahead of every route. So every field a wire
echoes or stores was valid JSON text when it was admitted. ``parse`` is ``read_json`` checked
by a wire's pydantic model (the chat and Anthropic wires'), a 400 naming the first problem.
Tests: tests/server/test_body.py, tests/server/test_attacks.py (the wire x attack table).
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ValidationError

from .errors import APIError, validation_error

# generous for real agents: tool schemas are bounded at 32 levels (tool_schemas) inside
# a body's own few levels; 64 leaves room and bounds every recursive walk downstream
MAX_BODY_DEPTH = 64


class BodyError(ValueError):
    """Why a body is refused (a 400's message)."""


def _no_constant(name: str) -> Any:
    raise BodyError(f"{name} is not JSON: send numbers as finite numbers")


def check_tree(value: Any, max_depth: int = MAX_BODY_DEPTH) -> None:
    """Raise ``BodyError`` if ``value`` nests deeper than ``max_depth``, holds a string
    that is not valid UTF-8 (a lone surrogate) or a number that is not finite. Iterative:
    any depth is safe to check. The chat wire's models run it too (``wires.chat_schemas``)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise BodyError("NaN and Infinity are not JSON: send finite numbers")
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    raise BodyError("a string holds a lone surrogate (\\ud800-\\udfff "
                                    "unpaired): send valid UTF-8 text") from None
            continue
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) \
            else None
        if children is None:
            continue
        if depth > max_depth:
            raise BodyError(f"the JSON nests deeper than {max_depth} levels; flatten it")
        if isinstance(node, dict):
            stack.extend((k, depth) for k in node)
        stack.extend((c, depth + 1) for c in children)


def parse_json(data: bytes) -> Any:
    """``data`` as a checked JSON object; ``BodyError`` says why not."""
    try:
        raw = json.loads(data, parse_constant=_no_constant)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError(f"the JSON nests deeper than {MAX_BODY_DEPTH} levels; flatten it") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError alike
        raise BodyError(f"the request body is not valid JSON ({e})") from None
    check_tree(raw)
    if not isinstance(raw, dict):
        raise BodyError("the request body must be a JSON object")
    return raw


async def read_json(request: Request) -> dict[str, Any]:
    """The request's JSON object, parsed and checked off the event loop; a 400 otherwise."""
    data = await request.body()
    try:
        return await run_in_threadpool(parse_json, data)
    except BodyError as e:
        raise APIError(400, f"{e}. Send a JSON object with Content-Type: application/json.",
                       code="invalid_json") from None


async def parse(request: Request, model: type[BaseModel]) -> Any:
    """``request``'s JSON body checked by ``model``; a 400 naming the first problem. A body
    sent as another media type (a form, text) is refused, as OpenAI's routes always did here;
    no Content-Type at all is read as JSON."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and not (ctype == "application/json" or ctype.endswith("+json")):
        raise APIError(400, f"the request body is sent as {ctype!r}: send a JSON object with "
                       "Content-Type: application/json", code="invalid_json")
    raw = await read_json(request)  # 400s for bad JSON, too deep, NaN, lone surrogates
    try:
        return await run_in_threadpool(model.model_validate, raw)  # 4 MiB: off the loop
    except ValidationError as e:
        raise validation_error([{**x, "loc": ("body", *x["loc"])} for x in e.errors()]) from None
