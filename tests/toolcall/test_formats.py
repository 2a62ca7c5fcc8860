"""Tool calls as text: every format's calls read back from what it writes, the same calls
however a reply is cut into streamed increments, real replies of Qwen2.5-Coder-0.5B, and
the template side (messages, tool support, the forced-call schema)."""

from __future__ import annotations

import json
from keyword import iskeyword

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.toolcall import FORMATS, ToolCall, ToolCallStream, detect_format, parse_tool_calls
from specdec.toolcall.formats import TOOL_CODE, render_json
from specdec.toolcall.prompt import forced_call_schema, template_messages
from specdec.toolcall.pycalls import render_python
from specdec.toolcall.stream import CallDelta, ContentDelta, assemble

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


def cut(text, points):
    """``text`` in pieces at the given cut points."""
    edges = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in zip(edges, edges[1:])]


def streamed(text, fmt, names, pieces, **kw):
    s = ToolCallStream(fmt, names, **kw)
    deltas = [d for piece in pieces for d in s.feed(piece)] + s.finish()
    return deltas


@settings(max_examples=60)
@given(fmt=st.sampled_from(["hermes", "mistral", "gemma"]), calls=CALLS,
       content=st.none() | CONTENT)
def test_marked_calls_round_trip(fmt, calls, content):
    text = (content + "\n" if content else "") + FORMATS[fmt].render(calls)
    parsed = parse_tool_calls(text, fmt)  # marked calls may name any function
    assert same_calls(parsed, calls) and parsed.content == content


@settings(max_examples=60)
@given(fmt=st.sampled_from(sorted(FORMATS)), calls=CALLS, content=st.none() | CONTENT,
       llama=st.booleans())
def test_unmarked_json_calls_round_trip(fmt, calls, content, llama):
    """Qwen2.5-Coder's untagged calls (and Llama's "parameters" ones) lead a reply."""
    render = FORMATS["llama3_json"].render if llama else render_json
    text = render(calls) + ("\n\n" + content if content else "")
    names = {c.name for c in calls}
    parsed = parse_tool_calls(text, fmt, names)
    assert same_calls(parsed, calls) and parsed.content == content
    assert parse_tool_calls(text, fmt, {"another"}).content == text  # undeclared: not a call


@settings(max_examples=40)
@given(calls=CALLS, fenced=st.booleans())
def test_gemma_python_calls_round_trip(calls, fenced):
    assume(not any(iskeyword(w) for c in calls for w in [c.name, *c.args()]))  # not Python names
    code = render_python(calls)
    text = f"{TOOL_CODE}\n{code}\n```" if fenced else code
    assert same_calls(parse_tool_calls(text, "gemma", {c.name for c in calls}), calls)


@settings(max_examples=80)
@given(fmt=st.sampled_from(sorted(FORMATS)), calls=CALLS, content=st.none() | CONTENT,
       unmarked=st.booleans(), points=st.lists(st.integers(0, 10**6), max_size=12),
       parallel=st.booleans())
def test_any_cut_streams_the_whole_reply(fmt, calls, content, unmarked, points, parallel):
    """Cut anywhere (one speculative step may emit many tokens, a tag split between
    steps), the stream joins to the whole reply's reading, and content never holds tags."""
    unmarked = unmarked or fmt == "llama3_json"  # Llama's calls carry no tag
    body = render_json(calls) if unmarked else FORMATS[fmt].render(calls)
    text = body + "\n" + content if unmarked and content else (
        (content + "\n" if content else "") + body)
    names = {c.name for c in calls}
    limit = None if parallel else 1
    ids = iter(range(10**6))
    whole = parse_tool_calls(text, fmt, names, max_calls=limit, make_id=lambda: str(next(ids)))
    ids = iter(range(10**6))
    deltas = streamed(text, fmt, names, cut(text, points), max_calls=limit,
                      make_id=lambda: str(next(ids)))
    assert assemble(deltas) == whole
    assert same_calls(whole, calls[:limit])
    assert [d.index for d in deltas if isinstance(d, CallDelta)] == list(range(len(whole.calls)))
    for d in deltas:
        if isinstance(d, ContentDelta):
            assert d.text and not any(t in d.text for t in ("<tool_call>", "[TOOL_CALLS]",
                                                            "<start_function_call>"))


