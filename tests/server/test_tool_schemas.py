"""Request bodies for tool calling (``specdec.server.engine.spec.tool_schemas``): schemas bounded in size
and depth, strict tool and call shapes, and the problems of a tool loop's messages, each
a message that says what to change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specdec.server.engine.spec.messages import ChatMessage
from specdec.server.engine.spec.tool_schemas import (MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, FunctionDef,
                                         NamedToolChoice, ToolCallIn, ToolDef, message_problem,
                                         part_problem, request_problem, schema_problem)


def nested(depth):
    schema = {}
    for _ in range(depth - 1):
        schema = {"p": schema}
    return schema


def test_schemas_are_bounded_in_depth_and_bytes():
    assert schema_problem(nested(MAX_SCHEMA_DEPTH), "parameters") is None
    assert schema_problem(nested(MAX_SCHEMA_DEPTH + 1), "parameters") == (
        f"parameters: the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    big = {"description": "x" * MAX_SCHEMA_BYTES}
    assert "bytes; at most" in schema_problem(big, "tools[0]") and schema_problem([], "s") is None
    with pytest.raises(ValidationError, match="nests deeper"):
        FunctionDef(name="f", parameters=nested(MAX_SCHEMA_DEPTH + 1))
    # the walk is iterative: a schema past the interpreter's recursion limit is refused too
    assert "nests deeper" in schema_problem(nested(100_000), "parameters")


@pytest.mark.parametrize("fn", [{"name": "bad name"}, {"name": "x" * 65}, {"name": ""},
                                {"name": "f", "extra": 1}, {"name": "f", "strict": "yes"}])
def test_function_definitions_are_strict(fn):
    with pytest.raises(ValidationError):
        ToolDef.model_validate({"type": "function", "function": fn})


def test_call_arguments_are_json_text_not_an_object():
    with pytest.raises(ValidationError, match="a string holding JSON"):
        ToolCallIn.model_validate({"id": "c", "function": {"name": "f", "arguments": {"a": 1}}})
    call = ToolCallIn.model_validate({"id": "c", "function": {"name": "f", "arguments": "{}"}})
    assert call.type == "function"


def test_parts_and_message_roles():
    assert part_problem("text") is None and part_problem([{"type": "text", "text": "a"}]) is None
    assert part_problem([{"type": "text"}, {"type": "image_url"}]).startswith(
        "content[1] has type 'image_url': this server runs a text-only model")
    calls = [object()]
    assert message_problem("user", True, calls, None) == (
        "tool_calls belong to assistant messages, not 'user' ones")
    assert "needs tool_call_id" in message_problem("tool", True, None, None)
    assert "belongs to tool messages" in message_problem("user", True, None, "c1")
    assert "content is missing" in message_problem("user", False, None, None)
    assert message_problem("assistant", False, calls, None) is None


def msgs(*raw):
    return [ChatMessage.model_validate(m) for m in raw]


CALLED = {"role": "assistant", "tool_calls": [
    {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}
TOOLS = [ToolDef.model_validate({"type": "function", "function": {"name": n}}) for n in "fg"]


def test_a_tool_message_answers_a_call_of_the_assistant_message_before_it():
    answer = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    assert request_problem(msgs({"role": "user", "content": "hi"}, CALLED, answer), TOOLS,
                           "auto") is None
    problem = request_problem(msgs(CALLED, {**answer, "tool_call_id": "c9"}), TOOLS, None)
    assert problem.startswith("messages[1]: a tool message must answer") and "(c1)" in problem
    problem = request_problem(msgs(CALLED, {"role": "user", "content": "?"}, answer), None, None)
    assert "messages[2]" in problem and "(none)" in problem


def test_tool_choice_and_tool_names():
    named = NamedToolChoice.model_validate({"type": "function", "function": {"name": "h"}})
    assert "names the function 'h', which is not in tools ('f', 'g')" in request_problem(
        [], TOOLS, named)
    assert "needs tools" in request_problem([], None, "required")
    assert "'f' appears more than once" in request_problem([], TOOLS + TOOLS[:1], "auto")
