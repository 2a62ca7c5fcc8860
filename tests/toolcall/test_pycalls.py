"""Python-style tool calls (``specdec.toolcall.pycalls``): Gemma's ``tool_code`` calls read
back from what ``render_python`` writes, and FunctionGemma's call bodies."""

from __future__ import annotations

import json
from keyword import iskeyword

import pytest
from conftest import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.toolcall import ToolCall, parse_tool_calls
from specdec.toolcall.formats import TOOL_CODE
from specdec.toolcall.pycalls import (function_gemma_call, python_calls, render_function_gemma,
                                      render_python)

from .calltext import ARGS, CALLS, NAMES, same_calls


@settings(max_examples=examples(40))
@given(calls=CALLS, fenced=st.booleans())
def test_gemma_python_calls_round_trip(calls, fenced):
    assume(not any(iskeyword(w) for c in calls for w in [c.name, *c.args()]))  # not Python names
    code = render_python(calls)
    text = f"{TOOL_CODE}\n{code}\n```" if fenced else code
    assert same_calls(parse_tool_calls(text, "gemma", {c.name for c in calls}), calls)


@settings(max_examples=examples(40))
@given(NAMES, ARGS)
def test_function_gemma_calls_round_trip(name, args):
    call = ToolCall(name, json.dumps(args))
    assert function_gemma_call(render_function_gemma(call)).args() == args


@pytest.mark.parametrize("body", [
    "get_weather{city:<escape>Paris<escape>}",        # no "call:"
    "call:get_weather(city=1)",                       # not braces
    "call:f{a:<escape>open}",                         # an escape never closed
    "call:f{a:1",                                     # cut short
    "call:f{a:1} trailing",
])
def test_what_is_not_a_function_gemma_call(body):
    assert function_gemma_call(body) is None


@pytest.mark.parametrize("text", [
    "get_weather('Paris')",          # a positional argument
    "get_weather(**kw)",
    "x = get_weather(city='Paris')",
    "obj.method(a=1)",
    "get_weather(city=open('f'))",   # a value that is not a literal
    "[]",
    "get_weather(city='Paris'",
])
def test_python_that_is_not_calls_is_none(text):
    assert python_calls(text) is None


def test_python_calls_one_per_line_and_json_literals():
    text = "f(a=true, b=None, c={'k': [1, 2.5]})\ng(x=-3)"
    assert [(c.name, c.args()) for c in python_calls(text)] == [
        ("f", {"a": True, "b": None, "c": {"k": [1, 2.5]}}), ("g", {"x": -3})]
