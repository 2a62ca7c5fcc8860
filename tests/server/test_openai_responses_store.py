"""The Responses API's store (``specdec.server.openai_responses_store``): an LRU bounded in
count and in total JSON bytes, a 404 naming the id once a response is gone, and items
found by id across stored conversations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.server.errors import APIError
from specdec.server.openai_responses_store import ResponseStore


def response(rid, text=""):
    return {"id": rid, "output": [{"id": f"msg_{rid}", "type": "message", "text": text}]}


def test_put_get_delete_and_the_404_that_says_what_to_do():
    store = ResponseStore()
    store.put(response("r1", "hi"), [{"id": "in_1", "role": "user"}])
    assert store.get("r1").response["output"][0]["text"] == "hi"
    store.delete("r1")
    assert store.bytes == 0
    with pytest.raises(APIError) as e:
        store.get("r1", param="previous_response_id")
    err = e.value
    assert (err.status, err.param, err.code) == (404, "previous_response_id", "response_not_found")
    assert "'r1'" in err.message and "Send the whole conversation" in err.message
    with pytest.raises(APIError):
        store.delete("r1")


def test_the_least_recently_read_goes_first():
    store = ResponseStore(max_items=2)
    store.put(response("a"), [])
    store.put(response("b"), [])
    store.get("a")  # read: now the most recent
    store.put(response("c"), [])
    store.get("a"), store.get("c")
    with pytest.raises(APIError):
        store.get("b")


@given(st.lists(st.text(max_size=40), min_size=1, max_size=12), st.integers(50, 400))
def test_the_byte_bound_holds_whatever_is_put(texts, max_bytes):
    store = ResponseStore(max_bytes=max_bytes)
    for i, text in enumerate(texts):
        store.put(response(f"r{i}", text), [{"id": f"i{i}", "content": text}])
        kept = [f"r{j}" for j in range(i + 1) if store.item(f"i{j}") is not None]
        sizes = [len(json.dumps(store.get(r).response)) + len(json.dumps(store.get(r).items))
                 for r in kept]
        assert store.bytes == sum(sizes) <= max_bytes
        assert kept == [f"r{j}" for j in range(i + 1 - len(kept), i + 1)]  # the newest ones


def test_items_by_id_newest_first():
    store = ResponseStore()
    store.put(response("a"), [{"id": "x", "v": 1}])
    store.put(response("b"), [{"id": "x", "v": 2}, {"type": "reasoning"}])
    assert store.item("x") == {"id": "x", "v": 2} and store.item("nope") is None
