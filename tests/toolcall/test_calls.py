"""Tool calls as data and the JSON pieces every format shares (``specdec.toolcall.calls``):
where a bracketed value closes (against ``json.dumps`` as the oracle), call objects read
and refused, and runs of call objects read back from what they were written from."""

from __future__ import annotations

import json

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.toolcall.calls import ToolCall, call_from_obj, calls_from_json, json_end, known

from .calltext import ARGS, CALLS, JSON, TEXT

CONTAINERS = st.lists(JSON, max_size=4) | ARGS


@settings(max_examples=examples(40))
@given(CONTAINERS, TEXT)
def test_json_end_is_where_the_dumped_value_closes(value, tail):
    text = json.dumps(value)
    assert json_end(text + tail, 0) == len(text)
    assert json_end("say: " + text, 5) == len(text) + 5


@settings(max_examples=examples(40))
@given(CONTAINERS, st.data())
def test_every_strict_prefix_is_undecided(value, data):
    text = json.dumps(value)
    cut = data.draw(st.integers(1, len(text) - 1))
    assert json_end(text[:cut], 0) is None


@pytest.mark.parametrize("text", ['{"a": ]', "[1, 2}", '{"a": (1]}'])
def test_a_mismatched_closer_is_minus_one(text):
    assert json_end(text, 0) == -1


def test_python_style_quotes_are_skipped_when_asked():
    assert json_end("{'a': '}'} x", 0, quotes="'\"") == 10
    assert json_end("{'a': '}'} x", 0) == 8  # the single-quoted brace closes without them


@pytest.mark.parametrize("obj", [
    {"name": "", "arguments": {}},                          # no name
    {"name": 3, "arguments": {}},
    {"name": "f", "arguments": {}, "parameters": {}},       # both keys
    {"name": "f", "arguments": {}, "extra": 1},
    {"name": "f", "arguments": [1]},                        # not an object
    {"name": "f", "arguments": "{not json"},
    ["name", "f"],
])
def test_what_is_not_a_call_object(obj):
    assert call_from_obj(obj) is None


def test_a_call_object_keeps_its_name_and_normalises_its_arguments():
    call = call_from_obj({"id": "c1", "type": "function", "name": "f",
                          "arguments": '{"x":  1, "city": "Zürich"}'})
    assert call == ToolCall("f", '{"x": 1, "city": "Zürich"}') and call.args()["city"] == "Zürich"
    assert call_from_obj({"name": "g"}) == ToolCall("g", "{}")


@settings(max_examples=examples(40))
@given(CALLS, st.lists(st.sampled_from([" ", "\n", ";", ",", "\t"]), min_size=3, max_size=3),
       st.booleans())
def test_runs_of_call_objects_read_back(calls, seps, as_array):
    objs = [{"name": c.name, "arguments": c.args()} for c in calls]
    if as_array:
        text = json.dumps(objs)
    else:
        text = seps[0] + seps[1].join(json.dumps(o) for o in objs) + seps[2]
    got = calls_from_json(text)
    assert [(c.name, c.args()) for c in got] == [(c.name, c.args()) for c in calls]


@pytest.mark.parametrize("text", ["", "  ", "[]", '{"name": "f"} prose', '{"city": "Paris"}',
                                  '[{"name": "f"}, 1]', '{"name": "f"'])
def test_anything_but_call_objects_is_none(text):
    assert calls_from_json(text) is None


def test_known_calls():
    calls = [ToolCall("a"), ToolCall("b")]
    assert known(calls, None) and known(calls, frozenset("abc")) and known([], frozenset())
    assert not known(calls, frozenset("a"))
