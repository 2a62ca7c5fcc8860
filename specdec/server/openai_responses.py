"""OpenAI's Responses API (``/v1/responses``) as a thin adapter onto ``Api.chat``.

Contract: ``POST /v1/responses`` maps ``input`` items (messages, ``function_call`` /
``function_call_output``, ``reasoning`` dropped, ``item_reference`` from the store),
``instructions``, ``tools`` (``function``; ``namespace`` groups flattened to
``<namespace>__<name>``, answered back as ``name`` + ``namespace``; tools this server cannot
run are dropped and listed in the extension field ``dropped_tools``), ``tool_choice``,
``text.format``, ``reasoning.effort``, ``max_output_tokens`` onto one chat request; the chat
chunks fold into output items, whole or as typed SSE events (``Folder``). Stored responses
(``store``, default true; ``ResponseStore``, bounded) back ``previous_response_id``, GET and
DELETE. Accepted and ignored: include, prompt_cache_key, user, service_tier, truncation,
metadata (echoed), background, top_logprobs, unknown fields. Tests: tests/server/test_openai_responses.py.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, Response, StreamingResponse

from .api import CLIENT_CLOSED, SSE_HEADERS, Api, NoTokens
from .errors import APIError, validation_error
from .schemas import ChatCompletionRequest

MAX_STORED = 1000  # responses kept for previous_response_id / GET
MAX_STORED_BYTES = 64 << 20  # and their total JSON size: long agent chains grow quadratically
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
# chat-request extensions a Responses request may carry too (sampling, speculation)
PASSTHROUGH = ("seed", "top_k", "min_p", "stop", "repetition_penalty", "presence_penalty",
               "frequency_penalty", "speculative", "chat_template_kwargs")


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


class ResponsesRequest(BaseModel):
    """The fields this surface reads; any other field is accepted and ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: str
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None


# -- the store: previous_response_id, GET, DELETE ----------------------------------------


@dataclass
class Stored:
    response: dict[str, Any]
    items: list[dict[str, Any]]  # the whole conversation: earlier turns, input, output
    size: int


class ResponseStore:
    """An LRU of responses, bounded in count and in total JSON bytes."""

    def __init__(self, max_items: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES):
        self.max_items, self.max_bytes, self.bytes = max_items, max_bytes, 0
        self._data: OrderedDict[str, Stored] = OrderedDict()

    def put(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        size = len(json.dumps(response)) + len(json.dumps(items))
        self._data[response["id"]] = Stored(response, items, size)
        self.bytes += size
        while self._data and (len(self._data) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self._data.popitem(last=False)[1].size

    def get(self, rid: str, param: str | None = None) -> Stored:
        if rid not in self._data:
            raise APIError(404, f"No response with id {rid!r} is stored here: it was never "
                           "stored (store: false), was deleted, or was evicted (this server "
                           f"keeps the last {self.max_items}, in memory, until it restarts). "
                           "Send the whole conversation as input instead.", param=param,
                           code="response_not_found")
        self._data.move_to_end(rid)
        return self._data[rid]

    def delete(self, rid: str) -> None:
        self.bytes -= self.get(rid).size
        del self._data[rid]

    def item(self, item_id: str) -> dict[str, Any] | None:
        """An input or output item of a stored response, by its ``id``."""
        for stored in reversed(self._data.values()):
            for it in stored.items:
                if it.get("id") == item_id:
                    return it
        return None


# -- the request: input items, tools, options -> one ChatCompletionRequest ----------------


def _bad(where: str, message: str) -> APIError:
    return APIError(400, f"{where}: {message}", param=where)


def _text(content: Any, where: str) -> str:
    """A message's (or tool output's) text: a string or text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(where, "content must be a string or a list of input_text parts")
    out = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = TEXT_PARTS.get(kind)
        if key is None or not isinstance(part.get(key), str):
            raise _bad(f"{where}[{i}]", f"parts of type {kind!r} are not supported: this server "
                       "runs a text-only model; send input_text parts or a string")
        out.append(part[key])
    return "".join(out)


def _field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise _bad(f"{where}.{key}", f"a {item.get('type')} item needs {key} as a string")
    return value


def _flat(namespace: str | None, name: str) -> str:
    return f"{namespace}__{name}" if namespace else name


def chat_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as chat messages (``function_call`` items join the assistant message
    just before them, as chat templates expect one message with all its calls)."""
    out: list[dict[str, Any]] = []
    joinable = False  # whether out[-1] is an assistant message calls may join
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(where, "an input item is a JSON object")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise _bad(f"{where}.role", f"role must be one of {', '.join(ROLES)}")
            out.append({"role": item["role"], "content": _text(item.get("content"), f"{where}.content")})
            joinable = item["role"] == "assistant"
        elif kind == "function_call":
            name = _flat(item.get("namespace"), _field(item, "name", where))
            call = {"id": _field(item, "call_id", where), "type": "function",
                    "function": {"name": name, "arguments": _field(item, "arguments", where)}}
            if not joinable:
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append(call)
            joinable = True
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": _field(item, "call_id", where),
                        "content": _text(item.get("output"), f"{where}.output")})
            joinable = False
        elif kind != "reasoning":  # a reasoning item is the model's own; templates drop it
            raise _bad(where, f"items of type {kind!r} are not supported here: send messages, "
                       "function_call, function_call_output or reasoning items")
    return out


@dataclass
class ToolMap:
    functions: list[dict[str, Any]] = field(default_factory=list)  # chat function tools
    dropped: list[str] = field(default_factory=list)  # tools this server cannot run
    spaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat -> (ns, name)


def map_tools(tools: list[dict[str, Any]] | None) -> ToolMap:
    out = ToolMap()

    def add(fn: dict[str, Any], ns: str | None) -> None:
        name = fn.get("name")
        flat = _flat(ns, name) if isinstance(name, str) else name
        if ns:
            out.spaces[flat] = (ns, name)
        spec = {k: fn.get(k) for k in ("description", "parameters", "strict")}
        out.functions.append({"type": "function", "function": {
            "name": flat, **{k: v for k, v in spec.items() if v is not None}}})

    for i, tool in enumerate(tools or []):
        kind = tool.get("type")
        if kind == "function":
            add(tool, None)
        elif kind == "namespace":
            ns = _field(tool, "name", f"tools[{i}]")
            for fn in tool.get("tools") or tool.get("functions") or []:
                if isinstance(fn, dict) and fn.get("type", "function") == "function":
                    add(fn, ns)
                else:  # a custom (free-text) tool inside the namespace
                    out.dropped.append(f"{ns}.{fn.get('name') if isinstance(fn, dict) else fn}")
        else:
            out.dropped.append(str(tool.get("name") or kind))
    return out


def map_choice(choice: str | dict[str, Any] | None, tools: ToolMap) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        name = _flat(choice.get("namespace"), _field(choice, "name", "tool_choice"))
        return {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":  # all given tools are allowed here: its mode is what counts
        return choice.get("mode", "auto")
    raise APIError(400, f"tool_choice forces the {kind!r} tool, which this server cannot run "
                   f"(it was dropped: {', '.join(tools.dropped) or 'not in tools'}); send "
                   "'auto', 'required' or a function", param="tool_choice")


def map_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") != "json_schema":
        return {"type": fmt["type"]}
    schema = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}


def chat_body(req: ResponsesRequest, raw: dict[str, Any], messages: list[dict[str, Any]],
              tools: ToolMap) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": req.model, "messages": messages}
    options = {"max_tokens": req.max_output_tokens, "temperature": req.temperature,
               "top_p": req.top_p, "tools": tools.functions or None,
               "tool_choice": map_choice(req.tool_choice, tools),
               "parallel_tool_calls": req.parallel_tool_calls,
               "response_format": map_format(req.text)}
    effort = (req.reasoning or {}).get("effort")
    if effort is not None:
        options["reasoning_effort"] = "high" if effort == "xhigh" else effort
    body.update({k: v for k, v in options.items() if v is not None})
    body.update({k: raw[k] for k in PASSTHROUGH if k in raw})
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        raise validation_error(list(e.errors())) from None


