"""Request bodies for tool calling: tools, ``tool_choice``, and the messages of a tool loop.

Contract: the pydantic models here are OpenAI's shapes, strict as in ``schemas``
(``ToolDef``, ``ToolChoice``, ``NamedToolChoice``, ``ToolCallIn``). The checks
``part_problem``, ``message_problem`` and ``request_problem`` return a message that says
what to change, or ``None``; ``schemas`` raises them as 400s. Full contract:
docs/agents-and-structured-output.md#tool-schemas. Tests: tests/server/test_tool_schemas.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

FUNCTION_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
# what a client may make the server compile into a grammar (or render into a prompt):
# generous for real agents (Claude Code's 24 tools carry ~64 KB of schema in all)
MAX_TOOLS = 128
MAX_SCHEMA_BYTES = 64 << 10
MAX_SCHEMA_DEPTH = 32


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep: iterative, and it stops
    at the first node past the limit (a schema 100k deep costs no recursion, no full walk)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) \
            else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def schema_problem(schema: Any, where: str) -> str | None:
    """Why a client's JSON schema is refused (too large or too deep to compile at a
    bounded cost), or None."""
    if _deeper_than(schema, MAX_SCHEMA_DEPTH):  # first: json.dumps recurses
        return f"{where}: the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        return f"{where}: the schema is {size} bytes; at most {MAX_SCHEMA_BYTES} are accepted"
    return None


def unsupported(message: str) -> PydanticCustomError:
    """A validation error whose message is the whole message (a 400 says it as it is)."""
    return PydanticCustomError("unsupported_value", message)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FunctionDef(Strict):
    name: str = Field(pattern=FUNCTION_NAME, description="letters, digits, _ . - (at most 64)")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema object")
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _bounded(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = None if v is None else schema_problem(v, "parameters")
        if problem:
            raise PydanticCustomError("unsupported_value", problem)
        return v


class ToolDef(Strict):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Union[Literal["none", "auto", "required"], NamedToolChoice]


class FunctionCallIn(Strict):
    name: str
    arguments: str = Field(description="the call's arguments as a JSON string")

    @field_validator("arguments", mode="before")
    @classmethod
    def _json_text(cls, v: Any) -> Any:
        if not isinstance(v, str):
            raise PydanticCustomError(
                "unsupported_value", "function.arguments is a string holding JSON, as the API "
                "returned it (e.g. '{\"city\": \"Paris\"}'), not a JSON object")
        return v


class ToolCallIn(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


def part_problem(content: Any) -> str | None:
    """What is wrong with a list of content parts that are not all text."""
    if not isinstance(content, list):
        return None
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind != "text":
            return (f"content[{i}] has type {kind!r}: this server runs a text-only model; "
                    "send text as a string or as {\"type\": \"text\", \"text\": ...} parts")
    return None


def message_problem(role: str, has_content: bool, tool_calls: list | None,
                    tool_call_id: str | None) -> str | None:
    if tool_calls and role != "assistant":
        return f"tool_calls belong to assistant messages, not {role!r} ones"
    if role == "tool" and tool_call_id is None:
        return "a tool message needs tool_call_id: the id of the call it answers"
    if role != "tool" and tool_call_id is not None:
        return f"tool_call_id belongs to tool messages, not {role!r} ones"
    if not has_content and not (role == "assistant" and tool_calls):
        return ("content is missing: only an assistant message with tool_calls may have "
                "content null")
    return None


def _choice_problem(tools: list[ToolDef], choice: ToolChoice | None) -> str | None:
    names = [t.function.name for t in tools]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        return f"tools: function names must be unique; {dup!r} appears more than once"
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            return (f"tool_choice names the function {choice.function.name!r}, which is not "
                    f"in tools ({', '.join(map(repr, names)) or 'none given'})")
    elif choice == "required" and not tools:
        return "tool_choice 'required' needs tools: send the functions the model may call"
    return None


def request_problem(messages: list[Any], tools: list[ToolDef] | None,
                    choice: ToolChoice | None) -> str | None:
    """Problems across a request's tools, tool_choice and messages (a tool message
    must answer one of the calls of the nearest assistant message before it)."""
    problem = _choice_problem(tools or [], choice)
    if problem:
        return problem
    open_ids: set[str] | None = None  # ids of the calls tool messages may answer now
    for i, m in enumerate(messages):
        if m.role == "assistant":
            open_ids = {c.id for c in m.tool_calls or []}
        elif m.role == "tool":
            if not open_ids or m.tool_call_id not in open_ids:
                known = ", ".join(sorted(open_ids or ())) or "none"
                return (f"messages[{i}]: a tool message must answer a call of the assistant "
                        f"message before it; tool_call_id {m.tool_call_id!r} is not one of "
                        f"its tool_calls ids ({known})")
        else:
            open_ids = None
    return None
