"""Tool calling in the server without a model: the request checks, what a request's tools
change (``plan_tools``), and the response shapes, whole and streamed, token by token."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from specdec.server.engine.events import DoneEvent, TokenEvent
from specdec.server.wires.chat_schemas import ChatCompletionRequest
from specdec.server.http.errors import APIError
from specdec.server.engine.tool_calls import ToolResponder, ToolSupport, plan_tools
from specdec.toolcall.prompt import renders_tools, template_messages

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
QUESTION = {"role": "user", "content": "What is the weather like in Paris today?"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 18 degrees Celsius."}
QWEN = ToolSupport(renders_tools=True, format="hermes")


def body(**kw):
    kw.setdefault("messages", [QUESTION])
    return ChatCompletionRequest.model_validate({"model": "m", **kw})


def spec(**kw):
    """The engine's request value a chat body of ``kw`` maps to (what ``plan_tools`` reads)."""
    return body(**kw).spec(thinking_switch=False)


def refused(match, **kw):
    with pytest.raises(ValidationError, match=match):
        body(**kw)


def test_a_whole_tool_loop_is_accepted_and_rendered_as_templates_read_it():
    b = body(messages=[QUESTION, CALL, RESULT], tools=[WEATHER], tool_choice="auto",
             parallel_tool_calls=False)
    msgs = template_messages(list(b.spec(False).messages))
    assert msgs[0] == QUESTION
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert msgs[2] == {**RESULT, "name": "get_weather"}
    parts = body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                        {"type": "text", "text": "b"}]}])
    assert parts.spec(False).messages[0]["content"] == "ab"


