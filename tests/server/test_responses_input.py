"""The Responses API's request translated onto a chat request
(``specdec.server.wires.responses_input``): input items as chat messages, tools and
``tool_choice`` mapped, ``text.format`` as ``response_format``, and every refusal a 400
naming the field."""

from __future__ import annotations

import pytest

from specdec.server.http.errors import APIError
from specdec.server.wires.responses_input import (MAX_REFERENCES, ResponsesRequest, ToolMap, chat_spec,
                                                   chat_messages, input_items, map_choice,
                                                   map_format, map_tools)
from specdec.server.wires.responses_store import ResponseStore


def call(call_id, name="f", **kw):
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}", **kw}


def test_items_become_chat_messages_with_calls_joined():
    items = [{"role": "developer", "content": "be brief"},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
             {"type": "reasoning", "summary": []},
             {"role": "assistant", "content": "checking"},
             call("c1"), call("c2", name="lookup", namespace="crm"),
             {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
             call("c3")]
    msgs = chat_messages(items)
    assert [m["role"] for m in msgs] == ["developer", "user", "assistant", "tool", "assistant"]
    assert msgs[1]["content"] == "ab" and msgs[2]["content"] == "checking"
    assert [c["function"]["name"] for c in msgs[2]["tool_calls"]] == ["f", "crm__lookup"]
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert msgs[4]["content"] is None and msgs[4]["tool_calls"][0]["id"] == "c3"


@pytest.mark.parametrize("items, param, needle", [
    (["hi"], "input[0]", "an input item is a JSON object"),
    ([{"role": "robot", "content": "x"}], "input[0].role", "role must be one of"),
    ([{"role": "user", "content": 3}], "input[0].content", "a string or a list"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
     "input[0].content[0]", "text-only model"),
    # a part's type that is no string (unhashable) was a TypeError, a 500 (issue #45 item 6)
    ([{"role": "user", "content": [{"type": ["input_text"], "text": "a"}]}],
     "input[0].content[0]", "text-only model"),
    ([call(None)], "input[0].call_id", "needs call_id as a string"),
    ([{"type": "web_search_call"}], "input[0]", "'web_search_call' are not supported"),
])
def test_refusals_name_the_item_and_field(items, param, needle):
    with pytest.raises(APIError) as e:
        chat_messages(items)
    assert (e.value.status, e.value.param) == (400, param) and needle in e.value.message


def test_tool_choice_maps_onto_the_chat_ones():
    tools = map_tools([{"type": "function", "name": "f"}, {"type": "web_search_preview"}])
    assert map_choice("required", tools) == "required" and map_choice(None, tools) is None
    assert map_choice({"type": "function", "name": "g", "namespace": "crm"}, tools) == {
        "type": "function", "function": {"name": "crm__g"}}
    assert map_choice({"type": "allowed_tools", "mode": "required", "tools": []}, tools) == "required"
    with pytest.raises(APIError) as e:
        map_choice({"type": "web_search_preview"}, tools)
    assert e.value.param == "tool_choice" and "dropped: web_search_preview" in e.value.message


def test_text_format_becomes_response_format():
    assert map_format(None) is None and map_format({"format": {"type": "text"}}) is None
    assert map_format({"format": {"type": "json_object"}}) == {"type": "json_object"}
    schema = {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}
    assert map_format({"format": schema}) == {"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object"}, "strict": True}}


def test_the_spec_carries_options_and_extensions():
    raw = {"model": "m", "input": "hi", "max_output_tokens": 7, "temperature": 0.0,
           "reasoning": {"effort": "xhigh"}, "seed": 3, "top_k": 5, "stop": "\n"}
    req = ResponsesRequest.model_validate(raw)
    spec = chat_spec(req, [{"role": "user", "content": "hi"}], ToolMap(), thinking_switch=True)
    asked = spec.sampling
    assert (spec.max_tokens, asked.temperature, asked.seed, asked.top_k) == (7, 0.0, 3, 5)
    assert spec.stop == ("\n",) and spec.tools == () and spec.template_kwargs == {}
    off = ResponsesRequest.model_validate({**raw, "reasoning": {"effort": "minimal"}})
    assert chat_spec(off, [], ToolMap(), True).template_kwargs == {"enable_thinking": False}
    assert chat_spec(off, [], ToolMap(), False).template_kwargs == {}  # no switch to turn
    with pytest.raises(APIError) as e:
        chat_spec(ResponsesRequest.model_validate({**raw, "reasoning": {"effort": "max"}}),
                  [], ToolMap(), True)
    assert e.value.param == "reasoning.effort"


def test_item_references_resolve_from_the_store_or_are_refused():
    store = ResponseStore()
    store.put("key0", {"id": "resp_1"}, [{"id": "msg_1", "type": "message", "role": "user", "content": "a"},
                                         {"id": "rs_1", "type": "reasoning"}])
    req = ResponsesRequest(model="m", input=[{"type": "item_reference", "id": "msg_1"},
                                             {"type": "item_reference", "id": "rs_1"}])
    assert input_items(req, store, "key0") == [  # the reasoning item: known, not replayed
        {"id": "msg_1", "type": "message", "role": "user", "content": "a"}]
    with pytest.raises(APIError) as e:  # another key's item is not there for key1
        input_items(req, store, "key1")
    assert e.value.param == "input[0]"
    assert input_items(ResponsesRequest(model="m", input="hi"), store) == [
        {"type": "message", "role": "user", "content": "hi"}]
    with pytest.raises(APIError) as e:
        input_items(ResponsesRequest(model="m", input=["x", {"type": "item_reference", "id": "no"}]),
                    store)
    assert (e.value.status, e.value.param) == (404, "input[1]") and "send the item itself" in e.value.message


def test_references_past_the_cap_are_a_400_naming_it():
    refs = [{"type": "item_reference", "id": "x"}] * (MAX_REFERENCES + 1)
    with pytest.raises(APIError) as e:
        input_items(ResponsesRequest(model="m", input=refs), ResponseStore())
    assert e.value.status == 400 and e.value.param == "input" and "item_reference" in e.value.message
