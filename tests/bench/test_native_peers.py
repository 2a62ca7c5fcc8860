"""``specdec.bench.native_peers``: the child side's definitions (decode rate, the clock's
prefill/decode split, ``collect`` up to EOS or ``max_tokens``) and its JSON-lines loop (run
in this process on a tiny peer class written to a file)."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest

from specdec.bench.native_peers import Clock, PeerRun, collect, serve


def test_decode_rate_definition():
    assert PeerRun([1, 2, 3], prefill_s=0.1, decode_s=0.5).decode_tokens_per_s == 4.0
    assert math.isnan(PeerRun([1], prefill_s=0.1, decode_s=0.0).decode_tokens_per_s)


def test_collect_stops_at_eos_or_max_tokens_and_closes_the_stream():
    closed = []

    def stream():
        try:
            yield from (5, 6, 0, 7)
        finally:
            closed.append(True)

    run = collect(stream(), lambda t: t == 0, 10, Clock())
    assert run.tokens == [5, 6] and closed == [True] and run.prefill_s >= 0 and run.decode_s >= 0
    assert collect(iter([5, 6, 7]), lambda t: False, 2, Clock()).tokens == [5, 6]


def test_a_clock_without_arrivals_says_the_peer_produced_nothing():
    with pytest.raises(RuntimeError, match="peer produced no token at all"):
        Clock().run([])


PEER = """
class Echo:
    load_s = 0.5

    def __init__(self, prefix):
        self.prefix = prefix

    def say(self, text):
        if not text:
            raise ValueError("nothing to say")
        return self.prefix + text
"""


def test_serve_answers_one_json_line_per_request_and_reports_errors(tmp_path, monkeypatch):
    (tmp_path / "echo.py").write_text(PEER)
    requests = [{"method": "say", "kwargs": {"text": "hi"}}, {"method": "say", "kwargs": {"text": ""}}]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in requests)))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    serve(str(tmp_path / "echo.py"), "Echo", [">"])
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies == [{"result": {"load_s": 0.5}}, {"result": ">hi"},
                       {"error": "ValueError: nothing to say"}]


def test_serve_reports_a_load_failure_as_its_only_reply(tmp_path, monkeypatch):
    (tmp_path / "echo.py").write_text(PEER)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    serve(str(tmp_path / "echo.py"), "Echo", [])  # a missing argument
    reply, = [json.loads(line) for line in out.getvalue().splitlines()]
    assert reply["error"].startswith("TypeError:")
