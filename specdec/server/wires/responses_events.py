"""The Responses API's answer: chat chunks folded into output items, either whole or as
typed SSE events (``Folder``; ``sequence_number`` counts from 0, every item opened is
closed before the next). Tests: tests/server/test_responses_events.py.
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from ..http.errors import APIError
from .responses_input import ResponsesRequest, ToolMap


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def skeleton(req: ResponsesRequest, model: str, tools: ToolMap) -> dict[str, Any]:
    """The response object before its output: the request's settings echoed."""
    out = {"id": _id("resp_"), "object": "response", "created_at": int(time.time()),
           "status": "in_progress", "background": False, "error": None,
           "incomplete_details": None, "instructions": req.instructions,
           "max_output_tokens": req.max_output_tokens, "model": model, "output": [],
           "parallel_tool_calls": req.parallel_tool_calls is not False,
           "previous_response_id": req.previous_response_id,
           "reasoning": req.reasoning or {"effort": None, "summary": None},
           "store": req.store, "temperature": req.temperature, "top_p": req.top_p,
           "text": req.text or {"format": {"type": "text"}},
           "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
           "truncation": "disabled", "usage": None, "metadata": req.metadata or {}}
    if tools.dropped:
        out["dropped_tools"] = tools.dropped  # extension: hosted tools not offered to the model
    return out


class Folder:
    """Folds chat chunks into the response's output items, as Responses stream events
    (``sequence_number`` counting from 0); ``response`` is the whole answer at the end."""

    def __init__(self, response: dict[str, Any], spaces: dict[str, tuple[str, str]]):
        self.response, self.spaces, self.seq = response, spaces, 0
        self.open: dict[str, Any] | None = None  # the output item being written
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.response["output"].index(item)}

    def start(self) -> list[dict[str, Any]]:
        snap = copy.deepcopy(self.response)
        return [self._event("response.created", response=snap),
                self._event("response.in_progress", response=snap)]

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close("completed")
        self.response["output"].append(item)
        self.open = item
        out.append(self._event("response.output_item.added", output_index=len(
            self.response["output"]) - 1, item=copy.deepcopy(item)))
        part: dict[str, tuple[str, dict[str, Any]]] = {
            "message": ("content_part", {"type": "output_text", "text": "", "annotations": []}),
                "reasoning": ("reasoning_summary_part", {"type": "summary_text", "text": ""})}
        if item["type"] in part:
            name, first = part[item["type"]]
            index = {"content_index": 0} if name == "content_part" else {"summary_index": 0}
            out.append(self._event(f"response.{name}.added", **self._where(item), **index,
                                   part=dict(first)))
            item["content" if name == "content_part" else "summary"].append(first)
        return out

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self.open = self.open, None
        if item is None:
            return []
        where, out = self._where(item), []
        if item["type"] == "message":
            part = item["content"][0]
            out += [self._event("response.output_text.done", **where, content_index=0,
                                text=part["text"], logprobs=[]),
                    self._event("response.content_part.done", **where, content_index=0, part=part)]
        elif item["type"] == "reasoning":
            part = item["summary"][0]
            out += [self._event("response.reasoning_summary_text.done", **where, summary_index=0,
                                text=part["text"]),
                    self._event("response.reasoning_summary_part.done", **where, summary_index=0,
                                part=part)]
        else:
            out.append(self._event("response.function_call_arguments.done", **where,
                                   name=item["name"], arguments=item["arguments"]))
        item["status"] = status
        return out + [self._event("response.output_item.done", output_index=where["output_index"],
                                  item=copy.deepcopy(item))]

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.open is None or self.open["type"] != kind:
            item: dict[str, Any] = {"type": kind, "id": _id("msg_" if kind == "message" else "rs_"),
                                    "status": "in_progress"}
            item.update({"role": "assistant", "content": []} if kind == "message" else {"summary": []})
            out = self._add(item)
        open_ = self.open  # this kind's item (``_add`` opened it if none was)
        if open_ is None:
            raise RuntimeError("no output item is open to add text to")
        part = open_["content" if kind == "message" else "summary"][0]
        part["text"] += delta
        if kind == "message":
            return out + [self._event("response.output_text.delta", **self._where(open_),
                                      content_index=0, delta=delta, logprobs=[])]
        return out + [self._event("response.reasoning_summary_text.delta",
                                  **self._where(open_), summary_index=0, delta=delta)]

    def _call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        out, item = [], self.calls.get(delta.get("index", 0))
        if item is None:
            flat = delta["function"]["name"]
            ns, name = self.spaces.get(flat, (None, flat))
            item = {"type": "function_call", "id": _id("fc_"), "call_id": delta["id"],
                    "name": name, "arguments": "", "status": "in_progress"}
            if ns:
                item["namespace"] = ns
            self.calls[delta.get("index", 0)] = item
            out = self._add(item)
        piece = (delta.get("function") or {}).get("arguments") or ""
        if piece:
            item["arguments"] += piece
            out.append(self._event("response.function_call_arguments.delta",
                                   **self._where(item), delta=piece))
        return out

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if chunk.get("usage") is not None:
            self.response["usage"] = usage(chunk["usage"])
        if "specdec" in chunk:
            self.response["specdec"] = chunk["specdec"]  # extension: the request's timings
        out = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._text("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text("message", delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            self.finish = choice.get("finish_reason") or self.finish
        return out

    def end(self) -> list[dict[str, Any]]:
        cut = self.finish == "length"
        out = self._close("incomplete" if cut else "completed")
        self.response["status"] = "incomplete" if cut else "completed"
        if cut:
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.response["completed_at"] = int(time.time())
        kind = "response.incomplete" if cut else "response.completed"
        return out + [self._event(kind, response=self.response)]

    def fail(self, err: APIError) -> list[dict[str, Any]]:
        self.response["status"] = "failed"
        self.response["error"] = {"code": "server_error", "message": err.message}
        return [self._event("response.failed", response=self.response)]


def usage(chat: dict[str, Any]) -> dict[str, Any]:
    cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": chat["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": chat["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat["prompt_tokens"] + chat["completion_tokens"]}
