"""The Responses API's store (``specdec.server.wires.responses_store``): one partition per
API key, each an LRU bounded in count and in resident bytes, a 404 naming the id once a
response is gone (the same for another key's id), items found by id through an index,
reasoning items never kept, later turns sharing earlier turns' items."""

from __future__ import annotations

import sys
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.server.http.errors import APIError
from specdec.server.wires.responses_store import ResponseStore

A, B = "key0", "key1"


def response(rid, text=""):
    return {"id": rid, "output": [{"id": f"msg_{rid}", "type": "message", "text": text}]}


def test_put_get_delete_and_the_404_that_says_what_to_do():
    store = ResponseStore()
    store.put(A, response("r1", "hi"), [{"id": "in_1", "role": "user"}])
    assert '"hi"' in store.get(A, "r1").response
    store.delete(A, "r1")
    assert store.bytes == 0
    with pytest.raises(APIError) as e:
        store.get(A, "r1", param="previous_response_id")
    err = e.value
    assert (err.status, err.param, err.code) == (404, "previous_response_id", "response_not_found")
    assert "'r1'" in err.message and "Send the whole conversation" in err.message
    with pytest.raises(APIError):
        store.delete(A, "r1")


def test_another_keys_response_and_items_are_not_there():
    store = ResponseStore()
    store.put(A, response("r1", "secret"), [{"id": "in_1", "content": "password"}])
    for call in (lambda: store.get(B, "r1"), lambda: store.delete(B, "r1")):
        with pytest.raises(APIError) as e:
            call()
        unknown = pytest.raises(APIError, store.get, B, "unknownid").value
        assert (e.value.status, e.value.message) == (404, unknown.message.replace("unknownid", "r1"))
    assert store.item(B, "in_1") is None and store.item(A, "in_1") == {"id": "in_1", "content": "password"}
    store.get(A, "r1")  # B's DELETE removed nothing


def test_the_least_recently_read_goes_first_per_key():
    store = ResponseStore(max_items=2)
    store.put(A, response("a"), [])
    store.put(A, response("b"), [])
    store.put(B, response("z"), [])  # another key's puts evict nothing of A's
    store.get(A, "a")  # read: now the most recent
    store.put(A, response("c"), [])
    store.get(A, "a"), store.get(A, "c"), store.get(B, "z")
    with pytest.raises(APIError):
        store.get(A, "b")


@given(st.lists(st.text(max_size=40), min_size=1, max_size=12), st.integers(600, 3000))
def test_the_byte_bound_holds_whatever_is_put(texts, max_bytes):
    store = ResponseStore(max_bytes=max_bytes)
    for i, text in enumerate(texts):
        store.put(A, response(f"r{i}", text), [{"id": f"i{i}", "content": text}])
        kept = [f"r{j}" for j in range(i + 1) if store.item(A, f"i{j}") is not None]
        assert store.bytes <= max_bytes
        assert kept == [f"r{j}" for j in range(i + 1 - len(kept), i + 1)]  # the newest ones


def test_items_by_id_newest_first_and_reasoning_not_kept():
    store = ResponseStore()
    store.put(A, response("a"), [{"id": "x", "v": 1}])
    store.put(A, response("b"), [{"id": "x", "v": 2}, {"type": "reasoning", "id": "rs", "summary": "s" * 999}])
    assert store.item(A, "x") == {"id": "x", "v": 2} and store.item(A, "nope") is None
    assert store.item(A, "rs") == {}  # known: a reference to it resolves to nothing
    assert all("reasoning" not in t for t in store.get(A, "b").items)


def test_a_chain_shares_its_items_and_counts_resident_memory():
    """200 turns of 10 items each: the items are stored once (later turns share the
    strings), and the counted bytes bound what the store really holds (tracemalloc)."""
    store = ResponseStore(max_bytes=1 << 40)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    earlier = None
    for t in range(200):
        items = [{"id": f"m{t}_{i}", "type": "message", "content": "word " * 20} for i in range(10)]
        store.put(A, response(f"r{t}", "ok"), items, earlier)
        earlier = store.get(A, f"r{t}")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    last = store.get(A, "r199")
    assert len(last.items) == 2000 and last.items[0] is store.get(A, "r0").items[0]  # shared
    assert last.history()[0] == {"id": "m0_0", "type": "message", "content": "word " * 20}
    assert held <= store.bytes  # the cap counts at least the real memory
    assert held >= sys.getsizeof("word " * 20) * 2000  # and the test measured something
