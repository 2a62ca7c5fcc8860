"""Tool calls as data, and the JSON pieces every call format shares.

Contract: ``ToolCall(name, arguments)`` with normalised JSON arguments; ``json_end(text, i)``
finds where a bracketed value closes (``None`` while undecided, ``-1`` on mismatch);
``call_from_obj``/``calls_from_json`` read call objects; a matcher returns ``Match``,
``None`` (undecided) or ``False`` (not a call). Tests: tests/toolcall/test_calls.py.
Details: docs/agents-and-structured-output.md#tool-call-values."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

_CLOSE = {"{": "}", "[": "]", "(": ")"}
SEPARATORS = " \t\r\n;,"


@dataclass(frozen=True)
class ToolCall:
    """One function call the model wrote (``arguments``: JSON text of an object)."""

    name: str
    arguments: str = "{}"

    def args(self) -> Any:
        return json.loads(self.arguments)


class Match(NamedTuple):
    end: int
    calls: list[ToolCall]


def dump_args(obj: Any) -> str:
    """The normalised JSON text of an arguments object.

    >>> dump_args({"city": "Paris", "days": 2})
    '{"city": "Paris", "days": 2}'
    """
    return json.dumps(obj, ensure_ascii=False)


def json_end(text: str, i: int, quotes: str = '"') -> int | None:
    """Index just after the bracketed value opening at ``text[i]``.

    >>> json_end('{"a": "}", "b": [1]} tail', 0)
    20
    >>> json_end('{"a": [1, 2', 0) is None
    True
    >>> json_end('{"a": ]', 0)
    -1
    """
    outside = _pattern("[" + re.escape(quotes) + r"{}\[\]()]")
    stack: list[str] = []
    j = i
    while (m := outside.search(text, j)) is not None:  # jumps in C, not per character
        c, j = m.group(), m.end()
        if c in quotes:
            inside = _pattern(r"[\\" + re.escape(c) + "]")
            while (m := inside.search(text, j)) is not None and m.group() == "\\":
                j = m.end() + 1  # an escaped character
            if m is None:
                return None
            j = m.end()
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif not stack or stack.pop() != c:
            return -1
        elif not stack:
            return j
    return None


@functools.lru_cache(maxsize=None)
def _pattern(source: str) -> re.Pattern:
    return re.compile(source)


def skip(text: str, i: int, chars: str = SEPARATORS) -> int:
    """The first index at or after ``i`` whose character is not in ``chars``."""
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def call_from_obj(obj: Any) -> ToolCall | None:
    """A call from a decoded call object, or None.

    >>> call_from_obj({"name": "get_weather", "arguments": {"city": "Paris"}})
    ToolCall(name='get_weather', arguments='{"city": "Paris"}')
    >>> call_from_obj({"name": "f", "parameters": "{\\"x\\": 1}"})
    ToolCall(name='f', arguments='{"x": 1}')
    >>> call_from_obj({"city": "Paris"}) is None
    True
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    keys = set(obj) - {"name", "id", "type"}
    if len(keys) > 1 or not keys <= {"arguments", "parameters"}:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], dump_args(args))


def calls_from_json(text: str) -> list[ToolCall] | None:
    """All the calls in ``text`` if it holds nothing but call objects (or arrays of them).

    >>> calls_from_json('{"name": "a", "arguments": {}}; {"name": "b", "parameters": {"x": 1}}')
    [ToolCall(name='a', arguments='{}'), ToolCall(name='b', arguments='{"x": 1}')]
    >>> calls_from_json('{"name": "a", "arguments": {}} and some prose') is None
    True
    """
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    i = skip(text, 0)
    while i < len(text):
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        items = value if isinstance(value, list) else [value]
        found = [c for c in map(call_from_obj, items) if c is not None]
        if not items or len(found) != len(items):
            return None
        calls.extend(found)
        i = skip(text, i)
    return calls or None


def known(calls: Iterable[ToolCall], names: frozenset[str] | None) -> bool:
    """Whether every call names a declared tool (always, when ``names`` is None)."""
    return names is None or all(c.name in names for c in calls)
