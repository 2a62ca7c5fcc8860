"""The chat-template side of tool calling (``specdec.toolcall.prompt``): messages as
templates want them, and the forced-call schema that constrains ``tool_choice``."""

from __future__ import annotations

import jsonschema
import pytest

from specdec.toolcall import FORMATS, parse_tool_calls
from specdec.toolcall.prompt import forced_call_schema, template_messages


def test_template_messages_and_forced_schema():
    msgs = template_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}])
    assert msgs[0] == {"role": "user", "content": "hi"}
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == "not json"  # kept as sent
    assert msgs[2]["name"] == "f"
    tools = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}} for n in ("a", "b")]
    one = forced_call_schema(tools, "required", parallel=False)
    assert [s["properties"]["name"]["const"] for s in one["anyOf"]] == ["a", "b"]
    assert forced_call_schema(tools, "none") is None


def test_forced_schema_compiles_and_its_replies_parse():
    """The seam for constrained tool_choice: the grammar engine compiles the schema, and
    every format reads a reply that follows it (as Qwen2.5-Coder-0.5B writes under it)."""
    from specdec.core.grammar import response_grammar
    from specdec.toolcall.prompt import forced_response_format

    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for choice, reply in (("required", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
                          ({"type": "function", "function": {"name": "get_weather"}},
                           '{"name": "get_weather", "arguments": {"city": "Paris"}}')):
        assert response_grammar(forced_response_format(forced_call_schema([tool], choice)))
        for fmt in FORMATS:
            p = parse_tool_calls(reply, fmt, {"get_weather"})
            assert p.content is None and [d.call.args() for d in p.calls] == [{"city": "Paris"}]


def test_the_forced_schema_admits_declared_calls_only():
    tools = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}
        for n in ("a", "b")]
    schema = forced_call_schema(tools, "required")
    jsonschema.validate([{"name": "b", "arguments": {"x": 2}}, {"name": "a", "arguments": {"x": 1}}],
                        schema)
    for bad in ([], [{"name": "c", "arguments": {"x": 1}}], [{"name": "a", "arguments": {"x": "1"}}],
                [{"name": "a", "arguments": {"x": 1}, "id": "c1"}], {"name": "a", "arguments": {"x": 1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    bare = forced_call_schema([{"type": "function", "function": {"name": "now"}}],
                              {"type": "function", "function": {"name": "now"}})
    jsonschema.validate({"name": "now", "arguments": {}}, bare)


def test_template_messages_decode_object_arguments_only():
    calls = [{"id": "c1", "function": {"name": "f", "arguments": '[1, 2]'}},
             {"id": "c2", "function": {"name": "g", "arguments": {"already": "an object"}}}]
    out = template_messages([{"role": "assistant", "tool_calls": calls},
                             {"role": "tool", "tool_call_id": "c2", "content": "ok"},
                             {"role": "tool", "tool_call_id": "c1", "name": "own", "content": "ok"}])
    assert [c["function"]["arguments"] for c in out[0]["tool_calls"]] == [
        "[1, 2]", {"already": "an object"}]
    assert (out[1]["name"], out[2]["name"]) == ("g", "own")
    assert calls[0]["function"]["arguments"] == "[1, 2]"  # the caller's messages are not changed
