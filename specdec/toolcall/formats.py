"""The tool-call formats of the big model families: where a call starts, how it is read,
how it is written, and which one a chat template uses.

Contract: ``FORMATS`` holds ``hermes``, ``llama3_json``, ``mistral`` and ``gemma``; each reads
marked calls anywhere (``tags``) and unmarked ones where calls may start (``leads``), also
bare JSON calls at a reply's start. Matchers depend only on the text, so every cut of a reply
decides the same. ``render`` writes a family's calls; ``detect_format(template)`` picks one.
Tests: tests/toolcall/test_formats.py. Each format's syntax: docs/agents-and-structured-output.md#tool-call-formats."""

from __future__ import annotations

import json
import re
import secrets
import string
import uuid
from dataclasses import dataclass
from typing import Callable, Literal, Union

from .calls import Match, ToolCall, calls_from_json, dump_args, json_end, known, skip
from .pycalls import function_gemma_call, python_calls, render_function_gemma

Result = Union[Match, Literal[False], None]  # None: undecided yet (needs more text)
Matcher = Callable[[str, int, bool, "frozenset[str] | None"], Result]
WS = " \t\r\n"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
TOOL_CALLS = "[TOOL_CALLS]"
FG_START, FG_END = "<start_function_call>", "<end_function_call>"
TOOL_CODE = "```tool_code"
_NAME_ARGS = re.compile(r"([\w.-]+)\[ARGS\]")
_NAME_ARGS_PREFIX = re.compile(r"[\w.-]*(\[(A(R(G(S)?)?)?)?)?")
_IDENT_PAREN = re.compile(r"[A-Za-z_][\w.-]*\s*\(")


def _wait(final: bool) -> Result:
    return False if final else None


