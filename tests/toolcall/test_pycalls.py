"""Python-style tool calls (``specdec.toolcall.pycalls``): Gemma's ``tool_code`` calls read
back from what ``render_python`` writes, and FunctionGemma's call bodies."""

from __future__ import annotations

from keyword import iskeyword

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.toolcall import parse_tool_calls
from specdec.toolcall.formats import TOOL_CODE
from specdec.toolcall.pycalls import render_python

from .calltext import CALLS, same_calls


@settings(max_examples=40)
@given(calls=CALLS, fenced=st.booleans())
def test_gemma_python_calls_round_trip(calls, fenced):
    assume(not any(iskeyword(w) for c in calls for w in [c.name, *c.args()]))  # not Python names
    code = render_python(calls)
    text = f"{TOOL_CODE}\n{code}\n```" if fenced else code
    assert same_calls(parse_tool_calls(text, "gemma", {c.name for c in calls}), calls)
