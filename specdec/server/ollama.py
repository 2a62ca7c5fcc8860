"""Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version,
GET|HEAD /) as a thin adapter onto ``Api.chat``.

Invariant: each generation is one ``ChatCompletionRequest`` (a ``CompletionRequest`` for raw
generate, or a model without a chat template) run by ``Api.chat``; its OpenAI chunks become
NDJSON lines (``stream`` defaults to true, as in Ollama) or one object. Tool calls go out
whole with object arguments; ``tool`` messages answer the calls before them in order (or
by ``tool_call_id`` / ``tool_name``). Omitted options keep the server's defaults (greedy
unless ``--temp``), not Ollama's temperature 0.8. Accepted and ignored: ``keep_alive``,
load-time options (``num_ctx``, ``num_gpu``, ``num_thread``...), ``num_keep``,
``repeat_last_n``, ``typical_p``, ``tfs_z``, ``mirostat*``, ``penalize_newline``, a
message's ``thinking``. Tests: tests/server/test_ollama.py.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from .api import Api, NoTokens
from .ollama_models import model_card, now, show
from .errors import APIError, validation_error
from .schemas import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("specdec.server")

# Clients gate features on the server's version (tools from 0.3, structured outputs from
# 0.5, thinking from 0.9); 0.13.0 (Nov 2025) has all this surface implements.
OLLAMA_VERSION = "0.13.0"
NDJSON = "application/x-ndjson"
NEVER = "2318-01-01T00:00:00Z"  # the model stays loaded as long as the server runs
# ChatCompletionRequest's names -> Ollama's, for 400 messages that name what was sent
RENAMES = {"max_tokens": "options.num_predict", "repetition_penalty": "options.repeat_penalty",
           "response_format": "format", "chat_template_kwargs": "think",
           **{k: f"options.{k}" for k in ("temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                          "presence_penalty", "frequency_penalty")}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # Ollama adds fields often


class FunctionCall(_Body):
    name: str
    arguments: dict[str, Any] | str = {}
    index: int | None = None


class ToolCall(_Body):
    id: str | None = None  # newer Ollama versions send ids; older ones none
    function: FunctionCall


class Message(_Body):
    role: str
    content: str | None = None
    thinking: str | None = None
    images: list[Any] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class Options(_Body):
    num_predict: int | None = None  # -1 / -2 (no limit, fill the context): to EOS or the context
    top_k: int | None = None
    seed: int | None = None  # negative: unseeded
    temperature: float | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: list[str] | str | None = None


class _Generation(_Body):
    model: str
    format: str | dict[str, Any] | None = None
    options: Options | None = None
    stream: bool = True
    think: bool | str | None = None  # gpt-oss's "low" / "medium" / "high" mean on
    keep_alive: Any = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class ShowBody(_Body):
    model: str | None = None
    name: str | None = None  # Ollama's older name for model
    verbose: bool = False  # model_info's long arrays: none are sent either way


class ChatBody(_Generation):
    messages: list[Message] = []
    tools: list[dict[str, Any]] | None = None


class GenerateBody(_Generation):
    prompt: str | None = None
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[Any] | None = None


def _ns(seconds: float) -> int:
    return max(int(seconds * 1e9), 0)


async def _read(request: Request, model: type[_Body]) -> Any:
    try:
        raw = await request.json()
    except ValueError as e:
        raise APIError(400, f"The request body is not valid JSON ({e}). Send a JSON object.") from e
    if not isinstance(raw, dict):
        raise APIError(400, "The request body must be a JSON object.")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise _invalid(e) from e


def _invalid(e: ValidationError) -> APIError:
    """A 400 naming the field (``validation_error`` reads FastAPI's ("body", ...) paths)."""
    return validation_error([{**d, "loc": ("body", *d["loc"])} for d in e.errors()])


# -- requests: Ollama's -> ChatCompletionRequest / CompletionRequest -----------------------


def _sampling(body: _Generation) -> dict[str, Any]:
    o = body.options or Options()
    out = {"max_tokens": o.num_predict if o.num_predict and o.num_predict > 0 else None,
           "seed": o.seed if o.seed is not None and o.seed >= 0 else None, "stop": o.stop or None,
           "repetition_penalty": o.repeat_penalty, "temperature": o.temperature, "top_p": o.top_p,
           "top_k": o.top_k, "min_p": o.min_p, "presence_penalty": o.presence_penalty,
           "frequency_penalty": o.frequency_penalty}
    return {k: v for k, v in out.items() if v is not None}


def _response_format(fmt: str | dict | None) -> dict[str, Any] | None:
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"name": "ollama_format", "schema": fmt}}
    raise APIError(400, f"format must be \"json\" or a JSON schema object, not {fmt!r}",
                   param="format")


