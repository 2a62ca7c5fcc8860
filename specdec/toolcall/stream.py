"""Reading tool calls out of a reply, whole or as it streams in.

Contract: ``ToolCallStream(fmt, names).feed(text)`` takes increments of any size and returns
``ContentDelta``s and ``CallDelta``s (one complete call each); ``finish()`` decides what was
held back. Invariant: every cut of a reply yields the same deltas once joined; tag text and
separators never reach content; a reply without calls is unchanged; ``max_calls`` keeps the
first. ``parse_tool_calls`` is the whole-reply reading.
Tests: tests/toolcall/test_stream.py. Details: docs/agents-and-structured-output.md#streaming-tool-calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Union

from .calls import SEPARATORS, ToolCall, skip
from .formats import FORMATS, WS, CallFormat, new_call_id


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class CallDelta:
    index: int
    id: str
    call: ToolCall


Delta = Union[ContentDelta, CallDelta]


@dataclass(frozen=True)
class Parsed:
    """A whole reply: ``content`` (None when the reply is only calls) and its calls."""

    content: str | None
    calls: list[CallDelta]


def _held(text: str, openers: Iterable[str]) -> int:
    """How many trailing characters of ``text`` could begin one of ``openers``."""
    hold = 0
    for o in openers:
        for n in range(min(len(o) - 1, len(text)), hold, -1):
            if text.endswith(o[:n]):
                hold = n
                break
    return hold


class ToolCallStream:
    """One reply's reader: ``feed(text)`` -> content and complete-call deltas, ``finish()``
    decides what was held back."""

    def __init__(self, fmt: CallFormat | str, names: Iterable[str] | None = None, *,
                 max_calls: int | None = None, make_id: Callable[[], str] | None = None):
        self.fmt = FORMATS[fmt] if isinstance(fmt, str) else fmt
        self.names = frozenset(names) if names is not None else None
        self.max_calls = max_calls
        self._make_id = make_id or (lambda: new_call_id(self.fmt))
        self._text, self._pos = "", 0
        self._lead = True  # calls may start at _pos (the reply's start, or after a call)
        self._ws = ""  # trailing content whitespace, held until non-space text follows
        self.seen = self.emitted = 0  # calls read, calls reported

    def feed(self, text: str) -> list[Delta]:
        self._text += text
        return self._run(final=False)

    def finish(self) -> list[Delta]:
        out = self._run(final=True)
        if self._ws and not self.seen:
            out.append(ContentDelta(self._ws))
        self._ws = ""
        return out

    def _run(self, final: bool) -> list[Delta]:
        out: list[Delta] = []
        while self._pos < len(self._text):
            step = self._lead_step(final) if self._lead else self._content_step(final)
            if step is None:
                break
            out += step
        return out

    def _lead_step(self, final: bool) -> list[Delta] | None:
        """Where calls may start: a marked or unmarked call, or the start of content."""
        text = self._text
        j = skip(text, self._pos, SEPARATORS if self.seen else WS)
        if j == len(text):
            if not final:
                return None
            return self._drop(j) if self.seen else self._to_content()
        for opener, matcher in self.fmt.tags:
            if text.startswith(opener, j):
                found = matcher(text, j, final, self.names)
            else:
                partial = len(text) - j < len(opener) and opener.startswith(text[j:])
                found = None if partial and not final else False
            if found is None:
                return None
            if found:
                return self._take(found.end, found.calls)
        for matcher in self.fmt.leads:
            found = matcher(text, j, final, self.names)
            if found is None:
                return None
            if found:
                return self._take(found.end, found.calls)
        if self.seen:
            self._pos = skip(text, self._pos, WS)
        return self._to_content()

    def _content_step(self, final: bool) -> list[Delta] | None:
        """Inside content: pass text through up to the next marked call."""
        text, pos = self._text, self._pos
        hits = [(k, opener, matcher) for opener, matcher in self.fmt.tags
                if (k := text.find(opener, pos)) >= 0]
        if not hits:
            end = len(text) - (0 if final else _held(text[pos:], (o for o, _ in self.fmt.tags)))
            out = self._content(text[pos:end])
            self._pos = end
            return out if end > pos else None
        k, opener, matcher = min(hits, key=lambda h: h[0])
        out = self._content(text[pos:k])
        self._pos = k
        found = matcher(text, k, final, self.names)
        if found is None:
            return out if k > pos else None
        if found:
            return out + self._take(found.end, found.calls)
        self._pos = k + len(opener)  # a malformed call: its text is the model's content
        return out + self._content(opener)

    def _content(self, s: str) -> list[Delta]:
        full = self._ws + s
        body = full.rstrip()
        self._ws = full[len(body):]
        return [ContentDelta(body)] if body else []

    def _to_content(self) -> list[Delta]:
        self._lead = False
        return []

    def _drop(self, end: int) -> list[Delta]:
        self._pos = end
        return []

    def _take(self, end: int, calls: list[ToolCall]) -> list[Delta]:
        # space before a call is kept back: it separates the content around the call
        # when more follows, and is dropped when the reply ends with calls
        self._pos, self._lead = end, True
        out: list[Delta] = []
        for call in calls:
            if self.max_calls is None or self.emitted < self.max_calls:
                out.append(CallDelta(self.emitted, self._make_id(), call))
                self.emitted += 1
            self.seen += 1
        return out


def assemble(deltas: Iterable[Delta]) -> Parsed:
    deltas = list(deltas)
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    calls = [d for d in deltas if isinstance(d, CallDelta)]
    return Parsed(content if content or not calls else None, calls)


def parse_tool_calls(text: str, fmt: CallFormat | str, names: Iterable[str] | None = None, *,
                     max_calls: int | None = None,
                     make_id: Callable[[], str] | None = None) -> Parsed:
    """A whole reply's content and calls.

    >>> ids = iter(["call_1", "call_2"]).__next__
    >>> p = parse_tool_calls('Checking.\\n<tool_call>\\n{"name": "get_weather", "arguments": '
    ...                      '{"city": "Paris"}}\\n</tool_call>', "hermes", make_id=ids)
    >>> p.content, [(c.id, c.call.name, c.call.arguments) for c in p.calls]
    ('Checking.', [('call_1', 'get_weather', '{"city": "Paris"}')])
    >>> p = parse_tool_calls('{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ...                      "hermes", ["get_weather"], make_id=ids)
    >>> p.content, p.calls[0].call.name
    (None, 'get_weather')
    >>> parse_tool_calls('{"name": "Ada"}', "hermes", ["get_weather"]).content
    '{"name": "Ada"}'
    """
    stream = ToolCallStream(fmt, names, max_calls=max_calls, make_id=make_id)
    return assemble(stream.feed(text) + stream.finish())
