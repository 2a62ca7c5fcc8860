"""Issue #34 item 7's attacks the other server tests do not already make, at small sizes
(tests/attacks.py; full sizes: lab/serve-attacks/serve_attacks.py, figures in lab/serve-attacks):
schemathesis on every operation of the OpenAPI schema, a burst past the in-flight limit,
slowloris bodies beside streams nobody reads, long prompts flooding beside short ones, and
one row's drafter raising after a pipelined plain step. Covered elsewhere: the
cached_tokens oracle (tests/server/test_tenants.py), SIGTERM mid-stream (tests/server/test_memory.py),
a drafter raising before a speculative step (tests/decode/test_batch.py).

Issue #44's wire x attack table (tests/wire_attacks.py) runs in process (the app in front
of a scripted worker, two API keys): every wire refuses what it cannot parse with a 400 in
its own shape, the Responses store is per key, and every wire's tenant settings reach the
generation request."""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest
import wire_attacks as wa
from attacks import concurrent, flood, fuzz, row_raises, slowloris
from serverproc import Server
from starlette.testclient import TestClient

from specdec.server.http.app import create_app
from specdec.server.config import ServerConfig
from specdec.server.engine.events import DoneEvent
from specdec.server.http.metrics import Metrics

from .test_app import ScriptedWorker
from .tiny_api import TOOLS_TEMPLATE, word_tokenizer

slow = pytest.mark.slow  # server processes on a real model
KEY_A, KEY_B = {"Authorization": "Bearer ka"}, {"Authorization": "Bearer kb"}
DEPTHS = [100, 1000, 10000]  # lab/serve-attacks/serve_attacks.py adds 100k


@pytest.fixture(scope="module")
def app():
    """The app in process before a scripted worker, two keys (two tenants)."""
    worker = ScriptedWorker(word_tokenizer(TOOLS_TEMPLATE), ["hi", " hello"], context_length=4096)
    worker.ending = DoneEvent("stop", usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                                             "prompt_tokens_details": {"cached_tokens": 0}})
    cfg = ServerConfig(model="m", allowed_hosts=("testserver",), api_key="ka", more_api_keys=("kb",))
    client = TestClient(create_app(cfg, worker, Metrics()), raise_server_exceptions=False)
    client.headers.update(KEY_A)
    return client, worker


def test_another_keys_stored_responses_are_unknown_to_it(app):
    r = wa.cross_key(app[0], "m", KEY_A, KEY_B)
    assert r["made"] == 200 and r["owner_reads_after"] == 200 and r["cross_reads"] == 0, r
    for name, t in r["tries"].items():  # GET, DELETE, previous_response_id, item_reference
        assert t["status"] == 404 and t["as_unknown"] and not t["leaks"], (name, t)


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_bodies_are_a_400_on_every_wire(app, depth):
    r = wa.deep_bodies(app[0], "m", [depth])
    assert {w: s[depth] for w, s in r["statuses"].items()} == {w: [400, 400] for w in wa.bodies("m")}


def test_deep_tool_schemas_are_a_400_on_every_wire(app):
    r = wa.deep_schemas(app[0], "m", [40] + DEPTHS)
    assert r["five_xx"] == 0 and all(s == 400 for c in r["statuses"].values() for s in c.values()), r


def test_surrogates_and_nan_in_echoed_fields_are_a_400_before_any_work(app):
    client, worker = app
    ran = len(worker.requests)
    r = wa.bad_text(client, "m")
    assert r["not_400"] == {}, r["not_400"]
    assert len(worker.requests) == ran  # refused before generation: nothing ran, nothing stored


def test_wrong_typed_tools_are_a_400_naming_the_field(app):
    r = wa.wrong_tools(app[0], "m")
    assert r["not_400"] == {}, r["not_400"]
    assert all("tools" in m for answers in r["answers"].values() for _, m in answers), r["answers"]


def test_references_past_the_cap_are_a_400_naming_it(app):
    from specdec.server.wires.responses_input import MAX_REFERENCES

    r = wa.many_references(app[0], "m", MAX_REFERENCES + 1)
    assert r["made"] == 200 and r["status"] == 400 and "at most" in r["message"], r
    r = wa.many_references(app[0], "m", 8)  # under it: each an index lookup
    assert r["status"] == 200, r


def _last(worker):
    return worker.requests[-1]


