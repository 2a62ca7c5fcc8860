"""Ollama's answers: OpenAI chunks translated into Ollama's pieces (``Translator``), sent
as NDJSON lines or one object. Tool calls go out whole, with object arguments, once their
JSON is complete; durations come in ns from the server's own timings.
Tests: tests/server/test_ollama_stream.py.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..http.errors import APIError
from ..engine.events import decoder_stats
from .ollama_models import now

log = logging.getLogger("specdec.server")


def _ns(seconds: float) -> int:
    return max(int(seconds * 1e9), 0)


@dataclass
class Piece:
    """What one chunk adds to the answer, in Ollama's terms."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.thinking or self.tool_calls or self.logprobs)

    def add(self, other: Piece) -> None:
        self.content += other.content
        self.thinking += other.thinking
        self.tool_calls += other.tool_calls
        self.logprobs += other.logprobs


@dataclass
class _Call:
    id: str
    name: str
    arguments: str = ""
    sent: bool = False


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _lp_item(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def _logprobs(lp: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Chat (``content``) or completions (``tokens``) log-probabilities as Ollama's list."""
    if not lp:
        return []
    if "content" in lp:
        return [{**_lp_item(e["token"], e["logprob"]), "top_logprobs": [
            _lp_item(t["token"], t["logprob"]) for t in e.get("top_logprobs") or []]}
            for e in lp["content"] or []]
    tops = lp.get("top_logprobs") or [{}] * len(lp["tokens"])
    return [{**_lp_item(t, p), "top_logprobs": [_lp_item(k, v) for k, v in top.items()]}
            for t, p, top in zip(lp["tokens"], lp["token_logprobs"], tops)]


class Translator:
    """OpenAI chunks in, ``Piece``s out; keeps the finish reason, usage and timings."""

    def __init__(self) -> None:
        self.calls: dict[int, _Call] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.first_token_at: float | None = None

    def feed(self, chunk: dict[str, Any]) -> Piece:
        self.usage = chunk.get("usage") or self.usage
        self.timings = chunk.get("specdec") or self.timings
        piece = Piece()
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece.content += delta.get("content") or choice.get("text") or ""
            piece.thinking += delta.get("reasoning_content") or ""
            for d in delta.get("tool_calls") or []:
                call = self.calls.setdefault(d["index"], _Call(d.get("id") or "", ""))
                fn = d.get("function") or {}
                call.name += fn.get("name") or ""
                call.arguments += fn.get("arguments") or ""
            piece.logprobs += _logprobs(choice.get("logprobs"))
            self.finish = choice.get("finish_reason") or self.finish
        piece.tool_calls = self._whole_calls()
        if piece and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        return piece

    def _whole_calls(self) -> list[dict[str, Any]]:
        """Calls not sent yet whose arguments are complete (all of them at the end):
        Ollama sends each call whole, with its arguments as an object."""
        out = []
        for index in sorted(self.calls):
            call = self.calls[index]
            args = _arguments(call.arguments) if call.arguments else None  # "": the head
            if call.sent or (args is None and self.finish is None):
                continue
            call.sent = True
            out.append({"id": call.id, "function": {"index": index, "name": call.name,
                                                    "arguments": args if args is not None else {}}})
            if args is None and call.arguments:
                log.warning("tool call %s: arguments are not a JSON object: %r", call.name,
                            call.arguments)
        return out

    def done(self, started: float) -> dict[str, Any]:
        """Ollama's closing fields; durations in ns, from the server's own timings; plus
        --decoder wedlm's stats as extra fields (as in OpenAI's usage)."""
        u, t, end = self.usage, self.timings, time.perf_counter()
        n_out, rate = u.get("completion_tokens", 0), t.get("decode_tokens_per_s") or 0
        decode = n_out / rate if rate else (end - self.first_token_at if self.first_token_at else 0)
        return {"done": True, "done_reason": "length" if self.finish == "length" else "stop",
                "total_duration": _ns(end - started), "load_duration": 0,  # loaded at start
                "prompt_eval_count": u.get("prompt_tokens", 0),
                "prompt_eval_duration": _ns(t.get("prefill_s", 0)),
                "eval_count": n_out, "eval_duration": _ns(decode), **decoder_stats(u)}


def chat_fields(p: Piece) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": p.content}
    if p.thinking:
        msg["thinking"] = p.thinking
    if p.tool_calls:
        msg["tool_calls"] = p.tool_calls
    return {"message": msg, **({"logprobs": p.logprobs} if p.logprobs else {})}


def generate_fields(p: Piece) -> dict[str, Any]:
    out: dict[str, Any] = {"response": p.content}
    if p.thinking:
        out["thinking"] = p.thinking
    return {**out, **({"logprobs": p.logprobs} if p.logprobs else {})}


Shape = Callable[[Piece], dict[str, Any]]


async def ndjson_lines(chunks: AsyncGenerator[dict[str, Any], None], name: str, shape: Shape,
                  started: float) -> AsyncIterator[str]:
    """NDJSON lines; a failure after the first line ends the stream with ``{"error"}``."""
    tr = Translator()
    try:
        async for chunk in chunks:
            piece = tr.feed(chunk)
            if piece:
                yield _line({"model": name, "created_at": now(), **shape(piece), "done": False})
        yield _line({"model": name, "created_at": now(), **shape(Piece()), **tr.done(started)})
    except APIError as e:
        yield _line({"error": e.message})
    finally:
        await chunks.aclose()  # a client gone mid-stream: the job is cancelled


async def whole_answer(chunks: AsyncGenerator[dict[str, Any], None], name: str, shape: Shape, started: float) -> dict:
    tr, whole = Translator(), Piece()
    try:
        async for chunk in chunks:
            whole.add(tr.feed(chunk))
    finally:
        await chunks.aclose()
    return {"model": name, "created_at": now(), **shape(whole), **tr.done(started)}


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"
