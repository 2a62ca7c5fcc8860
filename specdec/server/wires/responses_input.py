"""The Responses API's request: ``input`` items, ``tools``, ``tool_choice``, ``text.format``
and options translated onto the engine's request value, a ``ChatSpec`` (``namespace`` tools flattened to
``<namespace>__<name>``; tools this server cannot run dropped and listed in ``ToolMap``).
Every rejection is a 400 naming the offending field. Tests: tests/server/test_responses_input.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..engine.spec import Asked, ChatSpec
from ..http.errors import APIError
from .responses_store import ResponseStore

MAX_REFERENCES = 1000  # item_reference items in one request (each an index lookup)
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


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
    # chat-request extensions a Responses request may carry too (their ranges: the engine's)
    seed: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: str | list[str] | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    speculative: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    cache_salt: str | None = None

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
        key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
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
    """The request's tools as chat function tools; a wrong shape is a 400 naming it."""
    out = ToolMap()

    def add(fn: dict[str, Any], ns: str | None, where: str) -> None:
        name = _field(fn, "name", where)
        flat = _flat(ns, name)
        if ns:
            out.spaces[flat] = (ns, name)
        spec = {k: fn.get(k) for k in ("description", "parameters", "strict")}
        out.functions.append({"type": "function", "function": {
            "name": flat, **{k: v for k, v in spec.items() if v is not None}}})

    for i, tool in enumerate(tools or []):
        where = f"tools[{i}]"
        kind = tool.get("type")
        if kind == "function":
            add(tool, None, where)
        elif kind == "namespace":
            ns = _field(tool, "name", where)
            members = tool.get("tools") or tool.get("functions") or []
            if not isinstance(members, list):
                raise _bad(f"{where}.tools", "a namespace's tools are a list of tools")
            for j, fn in enumerate(members):
                if not isinstance(fn, dict):
                    raise _bad(f"{where}.tools[{j}]", "a tool is a JSON object")
                if fn.get("type", "function") == "function":
                    add(fn, ns, f"{where}.tools[{j}]")
                else:  # a custom (free-text) tool inside the namespace
                    out.dropped.append(f"{ns}.{fn.get('name')}")
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


EFFORTS = ("none", "minimal", "low", "medium", "high")  # chat's reasoning_effort values


def _template_kwargs(req: ResponsesRequest, thinking_switch: bool) -> dict[str, Any]:
    """The template's variables: ``chat_template_kwargs``, and ``reasoning.effort`` none or
    minimal turning a thinking switch off (as ``reasoning_effort`` on chat completions)."""
    effort = (req.reasoning or {}).get("effort")
    effort = "high" if effort == "xhigh" else effort
    if effort is not None and effort not in EFFORTS:
        raise _bad("reasoning.effort", f"effort must be one of {', '.join(EFFORTS)} or xhigh")
    out = dict(req.chat_template_kwargs or {})
    if thinking_switch and effort in ("none", "minimal"):
        out.setdefault("enable_thinking", False)
    return out


def chat_spec(req: ResponsesRequest, messages: list[dict[str, Any]], tools: ToolMap,
              thinking_switch: bool) -> ChatSpec:
    """The engine's request value a Responses request maps to (its ranges and tool
    history are the engine's to check: ``check_spec``)."""
    asked = Asked(req.temperature, req.top_p, req.top_k, req.min_p, req.seed,
                  req.repetition_penalty, req.presence_penalty or 0.0, req.frequency_penalty or 0.0)
    stop = [req.stop] if isinstance(req.stop, str) else req.stop or []
    return ChatSpec(req.model, messages=tuple(messages), tools=tuple(tools.functions),
                    tool_choice=map_choice(req.tool_choice, tools),
                    parallel_tool_calls=req.parallel_tool_calls,
                    template_kwargs=_template_kwargs(req, thinking_switch),
                    response_format=map_format(req.text), max_tokens=req.max_output_tokens,
                    sampling=asked, stop=tuple(stop), speculative=req.speculative,
                    cache_salt=req.cache_salt, store=req.store)


def input_items(req: ResponsesRequest, store: ResponseStore,
                tenant: str = "") -> list[dict[str, Any]]:
    """This request's input as items (a string is one user message), references resolved
    in ``tenant``'s own stored responses (an index lookup each, at most MAX_REFERENCES)."""
    if isinstance(req.input, str):
        return [{"type": "message", "role": "user", "content": req.input}]
    refs = sum(1 for it in req.input if isinstance(it, dict) and it.get("type") == "item_reference")
    if refs > MAX_REFERENCES:
        raise _bad("input", f"{refs} item_reference items; at most {MAX_REFERENCES} are accepted "
                   "in one request: send previous_response_id, or the items themselves")
    out = []
    for i, item in enumerate(req.input):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            ref = item.get("id")
            found = store.item(tenant, ref) if isinstance(ref, str) else None
            if found is None:  # another key's item is as unknown as one never stored
                raise APIError(404, f"input[{i}]: item_reference {item.get('id')!r} names no "
                               "item of a response stored for this API key; send the item "
                               "itself", param=f"input[{i}]", code="item_not_found")
            if not found:  # a reasoning item: known, and no prompt replays it
                continue
            item = found
        out.append(item)
    return out
