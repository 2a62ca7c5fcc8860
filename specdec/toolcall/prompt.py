"""The chat-template side of tool calling: the messages a template reads, whether a template
renders tools at all, and the schema a forced call must follow.

Contract: ``template_messages`` (arguments as objects, tool messages named);
``renders_tools(tokenizer)`` (probe render with and without a tool);
``forced_call_schema(tools, tool_choice, parallel)`` (one call or an array; None for
auto/none), which every format reads back; ``forced_response_format`` wraps it for
``core.grammar``. Tests: tests/toolcall/test_prompt.py.
Details: docs/agents-and-structured-output.md#tools-in-the-prompt."""

from __future__ import annotations

import json
from typing import Any

PROBE_TOOL = {"type": "function", "function": {
    "name": "specdec_probe_tool", "description": "probe",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
_PROBE_MESSAGES = [{"role": "user", "content": "probe"}]


def _args_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
            return arguments
        return decoded if isinstance(decoded, dict) else arguments
    return arguments


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates read them.

    >>> msgs = [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1",
    ...          "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
    ...         {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    >>> out = template_messages(msgs)
    >>> out[0]["tool_calls"][0]["function"]["arguments"], out[1]["name"]
    ({'x': 1}, 'f')
    """
    names: dict[str, str] = {}
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c["function"], arguments=_args_object(c["function"].get("arguments")))
                calls.append(dict(c, function=fn))
                names[c.get("id", "")] = fn["name"]
            m["tool_calls"] = calls
        if m.get("role") == "tool" and m.get("tool_call_id") in names and "name" not in m:
            m["name"] = names[m["tool_call_id"]]
        out.append(m)
    return out


def _render(tokenizer: Any, tools: list[dict] | None) -> str:
    kwargs = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(_PROBE_MESSAGES, add_generation_prompt=True,
                                         tokenize=False, **kwargs)
    return text if isinstance(text, str) else str(text)


def renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template shows the model its tools (False without a template)."""
    if getattr(tokenizer, "chat_template", None) is None:
        return False
    try:
        return _render(tokenizer, [PROBE_TOOL]) != _render(tokenizer, None)
    except Exception:  # noqa: BLE001 (a template that fails on tools does not support them)
        return False


def _call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False}


def forced_call_schema(tools: list[dict[str, Any]], tool_choice: Any,
                       parallel: bool = True) -> dict[str, Any] | None:
    """The JSON schema a forced reply follows (None when nothing is forced).

    >>> tool = {"type": "function", "function": {"name": "get_weather", "parameters":
    ...         {"type": "object", "properties": {"city": {"type": "string"}}}}}
    >>> s = forced_call_schema([tool], {"type": "function", "function": {"name": "get_weather"}})
    >>> s["properties"]["name"], s["properties"]["arguments"]["properties"]
    ({'const': 'get_weather'}, {'city': {'type': 'string'}})
    >>> forced_call_schema([tool], "required")["type"], forced_call_schema([tool], "auto")
    ('array', None)
    """
    if isinstance(tool_choice, dict):
        name = tool_choice["function"]["name"]
        return _call_schema(next(t for t in tools if t["function"]["name"] == name))
    if tool_choice != "required" or not tools:
        return None
    one = _call_schema(tools[0]) if len(tools) == 1 else {"anyOf": [_call_schema(t) for t in tools]}
    return {"type": "array", "items": one, "minItems": 1} if parallel else one


def forced_response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the ``response_format`` the grammar engine compiles."""
    return {"type": "json_schema", "json_schema": {"name": "tool_calls", "schema": schema,
                                                   "strict": True}}
