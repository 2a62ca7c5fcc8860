"""Gemma's two non-JSON call syntaxes (Python calls; FunctionGemma's ``call:NAME{...}``),
parsed and rendered as pure functions.

Contract: ``python_calls(text)`` reads only keyword calls of literal values, evaluating
nothing (None otherwise); ``render_python`` is its inverse; ``function_gemma_call`` and
``render_function_gemma`` likewise. Tests: tests/toolcall/test_pycalls.py. Details: docs/agents-and-structured-output.md#python-style-calls."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from .calls import ToolCall, dump_args

ESCAPE = "<escape>"
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_IDENT = re.compile(r"[A-Za-z_][\w.-]*")


def _literal(node: ast.AST) -> Any:
    """A JSON value from a literal expression node (ValueError for anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if len(keys) == len(node.keys):
            return {k: _literal(v) for k, v in zip(keys, node.values)}
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    raise ValueError("not a literal")


def _call(node: ast.AST) -> ToolCall:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args
            and all(k.arg is not None for k in node.keywords)):
        raise ValueError("not a call with keyword arguments")
    return ToolCall(node.func.id, dump_args({k.arg: _literal(k.value) for k in node.keywords}))


def python_calls(text: str) -> list[ToolCall] | None:
    """Calls written as Python, or None.

    >>> python_calls('[get_weather(city="Paris"), get_time(zone=\\'CET\\', exact=true)]')
    [ToolCall(name='get_weather', arguments='{"city": "Paris"}'), ToolCall(name='get_time', arguments='{"zone": "CET", "exact": true}')]
    >>> python_calls("print('hi'); x = 1") is None
    True
    """
    try:
        module = ast.parse(text.strip())
    except (SyntaxError, ValueError):
        return None
    calls: list[ToolCall] = []
    try:
        for stmt in module.body:
            if not isinstance(stmt, ast.Expr):
                return None
            nodes = stmt.value.elts if isinstance(stmt.value, ast.List) else [stmt.value]
            calls.extend(_call(n) for n in nodes)
    except ValueError:
        return None
    return calls or None


def _py(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value)


def render_python(calls: list[ToolCall]) -> str:
    """``[name(key=value, ...), ...]``.

    >>> render_python([ToolCall("get_weather", '{"city": "Paris", "days": [1, 2]}')])
    "[get_weather(city='Paris', days=[1, 2])]"
    """
    parts = [f"{c.name}(" + ", ".join(f"{k}={_py(v)}" for k, v in c.args().items()) + ")"
             for c in calls]
    return "[" + ", ".join(parts) + "]"


def _more(s: str, i: int) -> None:
    if i >= len(s):
        raise ValueError("unterminated")


def _fg_value(s: str, i: int) -> tuple[Any, int]:
    if s.startswith(ESCAPE, i):
        end = s.index(ESCAPE, i + len(ESCAPE))
        return s[i + len(ESCAPE):end], end + len(ESCAPE)
    if s.startswith("{", i):
        return _fg_object(s, i)
    if s.startswith("[", i):
        items, i = [], i + 1
        while not s.startswith("]", i):
            _more(s, i)
            value, i = _fg_value(s, i)
            items.append(value)
            i += s.startswith(",", i)
        return items, i + 1
    j = i
    while j < len(s) and s[j] not in ",}]":
        j += 1
    raw = s[i:j].strip()
    try:
        return json.loads(raw), j
    except json.JSONDecodeError:
        return raw, j


def _fg_object(s: str, i: int) -> tuple[dict, int]:
    out, i = {}, i + 1
    while not s.startswith("}", i):
        _more(s, i)
        colon = s.index(":", i)
        out[s[i:colon].strip()], i = _fg_value(s, colon + 1)
        i += s.startswith(",", i)
    return out, i + 1


def function_gemma_call(body: str) -> ToolCall | None:
    """FunctionGemma's ``call:NAME{key:value,...}`` (strings inside ``<escape>``).

    >>> function_gemma_call("call:get_weather{city:<escape>Paris<escape>,days:2}")
    ToolCall(name='get_weather', arguments='{"city": "Paris", "days": 2}')
    """
    body = body.strip()
    name = _IDENT.match(body, 5) if body.startswith("call:") else None
    if name is None or not body.startswith("{", name.end()):
        return None
    try:
        args, end = _fg_object(body, name.end())
    except (ValueError, IndexError):
        return None
    return ToolCall(name.group(), dump_args(args)) if end == len(body) else None


def _fg(value: Any) -> str:
    if isinstance(value, str):
        return ESCAPE + value + ESCAPE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_fg(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fg(v) for v in value) + "]"
    return json.dumps(value)


def render_function_gemma(call: ToolCall) -> str:
    """FunctionGemma's call syntax.

    >>> render_function_gemma(ToolCall("f", '{"a": "x", "b": [1, true]}'))
    'call:f{a:<escape>x<escape>,b:[1,true]}'
    """
    return f"call:{call.name}" + _fg(call.args())
