"""Queue limits and disconnects on a real `specdec serve` with room for one waiting request:
the requests run one at a time (--max-batch 1); a full queue answers 503 + Retry-After, and a client that disconnects (waiting or
generating) frees its place at once and cancels its generation."""

from __future__ import annotations

import threading

import httpx
import pytest
from serverproc import LONG, MODEL, Server, raw_request, wait_for

pytestmark = pytest.mark.slow  # server processes on a real model


@pytest.fixture(scope="module")
def server():
    s = Server("--queue-size", "1", "--max-batch", "1")
    yield s
    s.stop()


def test_full_queue_503_and_disconnects_free_their_slots(server):
    gen_metric = "specdec_generated_tokens_total"
    running = raw_request(server.port, LONG)
    wait_for(lambda: server.metric(gen_metric) > 0, what="the first request to generate")
    waiting = raw_request(server.port, LONG)
    wait_for(lambda: server.health()["queue_depth"] == 1, what="the second request to queue")

    full = httpx.post(server.base + "/v1/completions", json={**LONG, "stream": False, "max_tokens": 2})
    assert full.status_code == 503 and full.json()["error"]["code"] == "queue_full"
    assert int(full.headers["Retry-After"]) >= 1

    waiting.close()  # a waiting client leaves: its place is free at once
    wait_for(lambda: server.health()["queue_depth"] == 0, timeout=10, what="the queued job to leave")
    assert server.metric("specdec_requests_cancelled_total") == 1

    result = {}
    short = {"model": MODEL, "prompt": "Hello", "max_tokens": 4}
    t = threading.Thread(target=lambda: result.update(r=httpx.post(
        server.base + "/v1/completions", json=short, timeout=600)))
    t.start()  # accepted (not 503): the slot was freed
    wait_for(lambda: server.health()["queue_depth"] == 1, what="the new request to queue")
    running.close()  # the generating client leaves: its generation stops
    t.join(timeout=120)
    assert not t.is_alive() and result["r"].status_code == 200
    assert result["r"].json()["usage"]["completion_tokens"] == 4
    assert server.metric(gen_metric) < 4000  # the 4000-token generation did not run on
    assert server.metric("specdec_requests_cancelled_total") == 2
    assert server.metric('specdec_requests_total{endpoint="/v1/completions",status="503"}') == 1


def test_non_streaming_client_disconnect_cancels(server):
    before = server.metric("specdec_requests_cancelled_total")
    tokens = server.metric("specdec_generated_tokens_total")
    client = raw_request(server.port, {**LONG, "stream": False})
    wait_for(lambda: server.metric("specdec_generated_tokens_total") > tokens, what="generation")
    client.close()
    wait_for(lambda: server.metric("specdec_requests_cancelled_total") == before + 1, timeout=20,
             what="the cancel")
    wait_for(lambda: not server.health()["running"], timeout=10, what="the worker to be idle")