def test_tenant_settings_reach_the_generation_on_every_wire(app):
    """Through the clients' own SDKs: the key's tenant, ``cache_salt`` (body field, or the
    X-Cache-Salt header), ``speculative`` and ``store: false`` (Messages, Responses, Ollama) arrive in the
    generation request (GenRequest: the prefix store's scope, the drafting memory's gate)."""
    client, worker = app
    base = "http://testserver"
    oa = {k: openai.OpenAI(base_url=base + "/v1", api_key=key, http_client=client)
          for k, key in (("a", "ka"), ("b", "kb"))}
    an = anthropic.Anthropic(base_url=base, api_key="kb", http_client=client)
    salt_hdr = {"X-Cache-Salt": "s-hdr"}
    spec = {"speculative": {"draft_type": "none"}}
    msgs = [{"role": "user", "content": "hi"}]
    seen = {}
    oa["a"].chat.completions.create(model="m", messages=msgs, max_tokens=2, extra_body={"cache_salt": "s1"})
    seen["chat"] = _last(worker)
    an.messages.create(model="m", messages=msgs, max_tokens=2,
                       extra_body={"cache_salt": "s1", "store": False, **spec})
    seen["messages"] = _last(worker)
    an.messages.create(model="m", messages=msgs, max_tokens=2, extra_headers=salt_hdr)
    seen["messages_hdr"] = _last(worker)
    oa["b"].responses.create(model="m", input="hi", max_output_tokens=2, store=False,
                             extra_body={"cache_salt": "s1", **spec})
    seen["responses"] = _last(worker)
    oa["a"].responses.create(model="m", input="hi", max_output_tokens=2, extra_headers=salt_hdr)
    seen["responses_hdr"] = _last(worker)
    ol = ollama.Client(host=base, headers={**KEY_B, **salt_hdr})
    # the SDK's requests, its headers, over the in-process app (starlette's transport
    # works only inside its own TestClient)
    ol._client = TestClient(client.app, base_url=base, headers=dict(ol._client.headers))
    ol.chat(model="m", messages=msgs, options={"num_predict": 2})
    seen["ollama_hdr"] = _last(worker)
    client.post("/api/generate", json={"model": "m", "prompt": "hi", "stream": False,
                                       "cache_salt": "s1", "store": False, **spec})
    seen["ollama_generate"] = _last(worker)
    got = {k: (g.tenant, g.cache_salt, g.store, g.gen.draft.draft_type) for k, g in seen.items()}
    default = seen["chat"].gen.draft.draft_type
    assert default != "none"
    assert got == {"chat": ("key0", "s1", True, default),
                   "messages": ("key1", "s1", False, "none"),
                   "messages_hdr": ("key1", "s-hdr", True, default),
                   "responses": ("key1", "s1", False, "none"),
                   "responses_hdr": ("key0", "s-hdr", True, default),
                   "ollama_hdr": ("key1", "s-hdr", True, default),
                   "ollama_generate": ("key0", "s1", False, "none")}


@pytest.fixture(scope="module")
def capped():
    """One server for the fuzzer and the burst (a start each was ~7 s): 2-token answers, a
    queue of 2 and a batch of 2 (68 requests in flight at most), behind a key."""
    s = Server("--max-tokens", "2", "--queue-size", "2", "--max-batch", "2", api_key="fuzz-key")
    yield s
    s.stop()


@slow
def test_schemathesis_on_every_operation_gets_no_5xx(capped):
    r = fuzz(capped, examples=8)  # one request at a time: the small queue never refuses
    assert r["five_xx"] == 0, r["five_xx_examples"]
    assert r["operations"] >= 17 and r["alive"]  # the agent surfaces included
    for op in ("POST /api/chat", "POST /v1/messages", "POST /v1/responses", "POST /api/generate"):
        assert r["statuses"][op].get(200, 0) > 0, (op, r["statuses"][op])  # reached the model


@slow
def test_a_burst_past_the_in_flight_limit_gets_503_with_retry_after(capped):
    """68 requests may be in flight (queue 2 + batch 2 + 64); 150 at once: uvicorn's own
    limit used to refuse all of them, the first too, with a bare 503 and no Retry-After."""
    r = concurrent(capped, 150)
    assert r["other"] == 0 and r["503_without_retry_after"] == 0, r
    assert r["ok"] >= 1 and r["503"] >= 150 - 68 and r["alive"], r


@pytest.fixture(scope="module")
def guarded():
    """One server for the slowloris and the flood (a start each was seconds): a 2 s
    --body-timeout (not the default 30 s) and a KV budget of about one long row at a time
    (SmolLM2's fp32 KV: 46 KB a token; 30 MiB hold ~680 tokens: a 150-word prompt's ~500
    and the shorts, not two of them)."""
    s = Server("--body-timeout", "2", "--kv-budget", str(30 << 20))
    yield s
    s.stop()


@slow
def test_slowloris_bodies_and_stopped_readers_give_their_slots_back(guarded):
    """The readers get their streams (and a batch slot) first and stop reading; only then
    do the slow sockets open. The batch empties with the readers still stalled. A 2 s
    --body-timeout (not the default 30 s) answers the slow sockets: the flag is honoured."""
    r = slowloris(guarded, n_slow=20, n_readers=3, reader_tokens=32)
    assert "did not arrive within 2 s (--body-timeout)" in guarded.log()  # the access log's reason
    assert r["reader_statuses"] == {"200": 3}, r  # each held a slot before stopping
    assert sum(r["reader_outcomes"].values()) == 3 and "open" not in r["reader_outcomes"], r
    assert r["short_request_during"] == 200, r
    assert r["slow_statuses"] == {"408": 20}, r  # the body-read timeout answered each
    assert r["rss_after_bytes"] - r["rss_before_bytes"] < 64 << 20, r
    assert r["alive"], r


@slow
def test_long_prompts_beside_short_ones_all_answered_under_a_kv_budget(guarded):
    # 150 words, not 300 (1090 tokens each against a budget twice this one's): half the prefill
    r = flood(guarded, n_long=2, long_words=150, n_short=3)
    assert r["long_statuses"] == {200: 2} and r["short_statuses"] == {200: 3} and r["alive"], r


@slow
def test_a_drafter_raising_after_a_pipelined_step_fails_its_row_alone(smollm):
    """Short questions leave the n-gram drafter nothing to copy, so the batch steps
    pipelined and the drafter is asked after the step landed: its error used to escape
    the step and fail every row of the batch (the server's ``_fail_all``)."""
    r = row_raises(smollm, rows=3, max_tokens=16)
    assert r["failed_rows"] == [1] and r["rows_equal_to_solo"] == r["other_rows"] == 2, r
