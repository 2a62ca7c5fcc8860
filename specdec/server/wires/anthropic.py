"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``), one
module from the body to the engine: the request parsed and mapped to the engine's request
value, a ``ChatSpec``, directly, and handed to ``Api.queue``; the engine's stream folded by
``anthropic_reply`` into an Anthropic message or SSE events.

Contract: a pure translation, rendering and tokenizing nothing: the messages map to the chat
messages /v1/chat/completions would take, minus Claude Code's per-run billing header block
(stable prompts and prefix-cache hits); custom tools become function tools (server tools run
at Anthropic: dropped); ``max_tokens`` goes as sent, ``fit``: the engine fits it to the room
the prompt leaves; fields it cannot honour are ignored, but ``speculative``, ``cache_salt`` and ``store`` are
read as on chat completions; a request refused before its first token (or ``HEADERS_AFTER_S``)
gets a proper status, a slow stream headers and pings. Tests: tests/server/test_anthropic_wire.py, tests/server/test_anthropic.py.
Details: docs/server.md#one-request-value-max_tokens-from-an-anthropic-body-to-the-loop."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.events import NoTokens
from ..engine.spec import MAX_STOPS, Asked, ChatSpec
from ..http.body import parse
from ..http.errors import APIError
from .anthropic_reply import HEADERS_AFTER_S, Blocks, started, stream, whole
from .chat import CLIENT_CLOSED, SSE_HEADERS

if TYPE_CHECKING:  # the engine's handle is passed in (``register``)
    from ..engine.api import Api

BILLING_PREFIX = "x-anthropic-billing-header:"


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
    tools: list[dict[str, Any]] = []
    for i, t in enumerate(req.tools or []):
        if t.get("type", "custom") not in ("custom", None):
            continue
        try:
            tool = ToolIn.model_validate(t)
        except ValidationError as e:
            raise APIError(400, f"tools[{i}]: {e.errors()[0]['msg']} (a tool has name, "
                           "description, input_schema)", param="tools") from None
        fn = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
        tools.append({"type": "function", "function": {k: v for k, v in fn.items() if v is not None}})
    out: dict[str, Any] = {"tools": tuple(tools)}
    choice = req.tool_choice
    if choice is not None and (tools or choice.type != "auto"):
        out["tool_choice"] = ({"type": "function", "function": {"name": choice.name or ""}}
                              if choice.type == "tool" else
                              {"any": "required"}.get(choice.type, choice.type))
        if choice.disable_parallel_tool_use and tools:
            out["parallel_tool_calls"] = False
    return out


def _sampling(req: MessagesRequest) -> dict[str, Any]:
    """The limits, sampling and outputs a Messages request asks for."""
    stops = tuple(req.stop_sequences or ())
    if stops and (len(stops) > MAX_STOPS or "" in stops):
        raise APIError(400, f"stop_sequences takes 1 to {MAX_STOPS} non-empty strings here",
                       param="stop_sequences")
    fmt = req.output_config.format if req.output_config else None
    return {"max_tokens": req.max_tokens, "fit": True,  # a ceiling: fitted to the room
            "sampling": Asked(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k),
            "stop": stops, "logprobs": bool(stops),  # each token's text shows which stop ended it
            "response_format": None if fmt is None else {
                "type": "json_schema", "json_schema": {"name": "output", "schema": fmt.schema_}},
            "speculative": req.speculative, "cache_salt": req.cache_salt, "store": req.store is not False}


def chat_spec(req: CountRequest, thinking_switch: bool) -> ChatSpec:
    """The engine's request value ``req`` maps to (a count request: its prompt only)."""
    template = ({"enable_thinking": req.thinking.type != "disabled"}
                if req.thinking is not None and thinking_switch else {})
    more = _sampling(req) if isinstance(req, MessagesRequest) else {}
    return ChatSpec(req.model, messages=tuple(_messages(req)), template_kwargs=template,
                    **_tools(req), **more)


def register(app: Any, api: Api) -> None:
    """Add this surface's routes to ``app``, each served through ``api.chat``."""

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        req = await parse(request, MessagesRequest)
        api.check_model(req.model)  # a 404 before the mapping's 400s
        spec = chat_spec(req, api.traits.thinking_switch)
        queued = await api.queue(request, spec)  # refused here (400, 503): a status
        pending = asyncio.ensure_future(api.chat(queued))
        pending.add_done_callback(lambda f: f.cancelled() or f.exception())  # read here or later
        try:  # an error before the first token: a proper status, not an event
            begun = await started(pending, HEADERS_AFTER_S if req.stream else None)
        except BaseException:
            pending.cancel()
            raise
        try:
            chunks = pending.result() if begun else None
        except NoTokens:
            return Response(status_code=CLIENT_CLOSED)  # the client left: nobody reads an answer
        blocks, msg_id = Blocks(list(spec.stop) or None), "msg_" + uuid.uuid4().hex
        if not req.stream:
            if chunks is None:  # waited for without a limit: it has started
                raise RuntimeError("a non-streamed message's request did not start")
            return JSONResponse(await whole(chunks, blocks, msg_id, req.model))
        return StreamingResponse(stream(pending, blocks, msg_id, req.model, queued.prompt_tokens),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> dict[str, int]:
        req = await parse(request, CountRequest)
        api.check_model(req.model)
        return {"input_tokens": await api.count(chat_spec(req, api.traits.thinking_switch))}
