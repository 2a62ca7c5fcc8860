"""Tool calls to write and read back, shared by the toolcall tests: hypothesis strategies
for call names, JSON arguments and call-free prose, and the comparison of a reading with
the calls written."""

import json

from hypothesis import strategies as st

from specdec.toolcall import ToolCall

_HEAD = "abcdefghijklmnopqrstuvwxyz_"  # names [a-z_][a-z0-9_]{0,12}, built (not from_regex: slow)
NAMES = st.builds(str.__add__, st.sampled_from(_HEAD), st.text(_HEAD + "0123456789", max_size=12))
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).filter(
    lambda s: "<escape>" not in s)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=8)
ARGS = st.dictionaries(NAMES, JSON, max_size=4)
CALLS = st.lists(st.builds(lambda n, a: ToolCall(n, json.dumps(a)), NAMES, ARGS),
                 min_size=1, max_size=3)
# prose that holds no call syntax: no brackets, braces, backticks or tags
CONTENT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<[{`"),
                  min_size=1, max_size=40).map(str.strip).filter(bool)


def same_calls(parsed, calls):
    return ([(d.call.name, d.call.args()) for d in parsed.calls]
            == [(c.name, c.args()) for c in calls])
