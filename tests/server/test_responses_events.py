"""The Responses API's event folding (``Folder``): chat-completion chunks in, Responses
items and events out, without a server — reasoning summaries, namespaced function calls."""

from __future__ import annotations

from specdec.server.wires.responses_events import Folder
from specdec.server.wires.responses_input import map_tools

WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def chunk(**delta):
    finish = delta.pop("finish", None)
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_thought_becomes_a_reasoning_item_with_a_summary():
    folder = Folder({"output": [], "status": "in_progress"}, {})
    events = folder.start()
    for c in (chunk(role="assistant", content=""), chunk(reasoning_content="Paris is "),
              chunk(reasoning_content="the capital."), chunk(content="Paris"),
              chunk(finish="stop"), {"choices": [], "usage": {"prompt_tokens": 5,
                                                              "completion_tokens": 3}}):
        events += folder.feed(c)
    events += folder.end()
    assert [e["type"] for e in events][2:9] == [
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.output_item.done"]
    thought, message = folder.response["output"]
    assert thought["summary"] == [{"type": "summary_text", "text": "Paris is the capital."}]
    assert message["content"][0]["text"] == "Paris" and events[-1]["type"] == "response.completed"
    assert folder.response["usage"]["total_tokens"] == 8


def test_namespace_tools_are_flattened_and_calls_answered_with_their_namespace():
    tools = map_tools([WEATHER, {"type": "namespace", "name": "crm", "description": "CRM",
                                 "tools": [{**WEATHER, "name": "lookup"},
                                           {"type": "custom", "name": "patch"}]},
                       {"type": "web_search_preview"}])
    assert [f["function"]["name"] for f in tools.functions] == ["get_weather", "crm__lookup"]
    assert tools.dropped == ["crm.patch", "web_search_preview"]
    folder = Folder({"output": [], "status": "in_progress"}, tools.spaces)
    folder.feed(chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "crm__lookup", "arguments": ""}}]))
    folder.feed(chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]))
    folder.feed(chunk(finish="tool_calls"))
    [call] = folder.response["output"]
    assert (call["name"], call["namespace"], call["call_id"]) == ("lookup", "crm", "call_1")
    assert call["arguments"] == '{"city": "Oslo"}'
