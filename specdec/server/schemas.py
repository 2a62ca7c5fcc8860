"""Request bodies of the OpenAI-compatible API, validated at the boundary (pydantic).

Contract: ``ChatCompletionRequest`` and ``CompletionRequest`` accept the OpenAI
parameters this server implements, with OpenAI's names, types and ranges, plus the
extensions ``speculative`` (``SpeculativeOptions``), ``top_k``, ``min_p`` and
``repetition_penalty``. Validation is strict: wrong JSON types are errors (no "5" for 5),
unknown parameters are errors (as OpenAI's own API does), and parameters whose other
values this server does not implement (``n``, ``best_of``, ``echo``, ``suffix``) are
accepted only at their neutral value, with a message saying so. ``presence_penalty``,
``frequency_penalty`` and ``logit_bias`` are mlx-lm's, exact under speculation.
``response_format`` (``ResponseFormat``: text, ``json_object``, ``json_schema``) is checked
here for shape and compiled by ``app``.
``merge_speculative`` applies a request's ``speculative`` to the server's default
``DraftSpec`` (the one typed spec the CLI and the bench use too). Tool calling's
fields (``tools``, ``tool_choice``, ``parallel_tool_calls``, ``role: "tool"`` messages,
an assistant's ``tool_calls`` with ``content`` null) are ``tool_schemas``' models and
checks. Everything that needs the tokenizer (context length, token ids) is checked by
``app`` after this.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..drafters.spec import DRAFT_TYPES, DraftSpec, parse_draft_types
from ..toolcall.prompt import template_messages
from .tool_schemas import (ToolCallIn, ToolChoice, ToolDef, message_problem, part_problem,
                           request_problem)

MAX_DRAFT_TOKENS = 32
MAX_TREE_NODES = 64
MAX_STOPS = 4


def _unsupported(message: str) -> PydanticCustomError:
    return PydanticCustomError("unsupported_value", message)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SpeculativeOptions(_Strict):
    """Per-request speculation; unset fields take the server's ``--...`` defaults."""

    draft_type: str | None = Field(None, description=f"one of {', '.join(DRAFT_TYPES)} or a comma chain")
    num_draft_tokens: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS)
    ngram_min: int | None = Field(None, ge=1, le=64)
    ngram_max: int | None = Field(None, ge=1, le=64)
    gate: bool | None = None
    gate_threshold: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    adaptive_k: bool | None = None
    draft_tree_budget: int | Literal["auto"] | None = Field(
        None, description="max token-tree nodes per step (0 = linear), or 'auto'")

    @field_validator("draft_tree_budget")
    @classmethod
    def _tree_budget(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, int) and not 0 <= v <= MAX_TREE_NODES:
            raise _unsupported(f"draft_tree_budget must be in [0, {MAX_TREE_NODES}] or 'auto'")
        return v

    @field_validator("draft_type")
    @classmethod
    def _known_types(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return ",".join(parse_draft_types(v))
        except ValueError as e:
            raise _unsupported(str(e).replace("draft type", "draft_type")) from None


def merge_speculative(default: DraftSpec, opts: SpeculativeOptions | None) -> DraftSpec:
    """The spec one request runs with: the server's default + the request's overrides
    (``ValueError`` naming the ``speculative`` field when the combination is invalid)."""
    if opts is None:
        return default
    try:
        return default.with_options(**opts.model_dump())
    except ValueError as e:
        msg = re.sub(r"--([a-z-]+)", lambda m: "speculative." + m.group(1).replace("-", "_"), str(e))
        raise ValueError(msg) from None


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampling(_Strict):
    model: str = Field(description="the served model id (GET /v1/models)")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, description="extension: 0 = off")
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="extension")
    repetition_penalty: float | None = Field(None, gt=0, le=10, allow_inf_nan=False,
                                             description="extension: 1.0 = off")
    seed: int | None = Field(None, ge=0, lt=2**63)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    presence_penalty: float = Field(0.0, ge=-2, le=2, allow_inf_nan=False)
    frequency_penalty: float = Field(0.0, ge=-2, le=2, allow_inf_nan=False)
    logit_bias: dict[str, float] | None = Field(None, description="token id -> bias in [-100, 100]")
    user: str | None = Field(None, description="accepted for compatibility; not used")
    speculative: SpeculativeOptions | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        stops = [v] if isinstance(v, str) else v
        if stops is None:
            return None
        if len(stops) > MAX_STOPS or any(s == "" for s in stops):
            raise _unsupported(f"stop takes 1 to {MAX_STOPS} non-empty strings")
        return stops

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v: int) -> int:
        if v != 1:
            raise _unsupported(f"n={v} is not supported: this server generates one choice per "
                               "request; send n=1 (or omit it) and repeat the request for more")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict | None) -> dict | None:
        for key, bias in (v or {}).items():
            if not key.isdigit():
                raise _unsupported(f"logit_bias keys are token ids (digits), got {key!r}")
            if not -100 <= bias <= 100:
                raise _unsupported(f"logit_bias values lie in [-100, 100], got {bias} for {key}")
        return v

    def token_bias(self) -> dict[int, float]:
        """``logit_bias`` with integer token ids (empty when unset)."""
        return {int(k): b for k, b in (self.logit_bias or {}).items()}

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> Any:
        if self.stream_options is not None and not self.stream:
            raise _unsupported("stream_options is only allowed when stream is true")
        return self


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
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
            raise _unsupported(problem)
        return v

    @model_validator(mode="after")
    def _role_fields(self) -> Any:
        problem = message_problem(self.role, self.content is not None, self.tool_calls,
                                  self.tool_call_id)
        if problem:
            raise _unsupported(problem)
        return self

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content or [])


