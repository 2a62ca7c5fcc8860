"""Tool calls as text: every format's calls read back from what it writes, real replies of
Qwen2.5-Coder-0.5B, malformed calls and formats detected from templates. Streaming:
test_stream.py; the template side: test_prompt.py; Python-style calls: test_pycalls.py."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.toolcall import FORMATS, detect_format, parse_tool_calls
from specdec.toolcall.calls import SEPARATORS
from specdec.toolcall.formats import render_json

from .calltext import CALLS, CONTENT, same_calls


@settings(max_examples=examples(60))
@given(fmt=st.sampled_from(["hermes", "mistral", "gemma"]), calls=CALLS,
       content=st.none() | CONTENT)
def test_marked_calls_round_trip(fmt, calls, content):
    text = (content + "\n" if content else "") + FORMATS[fmt].render(calls)
    parsed = parse_tool_calls(text, fmt)  # marked calls may name any function
    assert same_calls(parsed, calls) and parsed.content == content


@settings(max_examples=examples(60))
@given(fmt=st.sampled_from(sorted(FORMATS)), calls=CALLS, content=st.none() | CONTENT,
       llama=st.booleans())
def test_unmarked_json_calls_round_trip(fmt, calls, content, llama):
    """Qwen2.5-Coder's untagged calls (and Llama's "parameters" ones) lead a reply."""
    render = FORMATS["llama3_json"].render if llama else render_json
    text = render(calls) + ("\n\n" + content if content else "")
    names = {c.name for c in calls}
    parsed = parse_tool_calls(text, fmt, names)
    # separators after a call never reach content (toolcall.stream's contract): a reply whose
    # only text after its calls is separators (",", ";") has no content (hypothesis found ",")
    kept = content if content and content.strip(SEPARATORS) else None
    assert same_calls(parsed, calls) and parsed.content == kept
    assert parse_tool_calls(text, fmt, {"another"}).content == text  # undeclared: not a call


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


def test_mistral_ids_and_formats_from_templates():
    p = parse_tool_calls('[TOOL_CALLS][{"name": "f", "arguments": {}}]', "mistral")
    assert len(p.calls[0].id) == 9 and p.calls[0].id.isalnum()
    assert detect_format("{% for t in tools %}<tool_call>{% endfor %}") == "hermes"
    assert detect_format("<|python_tag|> ipython") == "llama3_json"
    assert detect_format("""{{- '{"name": "' + tool_call.name + '", "parameters": ' }} ipython""") == "llama3_json"
    assert detect_format("<start_function_call>") == "gemma"
