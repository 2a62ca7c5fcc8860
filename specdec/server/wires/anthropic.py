"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``): a thin
adapter onto ``Api.chat`` (the request mapped to a ``ChatCompletionRequest``, its chunks
rendered as an Anthropic message or SSE events).

Contract: the prompt is the one /v1/chat/completions renders for the mapped request, minus
Claude Code's per-run billing header block (stable prompts and prefix-cache hits); usage
splits cached input tokens; a slow stream gets headers and pings; fields it cannot honour
are accepted and ignored, but this server's ``speculative`` and ``cache_salt`` are read as
on chat completions; the body is read by ``body.read_json`` (a 400 in Anthropic's shape). Tests: tests/server/test_anthropic.py. Details: docs/design-notes.md."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.api import Api, NoTokens
from ..http.body import read_json
from ..http.errors import APIError, internal_error, surface_body, validation_error
from ..engine.events import decoder_stats
from ..engine.schemas import MAX_STOPS, ChatCompletionRequest

log = logging.getLogger("specdec.server")

BILLING_PREFIX = "x-anthropic-billing-header:"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
HEADERS_AFTER_S = 5.0  # a stream not started by then gets its headers and pings meanwhile
PING_S = 10.0
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


class _Lenient(BaseModel):
    """Anthropic adds fields every release (``cache_control``, ``citations``...): ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)


class TextBlock(_Lenient):
    type: Literal["text"]
    text: str


class MediaBlock(_Lenient):
    type: Literal["image", "document"]  # parsed only to be refused with a clear message


class ToolUseBlock(_Lenient):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


ResultPart = Annotated[Union[TextBlock, MediaBlock], Field(discriminator="type")]


class ToolResultBlock(_Lenient):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ResultPart] | None = None
    is_error: bool | None = None


class ThoughtBlock(_Lenient):
    type: Literal["thinking", "redacted_thinking"]  # earlier reasoning: not re-read


Block = Annotated[Union[TextBlock, MediaBlock, ToolUseBlock, ToolResultBlock, ThoughtBlock],
                  Field(discriminator="type")]


class InMessage(_Lenient):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class ToolIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolChoiceIn(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingIn(_Lenient):
    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: int | None = None  # no budget control here: the switch is all there is


class OutputFormat(_Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Lenient):
    effort: str | None = None  # no effort control here: ignored
    format: OutputFormat | None = None  # structured output: the chat path's JSON grammar


class CountRequest(_Lenient):
    """``/v1/messages/count_tokens``: what shapes the prompt."""

    model: str
    messages: list[InMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None


class MessagesRequest(CountRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    output_config: OutputConfig | None = None
    # this server's chat-request extensions, checked there (400s name them)
    speculative: dict[str, Any] | None = None
    cache_salt: str | None = None
    store: bool | None = None  # false: the text stays out of the shared drafting memory


# -- the request: Anthropic's messages -> the chat request ------------------------------


def _refuse_media(kind: str, where: str) -> APIError:
    return APIError(400, f"{where}: {kind} blocks are not supported: this server runs a "
                    "text-only model; send the content as text blocks", param="messages")


def _texts(parts: list[str]) -> str:
    return "\n\n".join(parts)


def _system(system: str | list[TextBlock] | None) -> list[dict[str, Any]]:
    if system is None:
        return []
    blocks = [system] if isinstance(system, str) else [b.text for b in system]
    kept = [t for t in blocks if not t.lstrip().startswith(BILLING_PREFIX)]  # per-run metadata
    return [{"role": "system", "content": _texts(kept)}] if kept else []


def _result_text(block: ToolResultBlock, where: str) -> str:
    content = block.content
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        media = next((b.type for b in content if isinstance(b, MediaBlock)), None)
        if media:
            raise _refuse_media(media, where)
        text = _texts([b.text for b in content if isinstance(b, TextBlock)])
    return f"Error: {text}" if block.is_error else text


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results as ``tool`` messages (they answer the assistant
    turn before it), then its text as one user message."""
    results, texts = [], []
    for i, b in enumerate(blocks):
        if isinstance(b, MediaBlock):
            raise _refuse_media(b.type, f"{where}.content[{i}]")
        if isinstance(b, ToolResultBlock):
            results.append({"role": "tool", "tool_call_id": b.tool_use_id,
                            "content": _result_text(b, f"{where}.content[{i}]")})
        elif isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ToolUseBlock):
            raise APIError(400, f"{where}.content[{i}]: tool_use blocks belong to assistant "
                           "messages", param="messages")
    return results + ([{"role": "user", "content": _texts(texts)}] if texts or not results else [])


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts, calls = [], []
    for i, b in enumerate(blocks):
        if isinstance(b, (MediaBlock, ToolResultBlock)):
            raise APIError(400, f"{where}.content[{i}]: {b.type} blocks belong to user "
                           "messages", param="messages")
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ToolUseBlock):
            calls.append({"id": b.id, "type": "function",
                          "function": {"name": b.name, "arguments": json.dumps(b.input)}})
    text = _texts(texts) if texts or not calls else None  # null beside calls, as OpenAI's
    out: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    return out