class JsonSchemaFormat(_Strict):
    name: str = Field(max_length=64)
    schema_: dict[str, Any] | bool = Field(True, alias="schema")
    description: str | None = None
    strict: bool | None = None  # the output always follows the schema here


class ResponseFormat(_Strict):
    """OpenAI's ``response_format``: the output follows a JSON schema (``json_schema``),
    is some JSON object (``json_object``) or is free text (``text``)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> Any:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise _unsupported("response_format: json_schema goes with type 'json_schema' (and "
                               "only with it)")
        return self

    def as_dict(self) -> dict[str, Any] | None:
        """The plain dict ``core.grammar.response_grammar`` reads (None for text)."""
        if self.type == "text":
            return None
        return self.model_dump(by_alias=True, exclude_none=True)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    # tool calling (server.tool_schemas, server.tool_calls)
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _tool_checks(self) -> Any:
        problem = request_problem(self.messages, self.tools, self.tool_choice)
        if problem:
            raise _unsupported(problem)
        return self

    @model_validator(mode="after")
    def _checks(self) -> Any:
        if self.top_logprobs and not self.logprobs:
            raise _unsupported("top_logprobs needs logprobs: true")
        if (self.max_tokens is not None and self.max_completion_tokens is not None
                and self.max_tokens != self.max_completion_tokens):
            raise _unsupported("max_tokens and max_completion_tokens differ; send one of them")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def chat_messages(self) -> list[dict[str, Any]]:
        # "developer" is OpenAI's newer name for the system role
        return template_messages([_template_message(m) for m in self.messages])


def _template_message(m: ChatMessage) -> dict[str, Any]:
    """One message as the chat template reads it (tool fields only where given)."""
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                           "content": None if m.content is None else m.text()}
    if m.tool_calls:
        out["tool_calls"] = [c.model_dump() for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] = Field(description="text, token ids, or one text in a list")
    logprobs: int | None = Field(None, ge=0, le=5, description="top alternatives per token")
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    @model_validator(mode="after")
    def _checks(self) -> Any:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) \
                and len(self.prompt) != 1:
            raise _unsupported("a list of prompts is a batch, which this server does not run; "
                               "send one prompt per request")
        if isinstance(self.prompt, list) and not self.prompt:
            raise _unsupported("prompt is an empty list")
        if self.echo or self.best_of not in (None, 1) or self.suffix is not None:
            raise _unsupported("echo, best_of > 1 and suffix are not supported; omit them")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens
