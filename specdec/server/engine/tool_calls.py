"""Tool calling on ``/v1/chat/completions``: what a request's tools change in the prompt, and how
the reply's calls are answered, whole or streamed. Only prompts and outputs change: the
model's tokens never do (lossless).

Contract: ``ToolSupport.of`` (does the template render tools; which call format);
``plan_tools(spec, support)`` -> ``ToolPlan`` or None (``auto``, ``none``, ``required`` and a
named function, forced through a JSON-schema grammar); ``ToolResponder`` renders
``message.tool_calls`` and streams each call once complete, tag text never in ``content``.
Tests: tests/server/test_tool_calls.py. Details: docs/agents-and-structured-output.md#tool-calls-in-replies."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...toolcall import FORMATS, CallDelta, CallFormat, ContentDelta, ToolCallStream, parse_tool_calls
from ...toolcall.formats import detect_format
from ...toolcall.prompt import forced_call_schema, renders_tools
from ..http.errors import APIError
from .events import DoneEvent, TokenEvent
from .reasoning import ReasoningSplitter
from .chunks import Responder

if TYPE_CHECKING:  # the request value is the layer above tool parsing: annotations only
    from .spec import ChatSpec

log = logging.getLogger("specdec.server")


@dataclass(frozen=True)
class ToolSupport:
    renders_tools: bool
    format: str  # a key of FORMATS, or "none"

    @classmethod
    def of(cls, tokenizer: Any, parser: str = "auto") -> ToolSupport:
        template = getattr(tokenizer, "chat_template", None)
        support = cls(renders_tools(tokenizer),
                      detect_format(template if isinstance(template, str) else None)
                      if parser == "auto" else parser)
        if support.renders_tools:
            log.info("tool calls: read in the %s format (%s)", support.format,
                     "from the chat template" if parser == "auto" else "--tool-call-parser")
        else:
            log.info("tool calls: off (the chat template does not render tools)")
        return support


@dataclass(frozen=True)
class ToolPlan:
    template_tools: list[dict] | None  # what the template renders (None: no tools)
    format: CallFormat | None  # None: the reply is content, never read for calls
    names: frozenset[str]
    max_calls: int | None
    forced_schema: dict | None  # required / named function: what a grammar would force


def _refuse_template(model_id: str, needs: str) -> APIError:
    return APIError(
        400, f"the chat template of {model_id!r} does not support tools (rendering it with "
        f"tools changes nothing, so the model would never see them), and this request "
        f"{needs}. Use a model whose template handles tools (e.g. qwen2.5-coder-0.5b), send "
        "tool_choice 'none' without tool messages, or describe the tools in a system "
        "message yourself.", param="tools", code="tools_not_supported")


def plan_tools(spec: ChatSpec, support: ToolSupport, model_id: str) -> ToolPlan | None:
    """What a chat ``spec``'s tools change (None: nothing); ``APIError`` 400 when the template
    cannot do what the request needs."""
    tools = [dict(t) for t in spec.tools]
    history = any(m.get("role") == "tool" or m.get("tool_calls") for m in spec.messages or ())
    asked = spec.tool_choice or ("auto" if tools else "none")
    choice = asked if isinstance(asked, str) else dict(asked)
    if not tools and not history:
        return None
    use = bool(tools) and choice != "none"
    if not support.renders_tools and (use or history):
        raise _refuse_template(model_id, "gives tools to call" if use else
                               "has tool calls and results in its messages")
    if not use:
        return ToolPlan(None, None, frozenset(), None, None)
    fmt = FORMATS.get(support.format)
    parallel = spec.parallel_tool_calls is not False
    return ToolPlan(tools, fmt, frozenset(t["function"]["name"] for t in tools),
                    None if parallel else 1, forced_call_schema(tools, choice, parallel))


def _call_json(d: CallDelta) -> dict[str, Any]:
    return {"id": d.id, "type": "function",
            "function": {"name": d.call.name, "arguments": d.call.arguments}}


class ToolResponder(Responder):
    """A chat ``Responder`` that reads the reply's tool calls (docs/agents-and-structured-output.md#tool-calls-in-replies)."""

    def __init__(self, model_id: str, logprobs: bool, top_logprobs: int, plan: ToolPlan,
                 reasoning: ReasoningSplitter | None = None):
        super().__init__(True, model_id, logprobs, top_logprobs, reasoning=reasoning)
        if plan.format is None:
            raise ValueError("a ToolResponder reads calls: its plan needs a call format")
        self.plan, self.format = plan, plan.format
        self.stream = ToolCallStream(plan.format, plan.names, max_calls=plan.max_calls)
        self._unsent: list[TokenEvent] = []  # tokens whose log-probabilities are not out yet

    def _finish(self, reason: str, calls: int) -> str:
        return "tool_calls" if calls and reason == "stop" else reason

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        events, self._unsent = self._unsent, []
        choice = {"index": 0, "delta": delta,
                  "logprobs": self._logprobs(events) if events else None, "finish_reason": finish}
        return self._envelope([choice], chunk=True)

    def _chunks(self, deltas: list[ContentDelta | CallDelta]) -> list[dict[str, Any]]:
        out = []
        for d in deltas:
            if isinstance(d, ContentDelta):
                out.append(self._chunk({"content": d.text}))
                continue
            head = {"index": d.index, "id": d.id, "type": "function",
                    "function": {"name": d.call.name, "arguments": ""}}
            out.append(self._chunk({"tool_calls": [head]}))
            out.append(self._chunk({"tool_calls": [
                {"index": d.index, "function": {"arguments": d.call.arguments}}]}))
        return out

    def _answer(self, text: str, final: bool) -> tuple[list[dict[str, Any]], str]:
        """A think block's reasoning as chunks, and the answer text calls are read from."""
        if self.reasoning is None:
            return [], text
        content, thought = self.reasoning.feed(text)
        if final:
            more = self.reasoning.flush()
            content, thought = content + more[0], thought + more[1]
        return ([self._chunk({"reasoning_content": thought})] if thought else []), content

    def token_chunks(self, event: TokenEvent) -> list[dict[str, Any]]:
        self._unsent.append(event)
        out, text = self._answer(event.text, final=False)
        return out + self._chunks(self.stream.feed(text))

    def final_chunks(self, done: DoneEvent) -> list[dict[str, Any]]:
        out, text = self._answer(done.text, final=True)
        out += self._chunks(self.stream.feed(text) + self.stream.finish())
        final = self._chunk({}, self._finish(done.finish_reason, self.stream.emitted))
        final["specdec"] = done.timings
        return out + [final]

    def whole(self, events: list[TokenEvent], done: DoneEvent) -> dict[str, Any]:
        out = super().whole(events, done)
        choice = out["choices"][0]
        parsed = parse_tool_calls(choice["message"]["content"], self.format, self.plan.names,
                                  max_calls=self.plan.max_calls)
        choice["message"]["content"] = parsed.content
        if parsed.calls:
            choice["message"]["tool_calls"] = [_call_json(d) for d in parsed.calls]
        choice["finish_reason"] = self._finish(done.finish_reason, len(parsed.calls))
        return out
