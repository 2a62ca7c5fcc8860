"""The Responses API's store: the stored responses behind ``previous_response_id``,
``item_reference``, GET and DELETE, an LRU bounded in count and in total JSON bytes.
Tests: tests/server/test_openai_responses_store.py.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .errors import APIError

MAX_STORED = 1000  # responses kept for previous_response_id / GET
MAX_STORED_BYTES = 64 << 20  # and their total JSON size: long agent chains grow quadratically


@dataclass
class Stored:
    response: dict[str, Any]
    items: list[dict[str, Any]]  # the whole conversation: earlier turns, input, output
    size: int


class ResponseStore:
    """An LRU of responses, bounded in count and in total JSON bytes."""

    def __init__(self, max_items: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES):
        self.max_items, self.max_bytes, self.bytes = max_items, max_bytes, 0
        self._data: OrderedDict[str, Stored] = OrderedDict()

    def put(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        size = len(json.dumps(response)) + len(json.dumps(items))
        self._data[response["id"]] = Stored(response, items, size)
        self.bytes += size
        while self._data and (len(self._data) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self._data.popitem(last=False)[1].size

    def get(self, rid: str, param: str | None = None) -> Stored:
        if rid not in self._data:
            raise APIError(404, f"No response with id {rid!r} is stored here: it was never "
                           "stored (store: false), was deleted, or was evicted (this server "
                           f"keeps the last {self.max_items}, in memory, until it restarts). "
                           "Send the whole conversation as input instead.", param=param,
                           code="response_not_found")
        self._data.move_to_end(rid)
        return self._data[rid]

    def delete(self, rid: str) -> None:
        self.bytes -= self.get(rid).size
        del self._data[rid]

    def item(self, item_id: str) -> dict[str, Any] | None:
        """An input or output item of a stored response, by its ``id``."""
        for stored in reversed(self._data.values()):
            for it in stored.items:
                if it.get("id") == item_id:
                    return it
        return None

