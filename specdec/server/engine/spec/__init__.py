"""The one value every wire hands the engine: a chat or text completion as asked (issue #45).

Contract: ``ChatSpec`` is frozen plain data (no pydantic): the messages or the prompt, the tools,
the sampling asked (``Asked``: None takes the server's default), the limits and outputs, and
whose it is. A wire maps its own body to it and nothing else; ``Api`` renders and tokenizes it
once, fits ``max_tokens`` to the room once and builds the row's ``Generation`` from it.
``check_spec`` is the engine's boundary check of what a wire cannot know to check (tool
history, schema bounds, the ``speculative`` options), raising the 400 a chat body would get.
Tests: tests/server/test_golden.py, tests/server/test_anthropic_wire.py, tests/server/test_spec.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from ...http.errors import validation_error
from .messages import ChatMessage, ResponseFormat
from .options import SpeculativeOptions
from .tool_schemas import MAX_TOOLS, ToolChoice, ToolDef, request_problem

MAX_STOPS = 4
MAX_STOP_CHARS = 256  # each stop string: the stop matcher holds back this much text


@dataclass(frozen=True)
class Asked:
    """The sampling a request asked for; None: the server's default (``--temp``...)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatSpec:
    """One chat (``messages``) or text (``prompt``) completion, as a wire asks it.

    Invariant: exactly one of ``messages`` and ``prompt`` is set. ``messages`` are OpenAI chat
    messages (role, content text or None, ``tool_calls`` with JSON-text arguments,
    ``tool_call_id``); ``tools`` OpenAI function tools; ``max_tokens`` None runs to EOS or the
    room, ``fit`` clamps it to the room instead of refusing it."""

    model: str
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | tuple[int, ...] | None = None
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    response_format: Mapping[str, Any] | None = None  # as ``core.grammar`` reads it
    max_tokens: int | None = None
    fit: bool = False
    sampling: Asked = field(default_factory=Asked)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    speculative: Mapping[str, Any] | None = None  # ``SpeculativeOptions``' fields
    cache_salt: str | None = None
    store: bool = True  # False: its text stays out of the shared drafting memory

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("a ChatSpec has messages (a chat) or a prompt (a text completion)")

    @property
    def chat(self) -> bool:
        return self.messages is not None


def stop_problem(stops: list[str] | tuple[str, ...], param: str = "stop") -> str | None:
    """What is wrong with a request's stop strings (None: nothing)."""
    if len(stops) > MAX_STOPS or any(s == "" for s in stops):
        return f"{param} takes 1 to {MAX_STOPS} non-empty strings"
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        return f"each stop string may have at most {MAX_STOP_CHARS} characters"
    return None


# apply_chat_template's own arguments: template_kwargs may not set them
TEMPLATE_RESERVED = frozenset((
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "sanitize_control_tokens", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
    "tokenizer_kwargs"))


def template_problem(kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with a request's chat template variables (None: nothing)."""
    for key in kwargs:
        if not key.isidentifier() or key in TEMPLATE_RESERVED:
            return (f"chat_template_kwargs: {key!r} is not a template variable this server "
                    "lets a request set")
    return None


class _Ranges(TypedDict):
    """The sampling ranges of a chat body, checked for every wire."""

    __pydantic_config__ = ConfigDict(strict=True)  # type: ignore[misc]

    temperature: Annotated[float | None, Field(ge=0, le=2, allow_inf_nan=False)]
    top_p: Annotated[float | None, Field(gt=0, le=1, allow_inf_nan=False)]
    top_k: Annotated[int | None, Field(ge=0)]
    min_p: Annotated[float | None, Field(ge=0, le=1, allow_inf_nan=False)]
    seed: Annotated[int | None, Field(ge=0, lt=2**63)]
    repetition_penalty: Annotated[float | None, Field(gt=0, le=10, allow_inf_nan=False)]
    presence_penalty: Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
    frequency_penalty: Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]


_RANGES = TypeAdapter(_Ranges)
_TOP: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=0, le=20)])
_MESSAGES = TypeAdapter(list[ChatMessage])
_TOOLS: TypeAdapter[list[ToolDef]] = TypeAdapter(Annotated[list[ToolDef], Field(max_length=MAX_TOOLS)])
_CHOICE: TypeAdapter[Any] = TypeAdapter(ToolChoice | None)
_SALT: TypeAdapter[str | None] = TypeAdapter(Annotated[str, Field(min_length=1, max_length=256)] | None)


def _valid(adapter: TypeAdapter, value: Any, name: str | None) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as e:  # named as a chat body's field would be
        where = ("body",) if name is None else ("body", name)
        raise validation_error([{**x, "loc": (*where, *x["loc"])} for x in e.errors()]) from None


def _refuse(problem: str | None) -> None:
    if problem:
        raise validation_error([{"type": "unsupported_value", "loc": (), "msg": problem}])


def check_spec(spec: ChatSpec) -> None:
    """400s for what the engine refuses whichever wire sent it: the tool history (a tool
    result answers a call), tools and ``tool_choice``, the sampling ranges, template
    variables, ``response_format``'s schema bounds, the ``speculative`` options, the stop
    strings and the cache salt (each named as the chat body's field)."""
    if spec.messages is not None:
        messages = _valid(_MESSAGES, [dict(m) for m in spec.messages], "messages")
        tools = _valid(_TOOLS, [dict(t) for t in spec.tools], "tools")
        _refuse(request_problem(messages, tools, _valid(_CHOICE, spec.tool_choice, "tool_choice")))
    ranges = {k: v for k, v in vars(spec.sampling).items() if k != "logit_bias"}
    _valid(_RANGES, ranges, None)
    _valid(_TOP, spec.top_logprobs, "top_logprobs")
    _refuse(template_problem(spec.template_kwargs))
    if spec.response_format is not None:
        _valid(TypeAdapter(ResponseFormat), dict(spec.response_format), "response_format")
    speculative_options(spec)
    _refuse(stop_problem(spec.stop))
    _valid(_SALT, spec.cache_salt, "cache_salt")


def speculative_options(spec: ChatSpec) -> SpeculativeOptions | None:
    """The request's ``speculative`` options, checked (a 400 naming the field)."""
    if spec.speculative is None:
        return None
    return _valid(TypeAdapter(SpeculativeOptions), dict(spec.speculative), "speculative")