def input_items(req: ResponsesRequest, store: ResponseStore) -> list[dict[str, Any]]:
    """This request's input as items (a string is one user message), references resolved."""
    if isinstance(req.input, str):
        return [{"type": "message", "role": "user", "content": req.input}]
    out = []
    for i, item in enumerate(req.input):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            found = store.item(item.get("id"))
            if found is None:
                raise _bad(f"input[{i}]", f"item_reference {item.get('id')!r} names no item of "
                           "a stored response; send the item itself")
            item = found
        out.append(item)
    return out


# -- the answer: chat chunks -> output items and events -----------------------------------


def skeleton(req: ResponsesRequest, model: str, tools: ToolMap) -> dict[str, Any]:
    """The response object before its output: the request's settings echoed."""
    out = {"id": _id("resp_"), "object": "response", "created_at": int(time.time()),
           "status": "in_progress", "background": False, "error": None,
           "incomplete_details": None, "instructions": req.instructions,
           "max_output_tokens": req.max_output_tokens, "model": model, "output": [],
           "parallel_tool_calls": req.parallel_tool_calls is not False,
           "previous_response_id": req.previous_response_id,
           "reasoning": req.reasoning or {"effort": None, "summary": None},
           "store": req.store, "temperature": req.temperature, "top_p": req.top_p,
           "text": req.text or {"format": {"type": "text"}},
           "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
           "truncation": "disabled", "usage": None, "metadata": req.metadata or {}}
    if tools.dropped:
        out["dropped_tools"] = tools.dropped  # extension: hosted tools not offered to the model
    return out


class Folder:
    """Folds chat chunks into the response's output items, as Responses stream events
    (``sequence_number`` counting from 0); ``response`` is the whole answer at the end."""

    def __init__(self, response: dict[str, Any], spaces: dict[str, tuple[str, str]]):
        self.response, self.spaces, self.seq = response, spaces, 0
        self.open: dict[str, Any] | None = None  # the output item being written
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.response["output"].index(item)}

    def start(self) -> list[dict[str, Any]]:
        snap = copy.deepcopy(self.response)
        return [self._event("response.created", response=snap),
                self._event("response.in_progress", response=snap)]

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close("completed")
        self.response["output"].append(item)
        self.open = item
        out.append(self._event("response.output_item.added", output_index=len(
            self.response["output"]) - 1, item=copy.deepcopy(item)))
        part = {"message": ("content_part", {"type": "output_text", "text": "", "annotations": []}),
                "reasoning": ("reasoning_summary_part", {"type": "summary_text", "text": ""})}
        if item["type"] in part:
            name, first = part[item["type"]]
            index = {"content_index": 0} if name == "content_part" else {"summary_index": 0}
            out.append(self._event(f"response.{name}.added", **self._where(item), **index,
                                   part=dict(first)))
            item["content" if name == "content_part" else "summary"].append(first)
        return out

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self.open = self.open, None
        if item is None:
            return []
        where, out = self._where(item), []
        if item["type"] == "message":
            part = item["content"][0]
            out += [self._event("response.output_text.done", **where, content_index=0,
                                text=part["text"], logprobs=[]),
                    self._event("response.content_part.done", **where, content_index=0, part=part)]
        elif item["type"] == "reasoning":
            part = item["summary"][0]
            out += [self._event("response.reasoning_summary_text.done", **where, summary_index=0,
                                text=part["text"]),
                    self._event("response.reasoning_summary_part.done", **where, summary_index=0,
                                part=part)]
        else:
            out.append(self._event("response.function_call_arguments.done", **where,
                                   name=item["name"], arguments=item["arguments"]))
        item["status"] = status
        return out + [self._event("response.output_item.done", output_index=where["output_index"],
                                  item=copy.deepcopy(item))]

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        out = []
        if self.open is None or self.open["type"] != kind:
            item = {"type": kind, "id": _id("msg_" if kind == "message" else "rs_"),
                    "status": "in_progress"}
            item.update({"role": "assistant", "content": []} if kind == "message" else {"summary": []})
            out = self._add(item)
        part = self.open["content" if kind == "message" else "summary"][0]
        part["text"] += delta
        if kind == "message":
            return out + [self._event("response.output_text.delta", **self._where(self.open),
                                      content_index=0, delta=delta, logprobs=[])]
        return out + [self._event("response.reasoning_summary_text.delta",
                                  **self._where(self.open), summary_index=0, delta=delta)]

    def _call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        out, item = [], self.calls.get(delta.get("index", 0))
        if item is None:
            flat = delta["function"]["name"]
            ns, name = self.spaces.get(flat, (None, flat))
            item = {"type": "function_call", "id": _id("fc_"), "call_id": delta["id"],
                    "name": name, "arguments": "", "status": "in_progress"}
            if ns:
                item["namespace"] = ns
            self.calls[delta.get("index", 0)] = item
            out = self._add(item)
        piece = (delta.get("function") or {}).get("arguments") or ""
        if piece:
            item["arguments"] += piece
            out.append(self._event("response.function_call_arguments.delta",
                                   **self._where(item), delta=piece))
        return out

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if chunk.get("usage") is not None:
            self.response["usage"] = usage(chunk["usage"])
        if "specdec" in chunk:
            self.response["specdec"] = chunk["specdec"]  # extension: the request's timings
        out = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._text("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text("message", delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            self.finish = choice.get("finish_reason") or self.finish
        return out

    def end(self) -> list[dict[str, Any]]:
        cut = self.finish == "length"
        out = self._close("incomplete" if cut else "completed")
        self.response["status"] = "incomplete" if cut else "completed"
        if cut:
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.response["completed_at"] = int(time.time())
        kind = "response.incomplete" if cut else "response.completed"
        return out + [self._event(kind, response=self.response)]

    def fail(self, err: APIError) -> list[dict[str, Any]]:
        self.response["status"] = "failed"
        self.response["error"] = {"code": "server_error", "message": err.message}
        return [self._event("response.failed", response=self.response)]


def usage(chat: dict[str, Any]) -> dict[str, Any]:
    cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": chat["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": chat["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat["prompt_tokens"] + chat["completion_tokens"]}