def json_lead(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
    """Unmarked JSON calls at ``text[i]``: one call object or an array of them.

    >>> json_lead('{"name": "f", "arguments": {"x": 1}} done', 0, False, frozenset({"f"}))
    Match(end=36, calls=[ToolCall(name='f', arguments='{"x": 1}')])
    >>> json_lead('{"name": "f", "argu', 0, False, None) is None
    True
    """
    if text[i] not in "{[":
        return False
    j = skip(text, i + 1, WS)
    if j == len(text):
        return _wait(final)
    if text[j] not in ('"}' if text[i] == "{" else "{]"):
        return False
    end = json_end(text, i)
    if end is None:
        return _wait(final)
    calls = calls_from_json(text[i:end]) if end > 0 else None
    return Match(end, calls) if calls and known(calls, names) else False


def fence(infos: tuple[str, ...], starts: Callable[[str], bool],
          inner: Callable[[str], list[ToolCall] | None], marked: bool) -> Matcher:
    """A matcher for calls inside a ```` ```INFO ```` fence (INFO one of ``infos``) whose
    body starts with a character ``starts`` accepts and reads with ``inner``."""

    def match(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
        if not text.startswith("```", i):
            return None if not final and "```".startswith(text[i:]) else False
        nl = text.find("\n", i + 3)
        info = text[i + 3:len(text) if nl < 0 else nl].strip()
        if nl < 0:
            return None if not final and any(x.startswith(info) for x in infos) else False
        body = skip(text, nl + 1, WS)
        if info not in infos or (body < len(text) and not starts(text[body])):
            return False
        close = text.find("```", body)
        if close < 0 and not final:
            return None
        calls = inner(text[body:len(text) if close < 0 else close])
        if not calls or not (marked or known(calls, names)):
            return False
        return Match(len(text) if close < 0 else close + 3, calls)

    return match


def closed(opener: str, closer: str, inner: Callable[[str], list[ToolCall] | None]) -> Matcher:
    """A matcher for ``opener BODY closer`` (the closer may be missing at the reply's end)."""

    def match(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
        start = i + len(opener)
        close = text.find(closer, start)
        if close < 0 and not final:
            return None
        calls = inner(text[start:len(text) if close < 0 else close])
        return Match(len(text) if close < 0 else close + len(closer), calls) if calls else False

    return match


def python_tag_block(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
    """Llama's ``<|python_tag|>`` followed by JSON calls."""
    j = skip(text, i + len(PYTHON_TAG), WS)
    return _wait(final) if j == len(text) else json_lead(text, j, final, None)


def mistral_block(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
    """``[TOOL_CALLS]`` then a JSON array of calls (v3) or ``name[ARGS]{...}`` (v11+).

    >>> mistral_block('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', 0, True, None)
    Match(end=46, calls=[ToolCall(name='get_weather', arguments='{"city": "Paris"}')])
    """
    j = skip(text, i + len(TOOL_CALLS), WS)
    if j == len(text):
        return _wait(final)
    if text[j] == "[":
        return json_lead(text, j, final, None)
    m = _NAME_ARGS.match(text, j)
    if m is None:
        return None if not final and _NAME_ARGS_PREFIX.fullmatch(text, j) else False
    k = skip(text, m.end(), WS)
    if k == len(text):
        return _wait(final)
    end = json_end(text, k) if text[k] == "{" else -1
    if end is None:
        return _wait(final)
    args = _loads(text[k:end]) if end > 0 else None
    return Match(end, [ToolCall(m.group(1), dump_args(args))]) if isinstance(args, dict) else False


def _loads(s: str) -> object:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return None


def python_list_lead(text: str, i: int, final: bool, names: frozenset[str] | None) -> Result:
    """Gemma's prompted Python calls at the start: ``[name(key=value, ...), ...]``."""
    if text[i] != "[":
        return False
    j = skip(text, i + 1, WS)
    head = _IDENT_PAREN.match(text, j)
    if head is None:
        rest = text[j:]
        maybe = not final and (rest == "" or re.fullmatch(r"[A-Za-z_][\w.-]*\s*", rest))
        return None if maybe else False
    end = json_end(text, i, quotes="'\"")
    if end is None:
        return _wait(final)
    calls = python_calls(text[i:end]) if end > 0 else None
    return Match(end, calls) if calls and known(calls, names) else False


def _one_fg(body: str) -> list[ToolCall] | None:
    call = function_gemma_call(body)
    return [call] if call else None


def _json_obj(call: ToolCall, key: str = "arguments") -> str:
    return json.dumps({"name": call.name, key: call.args()}, ensure_ascii=False)


def render_json(calls: list[ToolCall]) -> str:
    """Unmarked call objects, one per line (as Qwen2.5-Coder writes them)."""
    return "\n".join(_json_obj(c) for c in calls)


@dataclass(frozen=True)
class CallFormat:
    name: str
    tags: tuple[tuple[str, Matcher], ...]
    leads: tuple[Matcher, ...]
    render: Callable[[list[ToolCall]], str]
    id_style: str = "openai"


JSON_LEADS: tuple[Matcher, ...] = (
    json_lead, fence(("json", ""), lambda c: c in "{[", calls_from_json, marked=False))
FORMATS: dict[str, CallFormat] = {
    "hermes": CallFormat(
        "hermes", ((TOOL_CALL, closed(TOOL_CALL, TOOL_CALL_END, calls_from_json)),), JSON_LEADS,
        lambda calls: "\n".join(f"{TOOL_CALL}\n{_json_obj(c)}\n{TOOL_CALL_END}" for c in calls)),
    "llama3_json": CallFormat(
        "llama3_json", ((PYTHON_TAG, python_tag_block),), JSON_LEADS,
        lambda calls: "; ".join(_json_obj(c, "parameters") for c in calls)),
    "mistral": CallFormat(
        "mistral", ((TOOL_CALLS, mistral_block),), JSON_LEADS,
        lambda calls: TOOL_CALLS + json.dumps([json.loads(_json_obj(c)) for c in calls],
                                              ensure_ascii=False), id_style="mistral"),
    "gemma": CallFormat(
        "gemma", ((FG_START, closed(FG_START, FG_END, _one_fg)),
                  (TOOL_CODE, fence(("tool_code",), lambda c: c.isalpha() or c in "[_",
                                    python_calls, marked=True))),
        JSON_LEADS + (python_list_lead,),
        lambda calls: "".join(FG_START + render_function_gemma(c) + FG_END for c in calls)),
}
PARSERS = ("auto", *FORMATS, "none")


def detect_format(template: str | None) -> str:
    """The call format a chat template's source uses (``hermes`` when it names none).

    >>> detect_format("... <tool_call>\\n{{ tool_call | tojson }} ...")
    'hermes'
    >>> detect_format("... [AVAILABLE_TOOLS] ... [TOOL_CALLS] ...")
    'mistral'
    """
    t = template or ""
    if FG_START in t or "tool_code" in t:
        return "gemma"
    if TOOL_CALLS in t:
        return "mistral"
    if TOOL_CALL in t:
        return "hermes"
    if PYTHON_TAG in t or ("ipython" in t and '"parameters"' in t):
        return "llama3_json"
    return "hermes"


def new_call_id(fmt: CallFormat) -> str:
    """``call_`` + 24 hex digits (OpenAI's shape), or 9 letters and digits for Mistral."""
    if fmt.id_style == "mistral":
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
    return "call_" + uuid.uuid4().hex[:24]
