"""Request bodies of the OpenAI-compatible API (the chat wire's own), validated at the boundary
(pydantic), and the ``ChatSpec`` each asks the engine for (``.spec``).

Contract: ``ChatCompletionRequest`` and ``CompletionRequest`` take OpenAI's parameters with its
names, types and ranges, plus ``speculative``, ``top_k``, ``min_p``, ``repetition_penalty``,
``tools``/``tool_choice``, ``chat_template_kwargs``. Strict: wrong types and unknown
parameters are errors; unimplemented ones only at their neutral value; parameters that
change nothing locally are ignored from one list (``IGNORED_PARAMS``). ``speculative`` is
``spec.options.SpeculativeOptions``. Tokenizer checks come later (``engine.admission``).
Tests: tests/server/test_app.py, tests/server/test_schemas.py. Details:
docs/batching-and-server.md#request-schemas."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..engine.spec import Asked, ChatSpec, stop_problem, template_problem
from ..engine.spec.messages import ChatMessage, ResponseFormat, TextPart, template_message
from ..engine.spec.options import SpeculativeOptions
from ..engine.spec.tool_schemas import MAX_TOOLS, Strict, ToolChoice, ToolDef, request_problem, unsupported


class StreamOptions(Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = Field(None, description="ignored: no obfuscation "
                                             "padding is added (nothing crosses a network here)")


# -- OpenAI parameters accepted and ignored: the one list ---------------------------------
# Every field below is OpenAI's, typed as OpenAI types it, and changes nothing in the
# answer here; its description says why ignoring it is honest (docs/server.md lists them).


class IgnoredParams(Strict):
    """Ignored on both endpoints."""

    user: str | None = Field(None, description="an end-user id for abuse monitoring; not used")
    store: bool | None = Field(None, description="false: this request's text stays out of the "
                               "shared drafting memory (suffix history, n-gram table, memory file)")


class Prediction(Strict):
    type: Literal["content"]
    content: str | list[TextPart]


class IgnoredChatParams(IgnoredParams):
    """Ignored on ``/v1/chat/completions``."""

    metadata: dict[str, str] | None = Field(None, description="tags of stored completions: none are")
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = Field(
        None, description="one tier here")
    safety_identifier: str | None = Field(None, description="an end-user id; not used")
    prompt_cache_key: str | None = Field(None, description="the prefix cache matches prompts "
                                         "by their tokens, without a key")
    prediction: Prediction | None = Field(None, description="a latency hint that by OpenAI's "
                                          "contract never changes the answer; not used")
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = Field(
        None, description="a model takes no effort setting; with a thinking chat template "
        "that reads enable_thinking, 'none' and 'minimal' turn thinking off")
    verbosity: Literal["low", "medium", "high"] | None = Field(
        None, description="a length hint this model has no control for")
    modalities: list[str] | None = Field(None, description="['text'] only: audio is refused")
    audio: None = Field(None, description="audio output parameters: refused (text only)")

    @field_validator("modalities")
    @classmethod
    def _text_only(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and set(v) - {"text"}:
            raise unsupported(f"this server answers in text only: send modalities ['text'] "
                               f"(or omit it), not {v}")
        return v

    @field_validator("audio", mode="before")
    @classmethod
    def _no_audio(cls, v: Any) -> None:
        if v is not None:
            raise unsupported("audio output is not supported: this server answers in text only")
        return v


IGNORED_PARAMS = tuple(IgnoredChatParams.model_fields) + ("stream_options.include_obfuscation",)

class ChatTemplateOptions(IgnoredChatParams):
    """``chat_template_kwargs`` (an extension, as vLLM's and SGLang's): variables the chat
    template reads, e.g. ``{"enable_thinking": false}``; and ``reasoning_effort``'s one
    effect (see its description)."""

    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="extension: keyword arguments for the model's chat template")

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_names(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = template_problem(v or {})
        if problem:
            raise unsupported(problem)
        return v

    def template_kwargs(self, thinking_switch: bool) -> dict[str, Any]:
        """The chat template's extra variables (``thinking_switch``: the template reads
        ``enable_thinking``, which ``reasoning_effort`` none/minimal then turn off unless
        ``chat_template_kwargs`` sets it)."""
        out = dict(self.chat_template_kwargs or {})
        if thinking_switch and self.reasoning_effort in ("none", "minimal"):
            out.setdefault("enable_thinking", False)
        return out


class _Sampling(IgnoredParams):
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
    speculative: SpeculativeOptions | None = None
    cache_salt: str | None = Field(None, min_length=1, max_length=256, description=(
        "as vLLM's: only requests with the same salt (and API key) share prefix-cache "
        "entries; a salted request also neither reads nor feeds the shared drafting memory"))

    @property
    def stops(self) -> list[str] | None:
        """``stop`` as ``_stops`` left it: a list (its type says what a client may send)."""
        return [self.stop] if isinstance(self.stop, str) else self.stop

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        stops = [v] if isinstance(v, str) else v
        if stops is None:
            return None
        problem = stop_problem(stops)
        if problem:
            raise unsupported(problem)
        return stops

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v: int) -> int:
        if v < 1:
            raise unsupported(f"n must be >= 1, got {v}")
        if v > 1:
            raise unsupported(f"n={v} is not implemented: this server generates one choice per "
                               "request; send n=1 (or omit it) and repeat the request for more")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict | None) -> dict | None:
        for key, bias in (v or {}).items():
            if not (key.isascii() and key.isdigit()):  # "²" is a digit, not an int() string
                raise unsupported(f"logit_bias keys are token ids (digits), got {key!r}")
            if len(key) > 9:  # int() of 4301 digits raises; no vocabulary has 10**9 tokens
                raise unsupported(f"logit_bias: token id {key[:12]}… is not in the vocabulary")
            if not -100 <= bias <= 100:
                raise unsupported(f"logit_bias values lie in [-100, 100], got {bias} for {key}")
        return v

    def token_bias(self) -> dict[int, float]:
        """``logit_bias`` with integer token ids (empty when unset)."""
        return {int(k): b for k, b in (self.logit_bias or {}).items()}

    def _spec_fields(self) -> dict[str, Any]:
        """What both endpoints hand the engine besides the prompt (``ChatSpec``'s fields)."""
        asked = Asked(self.temperature, self.top_p, self.top_k, self.min_p, self.seed,
                      self.repetition_penalty, self.presence_penalty, self.frequency_penalty,
                      self.token_bias())
        return dict(model=self.model, max_tokens=self.requested_max_tokens(), sampling=asked,
                    stop=tuple(self.stops or ()), cache_salt=self.cache_salt,
                    speculative=self.speculative.model_dump() if self.speculative else None,
                    store=self.store is not False)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> Any:
        if self.stream_options is not None and not self.stream:
            raise unsupported("stream_options is only allowed when stream is true")
        return self


class ChatCompletionRequest(_Sampling, ChatTemplateOptions):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    # tool calling (server.tool_schemas, server.tool_calls)
    tools: list[ToolDef] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _tool_checks(self) -> Any:
        problem = request_problem(self.messages, self.tools, self.tool_choice)
        if problem:
            raise unsupported(problem)
        return self

    @model_validator(mode="after")
    def _checks(self) -> Any:
        if self.top_logprobs and not self.logprobs:
            raise unsupported("top_logprobs needs logprobs: true")
        if (self.max_tokens is not None and self.max_completion_tokens is not None
                and self.max_tokens != self.max_completion_tokens):
            raise unsupported("max_tokens and max_completion_tokens differ; send one of them")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def spec(self, thinking_switch: bool) -> ChatSpec:
        """The engine's request value this body asks for (``thinking_switch``: the template
        reads ``enable_thinking``; see ``template_kwargs``)."""
        choice = self.tool_choice
        return ChatSpec(
            messages=tuple(template_message(m) for m in self.messages),
            tools=tuple(t.model_dump(exclude_none=True) for t in self.tools or ()),
            tool_choice=choice if choice is None or isinstance(choice, str) else choice.model_dump(),
            parallel_tool_calls=self.parallel_tool_calls,
            template_kwargs=self.template_kwargs(thinking_switch),
            response_format=self.response_format.as_dict() if self.response_format else None,
            logprobs=self.logprobs, top_logprobs=self.top_logprobs or 0, **self._spec_fields())


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
            raise unsupported("a list of prompts is a batch, which this server does not run; "
                               "send one prompt per request")
        if isinstance(self.prompt, list) and not self.prompt:
            raise unsupported("prompt is an empty list")
        return self

    @field_validator("echo", "best_of", "suffix")
    @classmethod
    def _neutral_only(cls, v: Any, info: Any) -> Any:
        if v is True or v not in (None, False, 1):
            raise unsupported(f"{info.field_name}={v!r} is not implemented here; omit it")
        return v

    def spec(self, thinking_switch: bool = False) -> ChatSpec:
        """The engine's request value this body asks for (a text completion)."""
        given = self.prompt
        prompt: str | tuple[int, ...] = (
            tuple(t for t in given if isinstance(t, int))
            if isinstance(given, list) and given and isinstance(given[0], int) else
            given if isinstance(given, str) else str(given[0]))  # one text in a list
        return ChatSpec(prompt=prompt, logprobs=self.logprobs is not None,
                        top_logprobs=self.logprobs or 0, **self._spec_fields())
