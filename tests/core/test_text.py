"""``specdec.core.text``: stop strings held back across any segmentation (against an
oracle), and prompt encoding's boundary checks on a tokenizer without a chat template."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.core.text import StopMatcher, encode_prompt


@settings(max_examples=examples(1000))
@given(
    st.text(alphabet="abEND ", max_size=40),
    st.lists(st.text(alphabet="abEND", min_size=1, max_size=4), max_size=3),
    st.lists(st.integers(1, 5), max_size=20),
)
def test_stop_matcher_emits_exactly_the_text_before_the_first_stop(text, stops, cuts):
    pieces, i = [], 0
    for c in cuts:  # an arbitrary segmentation of the text (tokens)
        pieces.append(text[i : i + c])
        i += c
    pieces.append(text[i:])
    m = StopMatcher(stops)
    out, stopped = "", False
    for p in pieces:
        emitted, stopped = m.feed(p)
        out += emitted
        if stopped:
            break
    if not stopped:
        out += m.flush()
    # Oracle at token granularity: after the first piece whose arrival makes some stop
    # string appear, the output is the text before the earliest stop string seen so far.
    expected, seen, hit = text, "", False
    for p in pieces:
        seen += p
        hits = [seen.find(s) for s in stops if s in seen]
        if hits:
            expected, hit = seen[: min(hits)], True
            break
    assert out == expected
    assert stopped == hit


class NoTemplate:
    """The part of a tokenizer ``encode_prompt`` reads when there is no chat template."""

    chat_template = None


def test_token_ids_pass_through_as_ints():
    assert encode_prompt(NoTemplate(), [3, 1, 2]) == [3, 1, 2]


@pytest.mark.parametrize("prompt, message", [
    ([], "chat prompt has no messages"),
    ([{"role": "user"}], "must be a dict with 'role' and 'content'"),
    (["hi"], "must be a dict with 'role' and 'content'"),
    ([{"role": "user", "content": "hi"}], "has no chat template: pass a text prompt"),
])
def test_chat_prompts_are_checked_before_any_template_runs(prompt, message):
    with pytest.raises(ValueError, match=message):
        encode_prompt(NoTemplate(), prompt)


def test_a_system_prompt_without_chat_says_what_to_drop():
    with pytest.raises(ValueError, match="--system needs a chat template"):
        encode_prompt(NoTemplate(), "hello", system="be brief")


def test_stop_matcher_without_stops_passes_text_through_and_flush_empties_it():
    assert StopMatcher(None).feed("abc") == ("abc", False)
    assert StopMatcher([""]).feed("abc") == ("abc", False)  # an empty stop string is ignored
    m = StopMatcher(["STOP"])
    assert m.feed("xx ST") == ("xx ", False)
    assert m.flush() == "ST" and m.flush() == ""
