"""The think-block splitter (``specdec.server.engine.reasoning``): whole-text splits, streamed
deltas equal to the whole split however the text is cut, no tag leaking into either side,
and which chat templates and prompts open a think block."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.server.engine.reasoning import (ReasoningSplitter, TemplateTraits, opens_thinking,
                                      split_reasoning)

# a Qwen3-like template: a think block, switched by enable_thinking; open_think opens it
# in the generation prompt as DeepSeek-R1's does
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% elif open_think is defined and open_think %}<think>\n{% endif %}{% endif %}")


@pytest.mark.parametrize("text, thinking, want", [
    ("<think>\nplan\n</think>\n\nanswer", False, ("answer", "plan")),
    ("  <think>a</think>b<think>c</think>", False, ("b<think>c</think>", "a")),
    ("Hello <think>x</think>", False, ("Hello <think>x</think>", "")),
    ("\n\nplain answer\n", False, ("\n\nplain answer\n", "")),
    ("plan</think>answer", True, ("answer", "plan")),
    ("<think>cut short </th", False, ("", "cut short </th")),
    ("<thi", False, ("<thi", "")),
    ("", True, ("", "")),
])
def test_split_reasoning(text, thinking, want):
    assert split_reasoning(text, thinking) == want


PIECES = st.lists(st.sampled_from(["<think>", "</think>", "<th", "ink>", "</", "think", ">", "\n",
                                   " ", "a", "b c", "<", "/"]), max_size=14)


@given(PIECES, st.lists(st.integers(0, 80), max_size=6), st.booleans())
def test_streamed_deltas_equal_the_whole_split(pieces, cuts, thinking):
    text = "".join(pieces)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    s, content, reasoning = ReasoningSplitter(thinking), "", ""
    for a, b in zip(bounds, bounds[1:]):
        c, r = s.feed(text[a:b])
        content, reasoning = content + c, reasoning + r
    c, r = s.flush()
    assert (content + c, reasoning + r) == split_reasoning(text, thinking)


@given(st.text("ab \n<>/", max_size=20).filter(lambda t: "think>" not in t),
       st.text("ab \n<>/", max_size=20).filter(lambda t: "think>" not in t),
       st.lists(st.integers(0, 60), max_size=6))
def test_tags_never_leak_whatever_the_deltas(thought, answer, cuts):
    text = f"\n<think>{thought}</think>{answer}"
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    s, out = ReasoningSplitter(), []
    for a, b in zip(bounds, bounds[1:]):
        out.append(s.feed(text[a:b]))
    out.append(s.flush())
    content, reasoning = ("".join(p[i] for p in out) for i in (0, 1))
    assert (content, reasoning) == (answer.lstrip(), thought.strip())


def test_template_traits_and_open_prompts():
    assert TemplateTraits.of(SimpleNamespace(chat_template=THINK_TEMPLATE)) == TemplateTraits(True, True)
    assert TemplateTraits.of(SimpleNamespace(chat_template="{{ messages }}")) == TemplateTraits()
    assert TemplateTraits.of(SimpleNamespace(chat_template=None)) == TemplateTraits()
    assert TemplateTraits.of(SimpleNamespace(chat_template={"default": "<think>"})).think
    assert opens_thinking("<|Assistant|><think>\n") and not opens_thinking("<think>\n\n</think>\n\n")
    assert not opens_thinking("<|im_start|>assistant\n")