@settings(max_examples=60)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
       points=st.lists(st.integers(0, 10**6), max_size=8), fmt=st.sampled_from(sorted(FORMATS)))
def test_text_without_calls_is_content_unchanged(text, points, fmt):
    whole = parse_tool_calls(text, fmt, {"get_weather"})
    if not whole.calls:
        assert whole.content == text
    assert assemble(streamed(text, fmt, {"get_weather"}, cut(text, points))) == assemble(
        streamed(text, fmt, {"get_weather"}, [text]))


# what Qwen2.5-Coder-0.5B writes (greedy) for a weather question with a get_weather tool
QWEN_REPLIES = {
    "untagged": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "fenced": '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
    "call then invented result":
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"temperature_c": 18}',
}


@pytest.mark.parametrize("kind", sorted(QWEN_REPLIES))
def test_qwen_coder_replies(kind):
    p = parse_tool_calls(QWEN_REPLIES[kind], "hermes", {"get_weather"})
    assert [(d.call.name, d.call.args()) for d in p.calls] == [("get_weather", {"city": "Paris"})]
    assert p.content == ('{"temperature_c": 18}' if kind.startswith("call then") else None)
    assert p.calls[0].id.startswith("call_") and len(p.calls[0].id) == 29


def test_cut_replies_and_malformed_calls():
    cut_short = '{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"name": "get_we'
    p = parse_tool_calls(cut_short, "hermes", {"get_weather"})
    assert len(p.calls) == 1 and p.content == '{"name": "get_we'  # finish_reason: length
    unclosed = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {}}', "hermes")
    assert unclosed.content is None and unclosed.calls[0].call.name == "f"
    broken = "a <tool_call> not json </tool_call> b"
    assert parse_tool_calls(broken, "hermes").content == broken and not parse_tool_calls(broken, "hermes").calls
    code = "Here:\n```python\nprint(1)\n```\n"
    assert parse_tool_calls(code, "gemma", {"print"}).content == code


def test_stream_holds_only_what_could_be_a_call():
    s = ToolCallStream("hermes", {"get_weather"})
    assert s.feed("Let me check") == [ContentDelta("Let me check")]
    assert s.feed(".\n<tool_") == [ContentDelta(".")]  # a possible tag and the space before it
    assert s.feed('call>\n{"name": "get_weather", "arguments": {"city": "Pa') == []
    [call] = s.feed('ris"}}\n</tool_call>')
    assert call.index == 0 and call.call == ToolCall("get_weather", '{"city": "Paris"}')
    assert s.finish() == []


def test_mistral_ids_and_formats_from_templates():
    p = parse_tool_calls('[TOOL_CALLS][{"name": "f", "arguments": {}}]', "mistral")
    assert len(p.calls[0].id) == 9 and p.calls[0].id.isalnum()
    assert detect_format("{% for t in tools %}<tool_call>{% endfor %}") == "hermes"
    assert detect_format("<|python_tag|> ipython") == "llama3_json"
    assert detect_format("""{{- '{"name": "' + tool_call.name + '", "parameters": ' }} ipython""") == "llama3_json"
    assert detect_format("<start_function_call>") == "gemma"


def test_template_messages_and_forced_schema():
    msgs = template_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}])
    assert msgs[0] == {"role": "user", "content": "hi"}
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == "not json"  # kept as sent
    assert msgs[2]["name"] == "f"
    tools = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}} for n in ("a", "b")]
    one = forced_call_schema(tools, "required", parallel=False)
    assert [s["properties"]["name"]["const"] for s in one["anyOf"]] == ["a", "b"]
    assert forced_call_schema(tools, "none") is None


def test_forced_schema_compiles_and_its_replies_parse():
    """The seam for constrained tool_choice: the grammar engine compiles the schema, and
    every format reads a reply that follows it (as Qwen2.5-Coder-0.5B writes under it)."""
    from specdec.core.grammar import response_grammar
    from specdec.toolcall.prompt import forced_response_format

    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for choice, reply in (("required", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
                          ({"type": "function", "function": {"name": "get_weather"}},
                           '{"name": "get_weather", "arguments": {"city": "Paris"}}')):
        assert response_grammar(forced_response_format(forced_call_schema([tool], choice)))
        for fmt in FORMATS:
            p = parse_tool_calls(reply, fmt, {"get_weather"})
            assert p.content is None and [d.call.args() for d in p.calls] == [{"city": "Paris"}]
