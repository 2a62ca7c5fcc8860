"""Streamed tool-call reading (``specdec.toolcall.stream``): however a reply is cut into
increments, the stream joins to the whole reply's reading, content never holds a tag, and
only what could still become a call is held back."""

from __future__ import annotations

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.toolcall import FORMATS, ToolCall, ToolCallStream, parse_tool_calls
from specdec.toolcall.formats import render_json
from specdec.toolcall.stream import CallDelta, ContentDelta, assemble

from .calltext import CALLS, CONTENT, same_calls


def cut(text, points):
    """``text`` in pieces at the given cut points."""
    edges = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in zip(edges, edges[1:])]


def streamed(text, fmt, names, pieces, **kw):
    s = ToolCallStream(fmt, names, **kw)
    deltas = [d for piece in pieces for d in s.feed(piece)] + s.finish()
    return deltas


@settings(max_examples=examples(80))
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


@settings(max_examples=examples(60))
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
       points=st.lists(st.integers(0, 10**6), max_size=8), fmt=st.sampled_from(sorted(FORMATS)))
def test_text_without_calls_is_content_unchanged(text, points, fmt):
    whole = parse_tool_calls(text, fmt, {"get_weather"})
    if not whole.calls:
        assert whole.content == text
    assert assemble(streamed(text, fmt, {"get_weather"}, cut(text, points))) == assemble(
        streamed(text, fmt, {"get_weather"}, [text]))


def test_stream_holds_only_what_could_be_a_call():
    s = ToolCallStream("hermes", {"get_weather"})
    assert s.feed("Let me check") == [ContentDelta("Let me check")]
    assert s.feed(".\n<tool_") == [ContentDelta(".")]  # a possible tag and the space before it
    assert s.feed('call>\n{"name": "get_weather", "arguments": {"city": "Pa') == []
    [call] = s.feed('ris"}}\n</tool_call>')
    assert call.index == 0 and call.call == ToolCall("get_weather", '{"city": "Paris"}')
    assert s.finish() == []