def _no_images(images: list | None, where: str) -> None:
    if images:
        raise APIError(400, f"{where}images are not supported: this server runs a text-only "
                       "model; send text only", param="images")


def _call(c: ToolCall) -> dict[str, Any]:
    """An Ollama call as OpenAI's: an id (kept where given), arguments as JSON text."""
    args = c.function.arguments
    return {"id": c.id or f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {
        "name": c.function.name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def _history(messages: list[Message]) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's: calls get ids (kept where given); each ``tool``
    message answers the assistant's calls in order, or the one its id or name picks."""
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (id, name) of the last assistant's unanswered calls
    for i, m in enumerate(messages):
        _no_images(m.images, f"messages[{i}]: ")
        msg: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.tool_calls:
            msg.update(tool_calls=[_call(c) for c in m.tool_calls], content=m.content or None)
            open_calls = [(c["id"], c["function"]["name"]) for c in msg["tool_calls"]]
        elif m.role == "tool":
            msg["tool_call_id"] = _answered(open_calls, m, i)
        elif m.role != "assistant":
            open_calls = []
        out.append(msg)
    return out


def _answered(open_calls: list[tuple[str, str]], m: Message, i: int) -> str:
    """The id of the call tool message ``m`` answers: its own id, else the first open call
    of its ``tool_name``, else the first open call (removed from ``open_calls``)."""
    pick = next((c for c in open_calls if m.tool_call_id == c[0]), None) \
        or next((c for c in open_calls if m.tool_name == c[1]), None) \
        or (open_calls[0] if open_calls else None)
    if pick is None:
        raise APIError(400, f"messages[{i}]: a tool message answers one tool call of the "
                       "assistant message before it, and none is left unanswered: send one "
                       "tool message per call, after the assistant message", param="messages")
    open_calls.remove(pick)
    return pick[0]


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """OpenAI function tools (Ollama's are the same shape; only the known keys pass)."""
    if not tools:  # the Python client sends [] when there are none
        return None
    keep = ("name", "description", "parameters", "strict")
    return [{"type": t.get("type", "function"),
             "function": {k: v for k, v in (t.get("function") or {}).items() if k in keep}}
            for t in tools]


def _validated(model_cls: type, payload: dict[str, Any]) -> Any:
    try:
        return model_cls.model_validate(payload)
    except ValidationError as e:
        err = _invalid(e)
    head, _, rest = (err.param or "").partition(".")
    if head in RENAMES:  # name the field as the client sent it
        new = RENAMES[head] + (f".{rest}" if rest else "")
        err.message, err.param = err.message.replace(err.param, new, 1), new
    raise err


@dataclass(frozen=True)
class Surface:
    """What the Ollama routes need from the app: the Api, and the template's traits."""

    api: Api
    has_template: bool
    thinks: bool
    thinking_switch: bool

    def model(self, name: str) -> str:
        """The served name for ``name`` (Ollama's ``:latest`` tag dropped); 404 if none."""
        if not self.api.cfg.serves(name) and name.endswith(":latest"):
            name = name[: -len(":latest")]
        self.api.check_model(name)
        return name

    def think(self, think: bool | str | None) -> dict[str, Any]:
        """``think`` as the template's ``enable_thinking`` (400 for a model that cannot)."""
        on = think not in (None, False, "")
        if on and not self.thinks:
            raise APIError(400, f"{self.api.cfg.model_id!r} does not support thinking: omit "
                           "think or send false", param="think")
        if think is None or not self.thinking_switch:
            return {}
        return {"chat_template_kwargs": {"enable_thinking": on}}

    def chat_request(self, body: ChatBody, name: str) -> ChatCompletionRequest:
        payload = {"model": name, "messages": _history(body.messages), "tools": _tools(body.tools),
                   "response_format": _response_format(body.format), **_sampling(body),
                   **self.think(body.think), **_logprobs_asked(body)}
        return _validated(ChatCompletionRequest,
                          {k: v for k, v in payload.items() if v is not None})

    def generate_request(self, body: GenerateBody,
                         name: str) -> ChatCompletionRequest | CompletionRequest:
        _no_images(body.images, "")
        for key, what in (("suffix", "fill-in-the-middle (suffix)"),
                          ("template", "a template override (the model's own is used)"),
                          ("context", "context (none is returned: chat with /api/chat)")):
            if getattr(body, key):
                raise APIError(400, f"{what} is not supported here: omit {key}", param=key)
        if not body.raw and self.has_template:
            messages = ([{"role": "system", "content": body.system}] if body.system else []) \
                + [{"role": "user", "content": body.prompt or ""}]
            return self.chat_request(ChatBody(model=body.model, messages=[
                Message(**m) for m in messages], format=body.format, options=body.options,
                think=body.think, logprobs=body.logprobs, top_logprobs=body.top_logprobs), name)
        why = "raw" if body.raw else "this model has no chat template, so"
        for key, value in (("system", body.system), ("format", body.format), ("think", body.think)):
            if value:
                raise APIError(400, f"{key} needs the chat template, and {why} the prompt goes "
                               f"to the model as it is: omit {key}", param=key)
        extra = {"logprobs": body.top_logprobs or 0} if body.logprobs else {}
        return _validated(CompletionRequest, {"model": name, "prompt": body.prompt or "",
                                              **_sampling(body), **extra})


def _logprobs_asked(body: _Generation) -> dict[str, Any]:
    if not body.logprobs:
        return {}
    return {"logprobs": True, "top_logprobs": body.top_logprobs}


# -- responses: OpenAI chunks -> Ollama's pieces ------------------------------------------


@dataclass
class Piece:
    """What one chunk adds to the answer, in Ollama's terms."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.thinking or self.tool_calls or self.logprobs)

    def add(self, other: Piece) -> None:
        self.content += other.content
        self.thinking += other.thinking
        self.tool_calls += other.tool_calls
        self.logprobs += other.logprobs


@dataclass
class _Call:
    id: str
    name: str
    arguments: str = ""
    sent: bool = False


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _lp_item(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def _logprobs(lp: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Chat (``content``) or completions (``tokens``) log-probabilities as Ollama's list."""
    if not lp:
        return []
    if "content" in lp:
        return [{**_lp_item(e["token"], e["logprob"]), "top_logprobs": [
            _lp_item(t["token"], t["logprob"]) for t in e.get("top_logprobs") or []]}
            for e in lp["content"] or []]
    tops = lp.get("top_logprobs") or [{}] * len(lp["tokens"])
    return [{**_lp_item(t, p), "top_logprobs": [_lp_item(k, v) for k, v in top.items()]}
            for t, p, top in zip(lp["tokens"], lp["token_logprobs"], tops)]


class Translator:
    """OpenAI chunks in, ``Piece``s out; keeps the finish reason, usage and timings."""

    def __init__(self) -> None:
        self.calls: dict[int, _Call] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.first_token_at: float | None = None

    def feed(self, chunk: dict[str, Any]) -> Piece:
        self.usage = chunk.get("usage") or self.usage
        self.timings = chunk.get("specdec") or self.timings
        piece = Piece()
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece.content += delta.get("content") or choice.get("text") or ""
            piece.thinking += delta.get("reasoning_content") or ""
            for d in delta.get("tool_calls") or []:
                call = self.calls.setdefault(d["index"], _Call(d.get("id") or "", ""))
                fn = d.get("function") or {}
                call.name += fn.get("name") or ""
                call.arguments += fn.get("arguments") or ""
            piece.logprobs += _logprobs(choice.get("logprobs"))
            self.finish = choice.get("finish_reason") or self.finish
        piece.tool_calls = self._whole_calls()
        if piece and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        return piece

    def _whole_calls(self) -> list[dict[str, Any]]:
        """Calls not sent yet whose arguments are complete (all of them at the end):
        Ollama sends each call whole, with its arguments as an object."""
        out = []
        for index in sorted(self.calls):
            call = self.calls[index]
            args = _arguments(call.arguments) if call.arguments else None  # "": the head
            if call.sent or (args is None and self.finish is None):
                continue
            call.sent = True
            out.append({"id": call.id, "function": {"index": index, "name": call.name,
                                                    "arguments": args if args is not None else {}}})
            if args is None and call.arguments:
                log.warning("tool call %s: arguments are not a JSON object: %r", call.name,
                            call.arguments)
        return out

    def done(self, started: float) -> dict[str, Any]:
        """Ollama's closing fields; durations in ns, from the server's own timings."""
        u, t, end = self.usage, self.timings, time.perf_counter()
        n_out, rate = u.get("completion_tokens", 0), t.get("decode_tokens_per_s") or 0
        decode = n_out / rate if rate else (end - self.first_token_at if self.first_token_at else 0)
        return {"done": True, "done_reason": "length" if self.finish == "length" else "stop",
                "total_duration": _ns(end - started), "load_duration": 0,  # loaded at start
                "prompt_eval_count": u.get("prompt_tokens", 0),
                "prompt_eval_duration": _ns(t.get("prefill_s", 0)),
                "eval_count": n_out, "eval_duration": _ns(decode)}


def _chat_fields(p: Piece) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": p.content}
    if p.thinking:
        msg["thinking"] = p.thinking
    if p.tool_calls:
        msg["tool_calls"] = p.tool_calls
    return {"message": msg, **({"logprobs": p.logprobs} if p.logprobs else {})}


def _generate_fields(p: Piece) -> dict[str, Any]:
    out: dict[str, Any] = {"response": p.content}
    if p.thinking:
        out["thinking"] = p.thinking
    return {**out, **({"logprobs": p.logprobs} if p.logprobs else {})}


Shape = Callable[[Piece], dict[str, Any]]


async def _stream(chunks: AsyncIterator[dict], name: str, shape: Shape,
                  started: float) -> AsyncIterator[str]:
    """NDJSON lines; a failure after the first line ends the stream with ``{"error"}``."""
    tr = Translator()
    try:
        async for chunk in chunks:
            piece = tr.feed(chunk)
            if piece:
                yield _line({"model": name, "created_at": now(), **shape(piece), "done": False})
        yield _line({"model": name, "created_at": now(), **shape(Piece()), **tr.done(started)})
    except APIError as e:
        yield _line({"error": e.message})
    finally:
        await chunks.aclose()  # a client gone mid-stream: the job is cancelled


async def _whole(chunks: AsyncIterator[dict], name: str, shape: Shape, started: float) -> dict:
    tr, whole = Translator(), Piece()
    try:
        async for chunk in chunks:
            whole.add(tr.feed(chunk))
    finally:
        await chunks.aclose()
    return {"model": name, "created_at": now(), **shape(whole), **tr.done(started)}


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


# -- routes --------------------------------------------------------------------------------


async def _run(api: Api, request: Request, body: ChatCompletionRequest | CompletionRequest,
               name: str, stream: bool, shape: Shape, started: float) -> Response:
    """``body`` through ``api.chat`` (a ``CompletionRequest`` runs there as well: the
    chunks then carry ``text``), answered whole or as NDJSON."""
    try:
        chunks = await api.chat(request, body)
    except NoTokens:
        return Response(status_code=499)  # the client left before the first token
    if not stream:
        return JSONResponse(await _whole(chunks, name, shape, started))
    return StreamingResponse(_stream(chunks, name, shape, started), media_type=NDJSON)


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
        body = await _read(request, ChatBody)
        name = s.model(body.model)
        if not body.messages:
            return _loaded(body.model, _chat_fields)
        return await _run(api, request, s.chat_request(body, name), body.model, body.stream,
                          _chat_fields, started)

    @app.post("/api/generate")
    async def generate(request: Request) -> Response:
        started = time.perf_counter()
        body = await _read(request, GenerateBody)
        name = s.model(body.model)
        if not body.prompt and not body.system:
            return _loaded(body.model, _generate_fields)
        return await _run(api, request, s.generate_request(body, name), body.model, body.stream,
                          _generate_fields, started)

    @app.get("/api/tags")
    async def tags() -> dict:
        return {"models": [card.listing]}

    @app.post("/api/show")
    async def show_model(request: Request) -> dict:
        body = await _read(request, ShowBody)
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
