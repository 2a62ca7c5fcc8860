"""OpenAI response bodies for one request: chat or text completion, whole or streamed.

Contract: a ``Responder`` renders exactly OpenAI's shapes, one id per request, ``usage``
extended with drafted/accepted counts and a ``specdec`` timings field; log-probabilities in
each endpoint's own format; a think block goes to ``reasoning_content``. (framed as Server-Sent
Events by ``wires.chat``).
Tests: tests/server/test_chunks.py.
Details: docs/batching-and-server.md#chunks."""

from __future__ import annotations

import time
import uuid
from typing import Any

from .events import DoneEvent, TokenEvent
from .reasoning import ReasoningSplitter

def _chat_item(text: str, lp: float) -> dict[str, Any]:
    return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}


def _scored(e: TokenEvent) -> tuple[str, float]:
    """A token's text and log-probability, which the worker sends when logprobs are asked."""
    if e.token_text is None or e.logprob is None:
        raise ValueError("a token event without its log-probability: logprobs were not asked")
    return e.token_text, e.logprob


class Responder:
    def __init__(self, chat: bool, model_id: str, logprobs: bool, top_logprobs: int,
                 reasoning: ReasoningSplitter | None = None):
        self.chat, self.model_id, self.reasoning = chat, model_id, reasoning
        self.logprobs, self.top_logprobs = logprobs, top_logprobs
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self._offset = 0  # completions' text_offset runs over the whole completion

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        obj = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id,
                "choices": choices}

    def _logprobs(self, events: list[TokenEvent]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        if self.chat:
            return {"content": [
                {**_chat_item(*_scored(e)),
                 "top_logprobs": [_chat_item(t, lp) for t, lp in (e.top or [])]}
                for e in events]}
        offsets = []
        for e in events:
            offsets.append(self._offset)
            self._offset += len(_scored(e)[0])
        return {"tokens": [e.token_text for e in events],
                "token_logprobs": [e.logprob for e in events],
                "top_logprobs": [dict(e.top or []) for e in events] if self.top_logprobs else None,
                "text_offset": offsets}

    def _choice(self, text: str, events: list[TokenEvent], finish: str | None,
                chunk: bool) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if not self.chat:
            choice["text"] = text
        elif chunk:
            choice["delta"] = self._text_parts(text, finish is not None, chunk)
        else:
            choice["message"] = {"role": "assistant", **self._text_parts(text, True, chunk)}
        choice["logprobs"] = self._logprobs(events) if events else None
        choice["finish_reason"] = finish
        return choice

    def _text_parts(self, text: str, final: bool, chunk: bool) -> dict[str, Any]:
        """A chat message's (or delta's) ``content``, and ``reasoning_content`` when the
        answer's think block is split off (a delta carries only the parts it has)."""
        if self.reasoning is None:
            return {"content": text} if text or not (chunk and final) else {}
        content, reasoning = self.reasoning.feed(text)
        if final:
            more = self.reasoning.flush()
            content, reasoning = content + more[0], reasoning + more[1]
        if not chunk:
            return {"content": content, "reasoning_content": reasoning or None}
        out = {"reasoning_content": reasoning} if reasoning else {}
        if content or not (final or reasoning):
            out["content"] = content
        return out

    # -- streaming -----------------------------------------------------------------------

    def first_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the assistant role, as OpenAI's do."""
        if not self.chat:
            return None
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._envelope([choice], chunk=True)

    def token_chunk(self, event: TokenEvent) -> dict[str, Any]:
        return self._envelope([self._choice(event.text, [event], None, chunk=True)], chunk=True)

    def token_chunks(self, event: TokenEvent) -> list[dict[str, Any]]:
        """The chunks one token adds to a stream (``tool_calls.ToolResponder`` may hold
        text back, or turn it into calls)."""
        return [self.token_chunk(event)]

    def final_chunks(self, done: DoneEvent) -> list[dict[str, Any]]:
        """The chunks that end a stream, the last one with the finish reason."""
        return [self.final_chunk(done)]

    def final_chunk(self, done: DoneEvent) -> dict[str, Any]:
        out = self._envelope([self._choice(done.text, [], done.finish_reason, chunk=True)],
                             chunk=True)
        out["specdec"] = done.timings
        return out

    def usage_chunk(self, done: DoneEvent) -> dict[str, Any]:
        """``stream_options.include_usage``: a last chunk with no choices and the usage."""
        out = self._envelope([], chunk=True)
        out["usage"] = done.usage
        return out

    # -- whole ---------------------------------------------------------------------------

    def whole(self, events: list[TokenEvent], done: DoneEvent) -> dict[str, Any]:
        text = "".join(e.text for e in events) + done.text
        out = self._envelope([self._choice(text, events, done.finish_reason, chunk=False)],
                             chunk=False)
        out["usage"] = done.usage
        out["specdec"] = done.timings
        return out