def _messages(req: CountRequest) -> list[dict[str, Any]]:
    out = _system(req.system)
    for n, m in enumerate(req.messages):
        where = f"messages[{n}]"
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
        elif m.role == "assistant":
            out.append(_assistant(m.content, where))
        elif m.role == "system":
            out.append({"role": "system", "content": _texts(
                [b.text for b in m.content if isinstance(b, TextBlock)])})
        else:
            out += _user(m.content, where)
    return out


def _tools(req: CountRequest) -> dict[str, Any]:
    """Custom tools as OpenAI function tools (server tools run at Anthropic: dropped)."""
    tools = []
    for i, t in enumerate(req.tools or []):
        if t.get("type", "custom") not in ("custom", None):
            continue
        try:
            tool = ToolIn.model_validate(t)
        except ValidationError as e:
            raise APIError(400, f"tools[{i}]: {e.errors()[0]['msg']} (a tool has name, "
                           "description, input_schema)", param="tools") from None
        tools.append({"type": "function", "function": {
            "name": tool.name, "description": tool.description, "parameters": tool.input_schema}})
    out: dict[str, Any] = {"tools": tools} if tools else {}
    choice = req.tool_choice
    if choice is not None and (tools or choice.type != "auto"):
        out["tool_choice"] = ({"type": "function", "function": {"name": choice.name or ""}}
                              if choice.type == "tool" else
                              {"any": "required"}.get(choice.type, choice.type))
        if choice.disable_parallel_tool_use and tools:
            out["parallel_tool_calls"] = False
    return out


def chat_request(req: CountRequest, thinking_switch: bool) -> ChatCompletionRequest:
    """The chat request ``req`` maps to (no ``max_tokens`` yet: ``messages`` clamps it)."""
    body: dict[str, Any] = {"model": req.model, "messages": _messages(req), **_tools(req)}
    if req.thinking is not None and thinking_switch:
        body["chat_template_kwargs"] = {"enable_thinking": req.thinking.type != "disabled"}
    if isinstance(req, MessagesRequest):
        stops = req.stop_sequences or None
        if stops and (len(stops) > MAX_STOPS or "" in stops):
            raise APIError(400, f"stop_sequences takes 1 to {MAX_STOPS} non-empty strings here",
                           param="stop_sequences")
        body.update({k: v for k, v in (("temperature", req.temperature), ("top_p", req.top_p),
                                        ("top_k", req.top_k), ("stop", stops)) if v is not None})
        fmt = req.output_config.format if req.output_config else None
        if fmt is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": fmt.schema_}}
        body.update({k: v for k, v in (("speculative", req.speculative), ("cache_salt", req.cache_salt),
                                        ("store", req.store)) if v is not None})
        if stops:  # each token's text shows which stop string ended the reply (``Blocks``)
            body["logprobs"] = True
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        raise validation_error(list(e.errors())) from None


async def _parse(request: Request, model: type[CountRequest]) -> Any:
    raw = await read_json(request)  # 400s for bad JSON, too deep, NaN, lone surrogates
    try:
        return await run_in_threadpool(model.model_validate, raw)  # 4 MiB: off the loop
    except ValidationError as e:
        err = validation_error([{**x, "loc": ("body", *x["loc"])} for x in e.errors()])
        raise err from None


async def _prompt_tokens(api: Api, body: ChatCompletionRequest) -> int:
    plan = api.tool_plan(body)
    return len(await api.prompt_ids(body, plan.template_tools if plan else None))


# -- the reply: chat chunks -> Anthropic content blocks and events -----------------------


@dataclass
class OutBlock:
    kind: str  # "thinking", "text" or "tool_use"
    text: str = ""  # the thought, the text, or the tool input's JSON
    id: str = ""
    name: str = ""

    def start(self) -> dict[str, Any]:
        if self.kind == "tool_use":
            return {"type": "tool_use", "id": self.id, "name": self.name, "input": {}}
        return {"type": "thinking", "thinking": "", "signature": ""} if self.kind == "thinking" \
            else {"type": "text", "text": ""}

    def whole(self) -> dict[str, Any]:
        if self.kind != "tool_use":
            return {**self.start(), self.kind: self.text}
        try:
            args = json.loads(self.text or "{}")
        except ValueError:
            args = {}
        return {**self.start(), "input": args if isinstance(args, dict) else {}}


Event = tuple[str, dict[str, Any]]
DELTAS = {"thinking": ("thinking_delta", "thinking"), "text": ("text_delta", "text"),
          "tool_use": ("input_json_delta", "partial_json")}


