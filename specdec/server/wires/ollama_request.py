"""Ollama's request bodies (/api/chat, /api/generate, /api/show) and their translation onto
the engine's request value, a ``ChatSpec`` (a chat; a text completion for raw generate, or a
model without a chat template), checked as the engine will check it: calls get ids, ``tool`` messages answer the calls before them in order (or
by ``tool_call_id`` / ``tool_name``), omitted options keep the server's defaults. A 400 names
the field as the client sent it (``RENAMES``). Tests: tests/server/test_ollama_request.py.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, ValidationError

from ..http.body import read_json
from ..http.errors import APIError, validation_error
from ..engine.spec import Asked, ChatSpec, check_spec

if TYPE_CHECKING:  # the engine's handle is passed in (``register``); its type only
    from ..engine.api import Api

# the engine's sampling fields (``Asked``) Ollama's options name as the engine does
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty")
# the engine's (chat body's) names -> Ollama's, for 400 messages that name what was sent
RENAMES = {"max_tokens": "options.num_predict", "repetition_penalty": "options.repeat_penalty",
           "response_format": "format", "chat_template_kwargs": "think",
           **{k: f"options.{k}" for k in (*SAMPLING, "stop")}}


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
    """Ollama's ``options``: its own names typed here; the engine's sampling fields under their
    own names (``SAMPLING``) kept as sent, for the engine to type and range (``check_spec``: a
    400 names ``options.<name>``); any other option is ignored."""

    model_config = ConfigDict(extra="allow", strict=True)
    num_predict: int | None = None  # -1 / -2 (no limit, fill the context): to EOS or the context
    repeat_penalty: float | None = None
    stop: list[str] | str | None = None

    def asked(self) -> Asked:
        """The engine's sampling asked (a negative seed: unseeded; omitted: the server's default)."""
        sent = {k: v for k, v in (self.model_extra or {}).items() if k in SAMPLING}
        if isinstance(sent.get("seed"), int) and sent["seed"] < 0:
            del sent["seed"]
        return Asked(**sent, repetition_penalty=self.repeat_penalty)


class _Generation(_Body):
    model: str
    format: str | dict[str, Any] | None = None
    options: Options | None = None
    stream: bool = True
    think: bool | str | None = None  # gpt-oss's "low" / "medium" / "high" mean on
    keep_alive: Any = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    # this server's chat-request extensions, checked there (400s name them)
    speculative: dict[str, Any] | None = None
    cache_salt: str | None = None
    store: bool | None = None  # false: the text stays out of the shared drafting memory


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


async def read_body(request: Request, model: type[_Body]) -> Any:
    raw = await read_json(request)  # 400s for bad JSON, too deep, NaN, lone surrogates
    try:
        return await run_in_threadpool(model.model_validate, raw)  # 4 MiB: off the loop
    except ValidationError as e:
        raise _invalid(e) from e


def _invalid(e: ValidationError) -> APIError:
    """A 400 naming the field (``validation_error`` reads FastAPI's ("body", ...) paths)."""
    return validation_error([{**d, "loc": ("body", *d["loc"])} for d in e.errors()])


# -- requests: Ollama's -> the engine's ChatSpec -------------------------------------------


def _sampling(body: _Generation) -> dict[str, Any]:
    """Ollama's options as the spec's limits and sampling (negative: no limit, unseeded)."""
    o = body.options or Options()
    return {"max_tokens": o.num_predict if o.num_predict and o.num_predict > 0 else None,
            "stop": tuple([o.stop] if isinstance(o.stop, str) else o.stop or ()),
            "sampling": o.asked()}


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


def _tools(tools: list[dict[str, Any]] | None) -> tuple[dict[str, Any], ...]:
    """OpenAI function tools (Ollama's are the same shape; only the known keys pass)."""
    if not tools:  # the Python client sends [] when there are none
        return ()
    keep = ("name", "description", "parameters", "strict")
    for i, t in enumerate(tools):
        if not isinstance(t.get("function"), dict):
            raise APIError(400, f"tools[{i}].function: a tool is {{\"type\": \"function\", "
                           "\"function\": {\"name\": ..., \"parameters\": ...}}",
                           param=f"tools[{i}].function")
    return tuple({"type": t.get("type", "function"),
                  "function": {k: v for k, v in t["function"].items() if k in keep}}
                 for t in tools)


def _renamed(err: APIError) -> APIError:
    """``err`` naming the field as the client sent it (``RENAMES``)."""
    param = err.param or ""
    head, _, rest = param.partition(".")
    if head in RENAMES:
        new = RENAMES[head] + (f".{rest}" if rest else "")
        err.message, err.param = err.message.replace(param, new, 1), new
    return err


def _checked(spec: ChatSpec) -> ChatSpec:
    """``spec`` as the engine will check it, its 400s naming Ollama's fields."""
    try:
        check_spec(spec)
    except APIError as e:
        raise _renamed(e) from None
    return spec


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
        """``think`` as the template's variables: ``enable_thinking`` (400 for a model that
        cannot think)."""
        on = think not in (None, False, "")
        if on and not self.thinks:
            raise APIError(400, f"{self.api.cfg.model_id!r} does not support thinking: omit "
                           "think or send false", param="think")
        if think is None or not self.thinking_switch:
            return {}
        return {"enable_thinking": on}

    def chat_spec(self, body: ChatBody, name: str) -> ChatSpec:
        """The engine's request value an /api/chat body maps to."""
        return _checked(ChatSpec(name, messages=tuple(_history(body.messages)), tools=_tools(body.tools),
                                 response_format=_response_format(body.format),
                                 template_kwargs=self.think(body.think), **_sampling(body),
                                 **_logprobs_asked(body), **_extensions(body)))

    def generate_spec(self, body: GenerateBody, name: str) -> ChatSpec:
        """The engine's request value an /api/generate body maps to (a chat with the
        template; a text completion when ``raw`` or without one)."""
        _no_images(body.images, "")
        for key, what in (("suffix", "fill-in-the-middle (suffix)"),
                          ("template", "a template override (the model's own is used)"),
                          ("context", "context (none is returned: chat with /api/chat)")):
            if getattr(body, key):
                raise APIError(400, f"{what} is not supported here: omit {key}", param=key)
        if not body.raw and self.has_template:
            messages = ([Message(role="system", content=body.system)] if body.system else []) \
                + [Message(role="user", content=body.prompt or "")]
            return self.chat_spec(ChatBody(model=body.model, messages=messages, format=body.format, options=body.options,
                think=body.think, logprobs=body.logprobs, top_logprobs=body.top_logprobs,
                speculative=body.speculative, cache_salt=body.cache_salt, store=body.store), name)
        why = "raw" if body.raw else "this model has no chat template, so"
        for key, value in (("system", body.system), ("format", body.format), ("think", body.think)):
            if value:
                raise APIError(400, f"{key} needs the chat template, and {why} the prompt goes "
                               f"to the model as it is: omit {key}", param=key)
        if body.logprobs and (body.top_logprobs or 0) > 5:  # as on /v1/completions
            raise APIError(400, "top_logprobs: a raw prompt's tokens have at most 5 "
                           "alternatives each", param="top_logprobs")
        return _checked(ChatSpec(name, prompt=body.prompt or "", **_sampling(body),
                                 **_logprobs_asked(body), **_extensions(body)))


def _extensions(body: _Generation) -> dict[str, Any]:
    return {"speculative": body.speculative, "cache_salt": body.cache_salt,
            "store": body.store is not False}


def _logprobs_asked(body: _Generation) -> dict[str, Any]:
    return {"logprobs": True, "top_logprobs": body.top_logprobs or 0} if body.logprobs else {}
