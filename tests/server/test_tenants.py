"""Tenants cannot read each other through the shared caches: the ``cached_tokens`` oracle
(guess a prompt, watch how much of it the prefix cache held) gives nothing across API
keys or ``cache_salt`` values, and a tenant's or an unstored request's text never joins
the shared drafting memory. Each check also shows the signal where it must be (the same
key and salt again), so none passes by measuring nothing."""

from __future__ import annotations

import httpx
import pytest
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


@pytest.mark.slow
def test_store_false_and_salted_requests_stay_out_of_the_shared_memory(one_key):
    before = one_key.health()["memory"]["history_documents"]
    ask(one_key, "k", "Remember the number 4242.", store=False)
    ask(one_key, "k", "Remember the number 4343.", cache_salt="s")
    assert one_key.health()["memory"]["history_documents"] == before
    ask(one_key, "k", "Remember the number 4444.")  # one key, no salt: shared as before
    assert one_key.health()["memory"]["history_documents"] == before + 1
