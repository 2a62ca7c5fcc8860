"""The one body reader of the wires that parse their own JSON (``specdec.server.http.body``):
what it admits is JSON text every wire can echo and store; the rest is a ``BodyError``
(a 400 in the wire's shape: tests/server/test_attacks.py runs it through every wire)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.server.http.body import MAX_BODY_DEPTH, BodyError, parse_json


def nested(depth: int) -> bytes:
    return ('{"a": ' * depth + "1" + "}" * depth).encode()


@pytest.mark.parametrize("data, why", [
    (nested(MAX_BODY_DEPTH + 1), "nests deeper"),
    (nested(100_000), "nests deeper"),  # past the parser's own recursion: still a BodyError
    (b'{"a": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nests deeper"),
    (b'{"m": "\\ud800"}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),  # keys are echoed too
    (b'{"t": NaN}', "not JSON"),
    (b'{"t": -Infinity}', "not JSON"),
    (b'{"t": 1e999}', "finite"),  # parses to inf
    (b"[1]", "JSON object"),
    (b"\xff\xfe{", "not valid JSON"),
    (b'{"a": ', "not valid JSON"),
])
def test_what_is_refused_and_why(data, why):
    with pytest.raises(BodyError, match=why):
        parse_json(data)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=20))
def test_any_json_object_within_the_depth_is_admitted_as_sent(value):
    body = {"v": value}
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # hypothesis' text includes lone surrogates: those are refused
        with pytest.raises(BodyError):
            parse_json(json.dumps(body).encode())
        return
    assert parse_json(json.dumps(body).encode()) == body
    assert parse_json(nested(MAX_BODY_DEPTH)) is not None