@dataclass
class Blocks:
    """Chat chunks in, Anthropic events out (the whole message is folded from them)."""

    stops: list[str] | None
    blocks: list[OutBlock] = field(default_factory=list)
    open: bool = False
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)  # each token's text (with stops only)

    def _add(self, kind: str, piece: str, **head: str) -> list[Event]:
        out: list[Event] = []
        if head or not (self.open and self.blocks[-1].kind == kind):
            out += self._close()
            self.blocks.append(OutBlock(kind, **head))
            self.open = True
            out.append(("content_block_start", {"index": len(self.blocks) - 1,
                                                "content_block": self.blocks[-1].start()}))
        if piece:
            self.blocks[-1].text += piece
            kind_, key = DELTAS[kind]
            out.append(("content_block_delta", {"index": len(self.blocks) - 1,
                                                "delta": {"type": kind_, key: piece}}))
        return out

    def _close(self) -> list[Event]:
        if not self.open:
            return []
        self.open = False
        return [("content_block_stop", {"index": len(self.blocks) - 1})]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        self.usage = chunk.get("usage") or self.usage
        out: list[Event] = []
        for choice in chunk.get("choices", []):
            lp = (choice.get("logprobs") or {}).get("content") or []
            self.tokens += [t["token"] for t in lp]
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._add("thinking", delta["reasoning_content"])
            if delta.get("content"):
                out += self._add("text", delta["content"])
            for call in delta.get("tool_calls") or []:
                fn = call.get("function") or {}
                if call.get("id"):
                    out += self._add("tool_use", fn.get("arguments") or "",
                                     id="toolu_" + call["id"].removeprefix("call_"),
                                     name=fn.get("name", ""))
                elif self.open and self.blocks[-1].kind == "tool_use":
                    out += self._add("tool_use", fn.get("arguments") or "")
            self.finish = choice.get("finish_reason") or self.finish
        return out

    def stop_sequence(self) -> str | None:
        """The stop string that ended the reply: the chat path cuts it from the text, but
        the tokens' own texts still hold it (an EOS reply never contains one: the stop
        matcher would have ended it there)."""
        if self.finish != "stop" or not self.stops:
            return None
        text = "".join(self.tokens)
        hits = [(text.find(s), i) for i, s in enumerate(self.stops) if s in text]
        return self.stops[min(hits)[1]] if hits else None

    def stop_reason(self) -> str:
        if self.stop_sequence():
            return "stop_sequence"
        return STOP_REASONS.get(self.finish or "", "end_turn")

    def usage_json(self) -> dict[str, Any]:
        """Anthropic's usage, plus --decoder wedlm's stats as extra fields (as on OpenAI's)."""
        cached = (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return {"input_tokens": self.usage.get("prompt_tokens", 0) - cached,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
                "output_tokens": self.usage.get("completion_tokens", 0), **decoder_stats(self.usage)}

    def end(self) -> list[Event]:
        delta = {"stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence()}
        return self._close() + [("message_delta", {"delta": delta, "usage": self.usage_json()}),
                                ("message_stop", {})]


def _message(msg_id: str, model: str, content: list[dict[str, Any]], usage: dict[str, Any],
             stop_reason: str | None = None, stop_sequence: str | None = None) -> dict[str, Any]:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage}


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


async def _whole(chunks: AsyncIterator[dict], blocks: Blocks, msg_id: str, model: str) -> dict:
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            blocks.feed(chunk)
    blocks.end()
    return _message(msg_id, model, [b.whole() for b in blocks.blocks], blocks.usage_json(),
                    blocks.stop_reason(), blocks.stop_sequence())


async def _first(pending: asyncio.Future, wait: float) -> bool:
    """Whether ``pending`` (``api.chat`` starting) finished within ``wait`` seconds."""
    done, _ = await asyncio.wait({pending}, timeout=wait)
    return bool(done)


async def _stream(pending: asyncio.Future, blocks: Blocks, msg_id: str, model: str,
                  n_prompt: int, no_tokens: type[Exception]) -> AsyncIterator[str]:
    usage = {"input_tokens": n_prompt, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": 0}
    yield _sse("message_start", {"message": _message(msg_id, model, [], usage)})
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
        req = await _parse(request, MessagesRequest)
        api.check_model(req.model)
        body = chat_request(req, api.traits.thinking_switch)
        n_prompt = await _prompt_tokens(api, body)
        room = api.room(n_prompt)  # clamped: clients always send a max
        body = body.model_copy(update={"max_tokens": min(req.max_tokens, room) if room >= 1
                                       else req.max_tokens})
        pending = asyncio.ensure_future(api.chat(request, body))
        pending.add_done_callback(lambda f: f.cancelled() or f.exception())  # read here or later
        try:  # refused at once (400, 404, 503...): a proper status, not an event
            started = await _first(pending, HEADERS_AFTER_S if req.stream else None)
        except BaseException:
            pending.cancel()
            raise
        try:
            chunks = pending.result() if started else None
        except NoTokens:
            return Response(status_code=499)  # the client left: nobody reads an answer
        blocks, msg_id = Blocks(body.stop), "msg_" + uuid.uuid4().hex
        if not req.stream:
            return JSONResponse(await _whole(chunks, blocks, msg_id, req.model))
        return StreamingResponse(_stream(pending, blocks, msg_id, req.model, n_prompt, NoTokens),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> dict[str, int]:
        req = await _parse(request, CountRequest)
        api.check_model(req.model)
        body = chat_request(req, api.traits.thinking_switch)
        return {"input_tokens": await _prompt_tokens(api, body)}
