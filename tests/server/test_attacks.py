"""Issue #34 item 7's attacks the other server tests do not already make, at small sizes
(tests/attacks.py; full sizes: scripts/serve_attacks.py, figures in docs/bench/serve-attacks):
schemathesis on every operation of the OpenAPI schema, a burst past the in-flight limit,
slowloris bodies beside streams nobody reads, long prompts flooding beside short ones, and
one row's drafter raising after a pipelined plain step. Covered elsewhere: the
cached_tokens oracle (tests/server/test_tenants.py), SIGTERM mid-stream (tests/server/test_memory.py),
a drafter raising before a speculative step (tests/decode/test_batch.py)."""

from __future__ import annotations

import pytest
from attacks import concurrent, flood, fuzz, row_raises, slowloris
from serverproc import Server

pytestmark = pytest.mark.slow  # server processes on a real model


def test_schemathesis_on_every_operation_gets_no_5xx():
    s = Server("--max-tokens", "2", "--queue-size", "8", api_key="fuzz-key")
    try:
        r = fuzz(s, examples=8)
    finally:
        s.stop()
    assert r["five_xx"] == 0, r["five_xx_examples"]
    assert r["operations"] >= 17 and r["alive"]  # the agent surfaces included
    for op in ("POST /api/chat", "POST /v1/messages", "POST /v1/responses", "POST /api/generate"):
        assert r["statuses"][op].get(200, 0) > 0, (op, r["statuses"][op])  # reached the model


def test_a_burst_past_the_in_flight_limit_gets_503_with_retry_after():
    """68 requests may be in flight (queue 2 + batch 2 + 64); 150 at once: uvicorn's own
    limit used to refuse all of them, the first too, with a bare 503 and no Retry-After."""
    s = Server("--max-tokens", "2", "--queue-size", "2", "--max-batch", "2")
    try:
        r = concurrent(s, 150)
    finally:
        s.stop()
    assert r["other"] == 0 and r["503_without_retry_after"] == 0, r
    assert r["ok"] >= 1 and r["503"] >= 150 - 68 and r["alive"], r


def test_slowloris_bodies_and_stopped_readers_give_their_slots_back():
    """The readers get their streams (and a batch slot) first and stop reading; only then
    do the slow sockets open. The batch empties with the readers still stalled."""
    s = Server()
    try:
        r = slowloris(s, n_slow=20, n_readers=3, reader_tokens=32)
    finally:
        s.stop()
    assert r["reader_statuses"] == {"200": 3}, r  # each held a slot before stopping
    assert sum(r["reader_outcomes"].values()) == 3 and "open" not in r["reader_outcomes"], r
    assert r["short_request_during"] == 200, r
    assert r["slow_statuses"] == {"408": 20}, r  # the body-read timeout answered each
    assert r["rss_after_bytes"] - r["rss_before_bytes"] < 64 << 20, r
    assert r["alive"], r


def test_long_prompts_beside_short_ones_all_answered_under_a_kv_budget():
    s = Server("--kv-budget", str(60 << 20))  # about one long row at a time
    try:
        r = flood(s, n_long=2, long_words=300, n_short=3)
    finally:
        s.stop()
    assert r["long_statuses"] == {200: 2} and r["short_statuses"] == {200: 3} and r["alive"], r


def test_a_drafter_raising_after_a_pipelined_step_fails_its_row_alone(smollm):
    """Short questions leave the n-gram drafter nothing to copy, so the batch steps
    pipelined and the drafter is asked after the step landed: its error used to escape
    the step and fail every row of the batch (the server's ``_fail_all``)."""
    r = row_raises(smollm, rows=3, max_tokens=16)
    assert r["failed_rows"] == [1] and r["rows_equal_to_solo"] == r["other_rows"] == 2, r