def test_what_is_refused_says_what_to_change():
    refused("text-only model", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
    refused("needs tool_call_id", messages=[QUESTION, CALL, {"role": "tool", "content": "x"}])
    refused("is not one of its tool_calls ids", messages=[QUESTION, CALL, {**RESULT, "tool_call_id": "x"}])
    refused("must answer a call", messages=[QUESTION, RESULT])
    refused("content is missing", messages=[{"role": "user", "content": None}])
    refused("belong to assistant", messages=[{**QUESTION, "tool_calls": CALL["tool_calls"]}])
    refused("not in tools", tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_time"}})
    refused("needs tools", tool_choice="required")
    refused("unique", tools=[WEATHER, WEATHER])
    refused("tool_choice", tools=[WEATHER], tool_choice="sometimes")
    refused("arguments", messages=[QUESTION, {**CALL, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}])


def test_plans():
    assert plan_tools(spec(), QWEN, "m") is None
    auto = plan_tools(spec(tools=[WEATHER]), QWEN, "m")
    assert auto.template_tools == [WEATHER] and auto.format.name == "hermes"
    assert auto.names == {"get_weather"} and auto.max_calls is None and auto.forced_schema is None
    none = plan_tools(spec(messages=[QUESTION, CALL, RESULT], tools=[WEATHER], tool_choice="none"),
                      QWEN, "m")
    assert none.template_tools is None and none.format is None
    named = plan_tools(spec(tools=[WEATHER], parallel_tool_calls=False, tool_choice={
        "type": "function", "function": {"name": "get_weather"}}), QWEN, "m")
    assert named.max_calls == 1 and named.forced_schema["properties"]["name"] == {"const": "get_weather"}
    assert plan_tools(spec(tools=[WEATHER]), ToolSupport(True, "none"), "m").format is None
    smol = ToolSupport(renders_tools=False, format="hermes")
    assert plan_tools(spec(tools=[WEATHER], tool_choice="none"), smol, "m").template_tools is None
    for kw in ({"tools": [WEATHER]}, {"messages": [QUESTION, CALL, RESULT]}):
        with pytest.raises(APIError, match="does not support tools") as e:
            plan_tools(spec(**kw), smol, "smollm2-135m")
        assert e.value.status == 400 and e.value.param == "tools"


def test_renders_tools(smollm):
    assert not renders_tools(smollm[1])  # SmolLM2's template ignores tools

    class Template:
        chat_template = "{% if tools %}T{% endif %}x"

        def apply_chat_template(self, messages, tools=None, **kw):
            return ("T" if tools else "") + "x"

    assert renders_tools(Template())


REPLY = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def responder(parallel=True):
    plan = plan_tools(spec(tools=[WEATHER], parallel_tool_calls=parallel), QWEN, "m")
    return ToolResponder("m", False, 0, plan)


def tokens(text, size=3):
    return [TokenEvent(text[i:i + size], i) for i in range(0, len(text), size)]


@pytest.mark.parametrize("reply", [REPLY, "Sure.\n<tool_call>\n" + REPLY + "\n</tool_call>"])
def test_whole_and_streamed_shapes(reply):
    done = DoneEvent("stop", usage={"prompt_tokens": 1})
    out = responder().whole(tokens(reply), done)
    choice = out["choices"][0]
    [call] = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert choice["message"]["content"] == (None if reply == REPLY else "Sure.")
    assert choice["finish_reason"] == "tool_calls"

    r = responder()
    chunks = [c for t in tokens(reply, 2) for c in r.token_chunks(t)] + r.final_chunks(done)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    content = "".join(d.get("content", "") for d in deltas)
    assert content == ("" if reply == REPLY else "Sure.")
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert calls[0]["index"] == 0 and calls[0]["id"].startswith("call_")
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_length_cut_and_no_call():
    r = responder(parallel=False)
    out = r.whole(tokens(REPLY + "\n" + REPLY + "\n{"), DoneEvent("length"))
    assert len(out["choices"][0]["message"]["tool_calls"]) == 1  # parallel_tool_calls: false
    assert out["choices"][0]["finish_reason"] == "length"
    out = responder().whole(tokens("It is sunny."), DoneEvent("stop"))
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny."}
    assert out["choices"][0]["finish_reason"] == "stop"


def test_streamed_logprobs_each_token_once():
    plan = plan_tools(spec(tools=[WEATHER]), QWEN, "m")
    r = ToolResponder("m", True, 0, plan)
    reply = "Sure.\n<tool_call>\n" + REPLY + "\n</tool_call>\n"
    events = [TokenEvent(e.text, e.token, logprob=-float(i), token_text=e.text)
              for i, e in enumerate(tokens(reply))]
    chunks = [c for e in events for c in r.token_chunks(e)] + r.final_chunks(DoneEvent("stop"))
    sent = [item["logprob"] for c in chunks if c["choices"][0]["logprobs"]
            for item in c["choices"][0]["logprobs"]["content"]]
    assert sent == [e.logprob for e in events]


def test_a_think_block_before_the_call():
    """A reasoning model (Qwen3-style): the think block goes to reasoning_content, the
    call after it is read from the answer, whole and streamed."""
    from specdec.server.engine.reasoning import ReasoningSplitter

    plan = plan_tools(spec(tools=[WEATHER]), QWEN, "m")
    reply = "<think>\nThe user wants Paris.\n</think>\n\n<tool_call>\n" + REPLY + "\n</tool_call>"
    out = ToolResponder("m", False, 0, plan, ReasoningSplitter(thinking=False)).whole(
        tokens(reply), DoneEvent("stop"))
    message = out["choices"][0]["message"]
    assert message["reasoning_content"] == "The user wants Paris." and message["content"] is None
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    r = ToolResponder("m", False, 0, plan, ReasoningSplitter(thinking=False))
    chunks = [c for t in tokens(reply, 2) for c in r.token_chunks(t)] + r.final_chunks(DoneEvent("stop"))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user wants Paris."
    assert not any(d.get("content") for d in deltas)
    assert [d["tool_calls"][0]["function"].get("name") for d in deltas if "tool_calls" in d] == [
        "get_weather", None]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
