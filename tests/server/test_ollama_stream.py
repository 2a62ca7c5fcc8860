"""Ollama's answers from OpenAI chunks (``specdec.server.wires.ollama_stream``): content and
thinking passed on as they come, each tool call sent once and whole with object arguments
however its JSON is cut, log-probabilities in Ollama's list, the closing fields in ns, and
NDJSON lines that end in an error line when the stream fails."""

from __future__ import annotations

import asyncio
import json
import time

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.server.http.errors import APIError
from specdec.server.wires.ollama_stream import (Piece, Translator, chat_fields, generate_fields,
                                          ndjson_lines, whole_answer)


def chunk(finish=None, **delta):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def cut(text, points):
    edges = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in zip(edges, edges[1:])]


@settings(max_examples=examples(50))
@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers() | st.text(max_size=5),
                       max_size=3),
       st.lists(st.integers(0, 200), max_size=6), st.text(max_size=10))
def test_a_call_goes_out_once_and_whole_however_its_json_is_cut(args, points, content):
    tr, pieces = Translator(), []
    pieces.append(tr.feed(chunk(content=content)))
    head = {"index": 0, "id": "c1", "function": {"name": "weather", "arguments": ""}}
    pieces.append(tr.feed(chunk(tool_calls=[head])))
    for part in cut(json.dumps(args), points):
        pieces.append(tr.feed(chunk(tool_calls=[{"index": 0, "function": {"arguments": part}}])))
    pieces.append(tr.feed(chunk(finish="tool_calls")))
    calls = [c for p in pieces for c in p.tool_calls]
    assert calls == [{"id": "c1", "function": {"index": 0, "name": "weather", "arguments": args}}]
    assert "".join(p.content for p in pieces) == content and tr.finish == "tool_calls"


def test_arguments_that_never_become_an_object_go_out_at_the_end_as_empty():
    tr = Translator()
    head = {"index": 0, "id": "c", "function": {"name": "f", "arguments": "[1, 2"}}
    assert tr.feed(chunk(tool_calls=[head])).tool_calls == []
    [call] = tr.feed(chunk(finish="stop")).tool_calls
    assert call["function"]["arguments"] == {}


def test_thinking_logprobs_and_the_two_shapes():
    tr = Translator()
    lp = {"content": [{"token": "é", "logprob": -0.5,
                       "top_logprobs": [{"token": "é", "logprob": -0.5}]}]}
    p = tr.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "hm", "content": "é"},
                              "logprobs": lp}]})
    assert p.logprobs == [{"token": "é", "logprob": -0.5, "bytes": [195, 169], "top_logprobs": [
        {"token": "é", "logprob": -0.5, "bytes": [195, 169]}]}]
    assert chat_fields(p) == {"message": {"role": "assistant", "content": "é", "thinking": "hm"},
                              "logprobs": p.logprobs}
    assert generate_fields(Piece("x")) == {"response": "x"} and not Piece()
    completions = {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0]}
    p = Translator().feed({"choices": [{"index": 0, "text": "ab", "logprobs": completions}]})
    assert p.content == "ab" and [e["logprob"] for e in p.logprobs] == [-1.0, -2.0]


def test_the_closing_fields_come_from_the_servers_timings():
    tr = Translator()
    tr.feed({**chunk(finish="length", content="x"), "usage": {
        "prompt_tokens": 4, "completion_tokens": 10}, "specdec": {
        "prefill_s": 0.25, "decode_tokens_per_s": 20.0}})
    done = tr.done(time.perf_counter())
    assert (done["done_reason"], done["prompt_eval_count"], done["eval_count"]) == ("length", 4, 10)
    assert (done["prompt_eval_duration"], done["eval_duration"]) == (250_000_000, 500_000_000)


async def chunks(*items, fail=False):
    for item in items:
        yield item
    if fail:
        raise APIError(500, "the worker stopped")


def test_ndjson_lines_and_the_whole_answer():
    async def run():
        lines = [json.loads(line) async for line in ndjson_lines(
            chunks(chunk(content="a"), chunk(content=""), chunk(content="b", finish="stop")),
            "m", generate_fields, time.perf_counter())]
        failed = [json.loads(line) async for line in ndjson_lines(
            chunks(chunk(content="a"), fail=True), "m", chat_fields, time.perf_counter())]
        whole = await whole_answer(chunks(chunk(content="a"), chunk(content="b", finish="stop")),
                                   "m", chat_fields, time.perf_counter())
        return lines, failed, whole

    lines, failed, whole = asyncio.run(run())
    assert [(x["response"], x["done"]) for x in lines] == [("a", False), ("b", False), ("", True)]
    assert lines[0]["created_at"].endswith("Z") and lines[-1]["done_reason"] == "stop"
    assert failed == [failed[0], {"error": "the worker stopped"}]
    assert whole["message"]["content"] == "ab" and whole["done"] is True
