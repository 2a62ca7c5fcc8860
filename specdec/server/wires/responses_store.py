"""The Responses API's store: the stored responses behind ``previous_response_id``,
``item_reference``, GET and DELETE, one partition per API key (tenant), each an LRU bounded
in count and in bytes of resident memory.

Invariants: a tenant sees only its own partition (another key's id is the same 404 as an
unknown one); responses and items are kept as JSON text (immutable ``str``: a later turn
shares its earlier turns' items instead of copying them, and ``sys.getsizeof`` of each is
its real size); ``size`` counts every item a response's conversation holds (shared ones
again: an upper bound on what evicting it frees); an item is found by id through an index
(O(1), never a scan); reasoning items are not kept (no prompt replays them) but their ids
stay known. Tests: tests/server/test_responses_store.py.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..http.errors import APIError

MAX_STORED = 1000  # responses kept per API key for previous_response_id / GET
MAX_STORED_BYTES = 64 << 20  # and their resident bytes per key: agent chains grow quadratically
INDEX_ENTRY_BYTES = 200  # a dict slot, its key string and the (rid, text) tuple, about
ITEM_OVERHEAD = 24  # per stored item beyond sys.getsizeof: its tuple slot and allocator rounding
RESPONSE_OVERHEAD = 1024  # a Stored, its OrderedDict slot and its id string
DROPPED = ""  # an indexed item kept out of prompts (reasoning): known, resolves to nothing


@dataclass(frozen=True)
class Stored:
    response: str  # the response object's JSON text
    items: tuple[str, ...]  # the conversation's items (earlier turns', input, output) as JSON
    own: tuple[str, ...]  # the ids this response put in the index
    size: int  # resident bytes counted for it (its items' strings, shared ones too)
    items_bytes: int  # of which its items' strings

    def history(self) -> list[dict[str, Any]]:
        """The conversation as fresh item dicts (one parse: no deep copy of stored objects)."""
        return json.loads("[" + ",".join(self.items) + "]")


@dataclass
class Partition:
    """One tenant's stored responses and its item index."""

    data: OrderedDict[str, Stored] = field(default_factory=OrderedDict)
    index: dict[str, tuple[str, str]] = field(default_factory=dict)  # item id -> (rid, text)
    bytes: int = 0

    def drop(self, rid: str) -> None:
        stored = self.data.pop(rid)
        self.bytes -= stored.size
        for item_id in stored.own:
            if self.index.get(item_id, ("",))[0] == rid:  # not since re-put by a later one
                del self.index[item_id]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _not_found(rid: str, param: str | None, max_items: int) -> APIError:
    return APIError(404, f"No response with id {rid!r} is stored here: it was never stored "
                    "(store: false), was deleted, or was evicted (this server keeps the last "
                    f"{max_items} per API key, in memory, until it restarts). Send the whole "
                    "conversation as input instead.", param=param, code="response_not_found")


class ResponseStore:
    """Per-tenant LRUs of responses, each bounded in count and in resident bytes."""

    def __init__(self, max_items: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES):
        self.max_items, self.max_bytes = max_items, max_bytes
        self._parts: dict[str, Partition] = {}

    @property
    def bytes(self) -> int:
        """Resident bytes counted over every tenant."""
        return sum(p.bytes for p in self._parts.values())

    def put(self, tenant: str, response: dict[str, Any], new_items: list[dict[str, Any]],
            earlier: Stored | None = None) -> None:
        """Keep ``response`` for ``tenant``: its conversation is ``earlier``'s items (shared)
        followed by ``new_items`` (this turn's input and output; reasoning items left out)."""
        part = self._parts.setdefault(tenant, Partition())
        rid, text = response["id"], _dumps(response)
        texts = [DROPPED if item.get("type") == "reasoning" else _dumps(item) for item in new_items]
        kept = tuple(t for t in texts if t)
        items = (earlier.items if earlier is not None else ()) + kept
        items_bytes = (earlier.items_bytes if earlier is not None else 0) + \
            sum(map(sys.getsizeof, kept)) + ITEM_OVERHEAD * len(kept)
        own = [(item["id"], t) for item, t in zip(new_items, texts) if isinstance(item.get("id"), str)]
        size = (sys.getsizeof(text) + sys.getsizeof(items) + items_bytes
                + INDEX_ENTRY_BYTES * len(own) + RESPONSE_OVERHEAD)
        if rid in part.data:
            part.drop(rid)
        part.data[rid] = Stored(text, items, tuple(i for i, _ in own), size, items_bytes)
        part.bytes += size
        for item_id, t in own:  # the index shares the items' strings
            part.index[item_id] = (rid, t)
        while part.data and (len(part.data) > self.max_items or part.bytes > self.max_bytes):
            part.drop(next(iter(part.data)))

    def get(self, tenant: str, rid: str, param: str | None = None) -> Stored:
        part = self._parts.get(tenant)
        if part is None or rid not in part.data:
            raise _not_found(rid, param, self.max_items)
        part.data.move_to_end(rid)
        return part.data[rid]

    def delete(self, tenant: str, rid: str) -> None:
        self.get(tenant, rid)
        self._parts[tenant].drop(rid)

    def item(self, tenant: str, item_id: str) -> dict[str, Any] | None:
        """An input or output item of one of ``tenant``'s stored responses, by its ``id``
        (an index lookup); ``{}`` for a reasoning item (known, never replayed); None if
        none is stored."""
        part = self._parts.get(tenant)
        hit = part.index.get(item_id) if part is not None and isinstance(item_id, str) else None
        if hit is None:
            return None
        return json.loads(hit[1]) if hit[1] else {}
