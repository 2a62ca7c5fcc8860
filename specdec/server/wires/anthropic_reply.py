"""Anthropic's Messages reply folded from the engine's chat chunks: content blocks
(thinking, text, tool_use) streamed as Anthropic's SSE events (``stream``: headers, pings
while a long prefill runs, then the blocks) or gathered as one message (``whole``).

Contract: one block per run of one kind; a tool call opens a ``tool_use`` block whose input
streams as ``input_json_delta``; the stop reason maps OpenAI's finish reason, and a stop
string that ended the reply is named; usage splits cached input tokens, plus
--decoder wedlm's stats as on OpenAI's. Tests: tests/server/test_anthropic.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..engine.events import NoTokens, decoder_stats
from ..http.errors import APIError, internal_error, surface_body

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


@dataclass
class OutBlock:
    kind: str  # "thinking", "text" or "tool_use"
    text: str = ""  # the thought, the text, or the tool input's JSON
    id: str = ""
    name: str = ""

    def start(self) -> dict[str, Any]:
        if self.kind == "tool_use":
            return {"type": "tool_use", "id": self.id, "name": self.name, "input": {}}
        return {"type": "thinking", "thinking": "", "signature": ""} if self.kind == "thinking" \
            else {"type": "text", "text": ""}

    def whole(self) -> dict[str, Any]:
        if self.kind != "tool_use":
            return {**self.start(), self.kind: self.text}
        try:
            args = json.loads(self.text or "{}")
        except ValueError:
            args = {}
        return {**self.start(), "input": args if isinstance(args, dict) else {}}


Event = tuple[str, dict[str, Any]]
DELTAS = {"thinking": ("thinking_delta", "thinking"), "text": ("text_delta", "text"),
          "tool_use": ("input_json_delta", "partial_json")}


@dataclass
class Blocks:
    """Chat chunks in, Anthropic events out (the whole message is folded from them)."""

    stops: list[str] | None
    blocks: list[OutBlock] = field(default_factory=list)
    open: bool = False
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)  # each token's text (with stops only)

    def _add(self, kind: str, piece: str, **head: str) -> list[Event]:
        out: list[Event] = []
        if head or not (self.open and self.blocks[-1].kind == kind):
            out += self._close()
            self.blocks.append(OutBlock(kind, **head))
            self.open = True
            out.append(("content_block_start", {"index": len(self.blocks) - 1,
                                                "content_block": self.blocks[-1].start()}))
        if piece:
            self.blocks[-1].text += piece
            kind_, key = DELTAS[kind]
            out.append(("content_block_delta", {"index": len(self.blocks) - 1,
                                                "delta": {"type": kind_, key: piece}}))
        return out

    def _close(self) -> list[Event]:
        if not self.open:
            return []
        self.open = False
        return [("content_block_stop", {"index": len(self.blocks) - 1})]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        self.usage = chunk.get("usage") or self.usage
        out: list[Event] = []
        for choice in chunk.get("choices", []):
            lp = (choice.get("logprobs") or {}).get("content") or []
            self.tokens += [t["token"] for t in lp]
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._add("thinking", delta["reasoning_content"])
            if delta.get("content"):
                out += self._add("text", delta["content"])
            for call in delta.get("tool_calls") or []:
                fn = call.get("function") or {}
                if call.get("id"):
                    out += self._add("tool_use", fn.get("arguments") or "",
                                     id="toolu_" + call["id"].removeprefix("call_"),
                                     name=fn.get("name", ""))
                elif self.open and self.blocks[-1].kind == "tool_use":
                    out += self._add("tool_use", fn.get("arguments") or "")
            self.finish = choice.get("finish_reason") or self.finish
        return out

    def stop_sequence(self) -> str | None:
        """The stop string that ended the reply: the chat path cuts it from the text, but
        the tokens' own texts still hold it (an EOS reply never contains one: the stop
        matcher would have ended it there)."""
        if self.finish != "stop" or not self.stops:
            return None
        text = "".join(self.tokens)
        hits = [(text.find(s), i) for i, s in enumerate(self.stops) if s in text]
        return self.stops[min(hits)[1]] if hits else None

    def stop_reason(self) -> str:
        if self.stop_sequence():
            return "stop_sequence"
        return STOP_REASONS.get(self.finish or "", "end_turn")

    def usage_json(self) -> dict[str, Any]:
        """Anthropic's usage, plus --decoder wedlm's stats as extra fields (as on OpenAI's)."""
        cached = (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return {"input_tokens": self.usage.get("prompt_tokens", 0) - cached,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
                "output_tokens": self.usage.get("completion_tokens", 0), **decoder_stats(self.usage)}

    def end(self) -> list[Event]:
        delta = {"stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence()}
        return self._close() + [("message_delta", {"delta": delta, "usage": self.usage_json()}),
                                ("message_stop", {})]


def message(msg_id: str, model: str, content: list[dict[str, Any]], usage: dict[str, Any],
             stop_reason: str | None = None, stop_sequence: str | None = None) -> dict[str, Any]:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage}


HEADERS_AFTER_S = 5.0  # a stream not started by then gets its headers and pings meanwhile
PING_S = 10.0


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


async def whole(chunks: AsyncGenerator[dict[str, Any], None], blocks: Blocks, msg_id: str, model: str) -> dict:
    """A non-streamed request's one message, folded from all its chunks."""
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            blocks.feed(chunk)
    blocks.end()
    return message(msg_id, model, [b.whole() for b in blocks.blocks], blocks.usage_json(),
                    blocks.stop_reason(), blocks.stop_sequence())


async def started(pending: asyncio.Future, wait: float | None) -> bool:
    """Whether ``pending`` (``api.chat`` starting) finished within ``wait`` seconds."""
    done, _ = await asyncio.wait({pending}, timeout=wait)
    return bool(done)


async def stream(pending: asyncio.Future, blocks: Blocks, msg_id: str, model: str,
                 n_prompt: int) -> AsyncIterator[str]:
    """The SSE events of a request started (or starting) in ``pending``: headers and pings
    first, then its blocks; an error after the headers is the stream's error event."""
    usage = {"input_tokens": n_prompt, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": 0}
    yield _sse("message_start", {"message": message(msg_id, model, [], usage)})
    yield _sse("ping", {})
    try:
        while not await started(pending, PING_S):  # a long prefill: keep the stream alive
            yield _sse("ping", {})
        chunks = pending.result()
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                for kind, data in blocks.feed(chunk):
                    yield _sse(kind, data)
        for kind, data in blocks.end():
            yield _sse(kind, data)
    except APIError as e:  # after the headers: the stream's own error event
        yield _sse("error", {"error": surface_body(e, "/v1/messages")["error"]})
    except NoTokens:  # the client left before the first token: nobody reads on
        return
    except Exception as e:  # noqa: BLE001 (a bug: still end the stream in Anthropic's shape)
        err = internal_error(e, "/v1/messages")
        yield _sse("error", {"error": surface_body(err, "/v1/messages")["error"]})
    finally:
        pending.cancel()  # the client left while the request waited (a no-op once started)
