"""A chat request's messages and its ``response_format``, validated at the boundary:
text parts only, each role's own fields (tool calls on assistant turns, the call a tool
message answers), JSON schemas bounded. ``template_message`` is one message as the chat
template reads it. Tests: tests/server/test_schemas.py, tests/server/test_tool_schemas.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .tool_schemas import Strict, unsupported, ToolCallIn, message_problem, part_problem, schema_problem


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant: the calls it made
    tool_call_id: str | None = None  # tool: the call this message answers

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, v: Any) -> Any:
        problem = part_problem(v)
        if problem:
            raise unsupported(problem)
        return v

    @model_validator(mode="after")
    def _role_fields(self) -> Any:
        problem = message_problem(self.role, self.content is not None, self.tool_calls,
                                  self.tool_call_id)
        if problem:
            raise unsupported(problem)
        return self

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content or [])


class JsonSchemaFormat(Strict):
    name: str = Field(max_length=64)
    schema_: dict[str, Any] | bool = Field(True, alias="schema")
    description: str | None = None
    strict: bool | None = None  # the output always follows the schema here

    @field_validator("schema_")
    @classmethod
    def _bounded(cls, v: dict[str, Any] | bool) -> dict[str, Any] | bool:
        problem = schema_problem(v, "response_format.json_schema.schema")
        if problem:
            raise unsupported(problem)
        return v


class ResponseFormat(Strict):
    """OpenAI's ``response_format``: the output follows a JSON schema (``json_schema``),
    is some JSON object (``json_object``) or is free text (``text``)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> Any:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise unsupported("response_format: json_schema goes with type 'json_schema' (and "
                               "only with it)")
        return self

    def as_dict(self) -> dict[str, Any] | None:
        """The plain dict ``core.grammar.response_grammar`` reads (None for text)."""
        if self.type == "text":
            return None
        return self.model_dump(by_alias=True, exclude_none=True)


def template_message(m: ChatMessage) -> dict[str, Any]:
    """One message as the chat template reads it (tool fields only where given)."""
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                           "content": None if m.content is None else m.text()}
    if m.tool_calls:
        out["tool_calls"] = [c.model_dump() for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out
