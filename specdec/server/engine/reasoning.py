"""A reasoning model's ``<think>…</think>`` block, told apart from its answer.

Contract: ``TemplateTraits.of(tokenizer)`` (does the template know a think block, does it read
``enable_thinking``); ``opens_thinking(prompt_tail)``; ``ReasoningSplitter`` turns text deltas
into ``(content, reasoning)`` deltas: tags never reach either part, however they are split,
and any cut of a text yields the same two strings as ``split_reasoning`` on the whole.
Tests: tests/server/test_reasoning.py. Details:
docs/batching-and-server.md#reasoning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class TemplateTraits:
    think: bool = False
    thinking_switch: bool = False

    @classmethod
    def of(cls, tokenizer: Any) -> TemplateTraits:
        source = getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):  # named templates (transformers)
            source = "\n".join(str(v) for v in source.values())
        if not isinstance(source, str):
            return cls()
        return cls(think=OPEN in source, thinking_switch="enable_thinking" in source)


def opens_thinking(prompt_tail: str) -> bool:
    """Whether ``prompt_tail`` (the rendered prompt's end) leaves a think block open."""
    at = prompt_tail.rfind(OPEN)
    return at >= 0 and prompt_tail[at + len(OPEN):].strip() == ""


def _held(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could begin ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ReasoningSplitter:
    """Text deltas in, ``(content, reasoning)`` deltas out, in order; ``flush()`` ends the
    text. Tags never reach either part, however the deltas cut them."""

    def __init__(self, thinking: bool = False):
        self._state = "reasoning" if thinking else "start"
        self._buf = ""
        self._lead = True  # trim the whitespace that opens the current part

    def _trim(self, piece: str) -> str:
        if self._lead:
            piece = piece.lstrip()
            self._lead = not piece
        return piece

    def feed(self, text: str) -> tuple[str, str]:
        """(content, reasoning) released by one more delta of the output."""
        self._buf += text
        content = reasoning = ""
        while True:
            if self._state == "start":
                head = self._buf.lstrip()
                if head.startswith(OPEN):
                    self._buf, self._state, self._lead = head[len(OPEN):], "reasoning", True
                    continue
                if OPEN.startswith(head):  # empty, or a prefix of the tag: undecided
                    return content, reasoning
                self._state, self._lead = "content", False  # no think block: text as it is
            if self._state == "reasoning":
                at = self._buf.find(CLOSE)
                if at >= 0:
                    reasoning += self._trim(self._buf[:at].rstrip())
                    self._buf, self._state, self._lead = self._buf[at + len(CLOSE):], "content", True
                    continue
                body = self._buf[: len(self._buf) - _held(self._buf, CLOSE)]
                keep = len(body.rstrip())  # trailing whitespace may precede the tag
                reasoning += self._trim(body[:keep])
                self._buf = self._buf[keep:]
                return content, reasoning
            content += self._trim(self._buf)
            self._buf = ""
            return content, reasoning

    def flush(self) -> tuple[str, str]:
        """What was held back, at the end of the output."""
        rest, self._buf = self._buf, ""
        if self._state == "reasoning":
            return "", self._trim(rest.rstrip())
        return (rest if self._state == "start" else self._trim(rest)), ""


def split_reasoning(text: str, thinking: bool = False) -> tuple[str, str]:
    """``(content, reasoning)`` of a whole output."""
    s = ReasoningSplitter(thinking)
    content, reasoning = s.feed(text)
    tail_c, tail_r = s.flush()
    return content + tail_c, reasoning + tail_r
