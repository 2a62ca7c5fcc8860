"""The engine's request value (``engine.spec.ChatSpec``, issue #45): a wire that maps straight to
it (Anthropic's) still gets the chat path's 400s from the engine's boundary check, word for word,
and nothing reaches the worker. In-process, no model (the golden scripted app)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from specdec.server.engine.spec import Asked, ChatSpec, check_spec
from specdec.server.http.errors import APIError

from .golden import KEY, scripted_app

QUESTION = [{"role": "user", "content": "Hi"}]
CALL = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def test_a_spec_is_a_chat_or_a_text_completion():
    with pytest.raises(ValueError, match="messages .* or a prompt"):
        ChatSpec("m")
    with pytest.raises(ValueError):
        ChatSpec("m", messages=(), prompt="x")
    assert ChatSpec("m", prompt=(1, 2)).chat is False and ChatSpec("m", messages=()).chat


def test_check_spec_refuses_what_no_wire_may_send():
    chat = ChatSpec("m", messages=tuple(QUESTION))
    check_spec(chat)
    for bad, match in (
            ({"stop": ("",)}, "non-empty"),
            ({"cache_salt": ""}, "^cache_salt: "),
            ({"speculative": {"num_draft_tokens": 99}}, "^speculative.num_draft_tokens: "),
            ({"tool_choice": "required"}, "needs tools"),
            ({"messages": ({"role": "tool", "tool_call_id": "x", "content": "r"},)},
             "must answer a call"),
            ({"response_format": {"type": "json_schema"}}, "json_schema goes with")):
        with pytest.raises(APIError, match=match) as e:
            check_spec(ChatSpec(**{"model": "m", "messages": chat.messages, **bad}))
        assert e.value.status == 400
    check_spec(ChatSpec("m", prompt="x", sampling=Asked(temperature=0.5)))


@pytest.mark.parametrize("body,match", [
    ({"messages": [*QUESTION, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "r"}]}]}, "must answer a call"),
    ({"messages": [*QUESTION, CALL, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "r"}]}], "tools": [TOOL]},
     "is not one of its tool_calls ids"),
    ({"tool_choice": {"type": "tool", "name": "g"}, "tools": [TOOL]}, "not in tools"),
    ({"speculative": {"num_draft_tokens": 99}}, "speculative.num_draft_tokens"),
    ({"cache_salt": ""}, "cache_salt")])
def test_the_anthropic_wire_gets_the_engines_400s(body, match):
    app, worker = scripted_app(["ok"])
    with TestClient(app) as client:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            r = client.post(path, headers={"x-api-key": KEY}, json={
                "model": "claude-x", "max_tokens": 8, "messages": QUESTION, **body})
            if path.endswith("count_tokens") and {"cache_salt", "speculative"} & set(body):
                continue  # a count reads only what shapes the prompt
            assert r.status_code == 400, (path, r.text)
            assert r.json()["type"] == "error" and match in r.json()["error"]["message"]
    assert worker.requests == []