# -- routes ------------------------------------------------------------------------------


@dataclass
class Turn:
    """One request in flight: its folder, and what the store keeps when it ends."""

    folder: Folder
    chunks: AsyncIterator[dict[str, Any]]
    history: list[dict[str, Any]]  # earlier turns' items + this input
    store: ResponseStore | None

    def save(self) -> None:
        response = self.folder.response  # no finish reason: the client left, it was cut
        if self.store is not None and response["status"] != "failed" and self.folder.finish:
            output = copy.deepcopy(response["output"])
            self.store.put(copy.deepcopy(response), self.history + output)


async def start_turn(request: Request, api: Any, store: ResponseStore) -> tuple[Turn, bool]:
    try:
        raw = await request.json()
    except ValueError:
        raise APIError(400, "The request body is not valid JSON: send a JSON object.",
                       code="invalid_json") from None
    try:
        req = ResponsesRequest.model_validate(raw)
    except ValidationError as e:  # validation_error reads loc[0] as FastAPI's "body"
        raise validation_error([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None
    earlier = store.get(req.previous_response_id, "previous_response_id").items \
        if req.previous_response_id else []
    history = earlier + input_items(req, store)
    messages = chat_messages(history)
    if req.instructions:
        messages.insert(0, {"role": "system", "content": req.instructions})
    if not messages:
        raise APIError(400, "input is empty: send a string or a list of message items",
                       param="input")
    tools = map_tools(req.tools)
    body = chat_body(req, raw, messages, tools)
    chunks = await api.chat(request, body)
    folder = Folder(skeleton(req, api.cfg.model_id, tools), tools.spaces)
    return Turn(folder, chunks, copy.deepcopy(history), store if req.store else None), req.stream


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
    async def retrieve(rid: str) -> dict:
        return store.get(rid).response

    @app.delete("/v1/responses/{rid}")
    async def delete(rid: str) -> dict:
        store.delete(rid)
        return {"id": rid, "object": "response", "deleted": True}
