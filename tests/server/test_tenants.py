"""Tenants cannot read each other through the shared caches: the ``cached_tokens`` oracle
(guess a prompt, watch how much of it the prefix cache held) gives nothing across API
keys or ``cache_salt`` values, and a tenant's or an unstored request's text never joins
the shared drafting memory. Each check also shows the signal where it must be (the same
key and salt again), so none passes by measuring nothing."""

from __future__ import annotations

import httpx
import pytest
import wire_attacks as wa
from serverproc import Server

MODEL = "smollm2-135m"
SECRET = ("System notes for the billing agent. The production API key is sk-7f3a9c2e41b0d5, "
          "rotate it monthly. Never reveal it. Customer question follows.")


def ask(server, key: str, text: str, **extra) -> dict:
    r = httpx.post(server.base + "/v1/chat/completions", timeout=300,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": MODEL, "max_tokens": 4, "messages": [
                       {"role": "user", "content": text}], **extra})
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def cached(usage: dict) -> int:
    return usage["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def two_keys():
    s = Server("--model", MODEL, "--api-key", "alice-key", "--api-key", "bob-key",
               "--api-key", "carol-key")
    yield s
    s.stop()


@pytest.mark.slow
def test_the_cached_tokens_oracle_gives_nothing_across_keys(two_keys):
    ask(two_keys, "alice-key", SECRET + " How do I pay?")
    # the others guess alice's prompt (each guess its own first, so no cache of theirs
    # could match it): the whole text, a prefix
    assert cached(ask(two_keys, "bob-key", SECRET + " How do I pay?")) == 0
    assert cached(ask(two_keys, "carol-key", SECRET[:90])) == 0
    # alice herself is served from her cache (the signal exists, on her side)
    assert cached(ask(two_keys, "alice-key", SECRET + " When is it due?")) > 20
    # neither tenant's text joined the shared memory (the one /health reports)
    assert two_keys.health()["memory"]["history_documents"] == 0


@pytest.fixture(scope="module")
def one_key():
    s = Server("--model", MODEL, api_key="k")
    yield s
    s.stop()


@pytest.mark.slow
def test_cache_salt_partitions_the_prefix_cache(one_key):
    ask(one_key, "k", SECRET + " How do I pay?", cache_salt="tenant-a")
    assert cached(ask(one_key, "k", SECRET + " How do I pay?", cache_salt="tenant-b")) == 0
    assert cached(ask(one_key, "k", SECRET + " How do I pay?")) == 0  # unsalted: another scope
    assert cached(ask(one_key, "k", SECRET + " Where?", cache_salt="tenant-a")) > 20


PLANETS = "Name the planets of the solar system in order."
NGRAM_MOD = {"speculative": {"draft_type": "ngram-mod", "gate": False}, "max_tokens": 16}


@pytest.mark.slow
def test_store_false_and_salted_requests_stay_out_of_every_drafting_memory(one_key):
    """An ngram-mod drafter writes its request's text into the table it drafts from (the
    prompt, the answer in chunks, the rest at ``end``): a salted or ``store: false`` request
    writes a table of its own, so another salt drafts nothing of its answer and the shared
    memory is unchanged; a stored request's answer drafts the next one (the signal)."""
    before = one_key.health()["memory"]
    ask(one_key, "k", PLANETS, cache_salt="a", **NGRAM_MOD)
    assert ask(one_key, "k", PLANETS, cache_salt="b", **NGRAM_MOD)["accepted_tokens"] == 0
    ask(one_key, "k", PLANETS, store=False, **NGRAM_MOD)
    assert one_key.health()["memory"] == before
    ask(one_key, "k", PLANETS, **NGRAM_MOD)  # one key, no salt: shared as before
    assert one_key.health()["memory"]["history_documents"] == before["history_documents"] + 1
    assert ask(one_key, "k", PLANETS, **NGRAM_MOD)["accepted_tokens"] >= 12


@pytest.mark.slow
def test_the_oracle_gives_nothing_across_keys_and_salts_on_every_wire(two_keys):
    """Issue #44: /v1/messages, /v1/responses and /api/chat partition the prefix cache as
    chat completions do, by key and by ``cache_salt`` (here the X-Cache-Salt header)."""
    alice, bob = ({"Authorization": f"Bearer {k}"} for k in ("alice-key", "bob-key"))
    with httpx.Client(base_url=two_keys.base, timeout=300) as http:
        # the same salt, another key; then the same key, another salt (a fresh scope per wire)
        by_key = wa.oracle(http, MODEL, SECRET, lambda w: {**alice, "X-Cache-Salt": w},
                           lambda w: {**bob, "X-Cache-Salt": w})
        by_salt = wa.oracle(http, MODEL, SECRET, lambda w: {**alice, "X-Cache-Salt": "a" + w},
                            lambda w: {**alice, "X-Cache-Salt": "b" + w})
    for name, table in (("key", by_key), ("salt", by_salt)):
        assert {w: r["attacker_cached"] for w, r in table.items()} == dict.fromkeys(table, 0), (name, table)
        assert all(r["victim_cached"] > 20 for r in table.values()), (name, table)


def test_what_cost_gates_learn_is_partitioned_as_the_drafting_memory():
    """Offer acceptance is learnt from a tenant's text (``policy.learnt``): a server's gates
    carry it per API key, as the drafting memory, and a salted request neither reads nor
    leaves any (in process: no model is loaded to hand out the partitions; that ``drafter_for``
    hands a request's gate its ``learnt_for``: test_batcher's request-value test, on a loaded
    worker)."""
    from specdec.server.config import ServerConfig
    from specdec.server.engine.events import GenRequest
    from specdec.server.engine.worker import InferenceWorker

    w = InferenceWorker(ServerConfig(), metrics=None)
    curve = {1: 1.0, 2: 1.1, 3: 1.2}

    def learnt(tenant: str, salt: str | None = None):
        return w.learnt_for(GenRequest([1], None, tenant, salt)).on(curve)  # type: ignore[arg-type]

    learnt("alice").offers_for("suffix", 2, prior=0.5, decay=0.9)
    assert ("suffix", 2) in learnt("alice").offers  # alice's gates carry what hers learnt
    assert learnt("bob").offers == {} and learnt("").offers == {}
    assert learnt("alice", "s").offers == {}  # salted: starts from nothing
    learnt("", "s").offers_for("suffix", 2, prior=0.5, decay=0.9)
    assert learnt("").offers == {}  # ... and leaves nothing
