"""OpenAI response bodies (``specdec.server.engine.chunks``): a streamed answer joins to the whole
one however its tokens are cut (a think block split off into ``reasoning_content``), each
endpoint's shapes and log-probabilities, and SSE framing."""

from __future__ import annotations

import json

from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specdec.server.engine.events import DoneEvent, TokenEvent
from specdec.server.engine.reasoning import ReasoningSplitter, split_reasoning
from specdec.server.engine.chunks import Responder
from specdec.server.wires.chat import SSE_DONE, sse

PIECES = st.lists(st.sampled_from(["<think>", "</think>", "<th", "ink>", "</", "</th", "plan",
                                   " ", "\n", "answer", "é"]), max_size=10)


def streamed(r, events, done):
    chunks = [r.first_chunk(), *(c for e in events for c in r.token_chunks(e)),
              *r.final_chunks(done)]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    return ("".join(d.get("content", "") for d in deltas),
            "".join(d.get("reasoning_content", "") for d in deltas), chunks)


@settings(max_examples=examples(60))
@given(PIECES, st.text("ab<>/", max_size=4), st.booleans())
@example(["<think>", "plan", "</th"], "", True)  # a cut tag is the reasoning's, at the end
def test_a_stream_joins_to_the_whole_answer(pieces, held, thinks):
    events = [TokenEvent(p, i) for i, p in enumerate(pieces)]
    done = DoneEvent("stop", held, {"completion_tokens": len(pieces)})
    split = ReasoningSplitter if thinks else lambda: None
    whole = Responder(True, "m", False, 0, split()).whole(events, done)
    message = whole["choices"][0]["message"]
    content, reasoning, chunks = streamed(Responder(True, "m", False, 0, split()), events, done)
    assert (content, reasoning or None) == (message["content"], message.get("reasoning_content"))
    if thinks:  # the oracle: the whole text split at once
        text = "".join(pieces) + held
        assert (content, reasoning) == split_reasoning(text)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert whole["object"] == "chat.completion" and whole["usage"] == done.usage


def test_chat_logprobs_and_one_id_per_request():
    r = Responder(True, "m", True, 1)
    e = TokenEvent("é", 5, -0.25, "é", [("é", -0.25), ("e", -2.0)])
    lp = r.token_chunk(e)["choices"][0]["logprobs"]["content"][0]
    assert lp["bytes"] == [195, 169] and [t["token"] for t in lp["top_logprobs"]] == ["é", "e"]
    assert r.id.startswith("chatcmpl-") and r.id != Responder(True, "m", True, 1).id
    assert Responder(True, "m", False, 0).token_chunk(e)["choices"][0]["logprobs"] is None


def test_completions_shapes_and_text_offsets():
    r = Responder(False, "m", True, 2)
    assert r.first_chunk() is None and r.id.startswith("cmpl-")
    events = [TokenEvent("ab", 1, -1.0, "ab", [("ab", -1.0)]), TokenEvent("c", 2, -0.5, "c")]
    whole = r.whole(events, DoneEvent("length", "d", {"completion_tokens": 2}, {"decode_s": 1}))
    choice = whole["choices"][0]
    assert whole["object"] == "text_completion" and choice["text"] == "abcd"
    assert choice["logprobs"]["text_offset"] == [0, 2]
    assert choice["logprobs"]["top_logprobs"] == [{"ab": -1.0}, {}]
    assert choice["finish_reason"] == "length" and whole["specdec"] == {"decode_s": 1}
    streamed_r = Responder(False, "m", True, 0)
    offsets = [streamed_r.token_chunk(e)["choices"][0]["logprobs"]["text_offset"] for e in events]
    assert offsets == [[0], [2]]  # the offset runs over the whole completion


def test_usage_chunk_and_sse_framing():
    r = Responder(True, "m", False, 0)
    usage = r.usage_chunk(DoneEvent("stop", usage={"total_tokens": 3}))
    assert usage["choices"] == [] and usage["usage"] == {"total_tokens": 3}
    frame = sse({"x": "é"})
    assert frame == 'data: {"x": "é"}\n\n' and json.loads(frame[6:]) == {"x": "é"}
    assert SSE_DONE == "data: [DONE]\n\n"
