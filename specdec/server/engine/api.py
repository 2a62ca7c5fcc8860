"""The engine's front door: one request checked and queued (``admission.Admission``, the
front half) and its events streamed, for every wire.

Contract: a wire hands its request value, a ``spec.ChatSpec``, to ``Api.queue`` (defined in
``admission``: validated completely, then queued) and reads the queued request through
``first`` (its first event) or ``chat``, the one event stream (``chat.completion.chunk``
dicts, usage last) every wire (``wires/``) translates; the spec itself never comes here. A
client that disconnects, queued or generating, has its job cancelled.
Tests: tests/server/test_api.py, tests/server/test_surfaces.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from .admission import Admission
from .events import DoneEvent, ErrorEvent, NoTokens, TokenEvent
from .run import Queued, Run


class Api(Admission):
    """The routes' logic, bound to one worker: ``queue`` and ``count`` (``Admission``), then
    a queued request's events (kept out of closures so it reads top-down)."""

    async def first(self, queued: Queued) -> Run:
        """Wait for a queued request's first event. Raises ``NoTokens`` when the request
        ends before its first token (an error, or the client left)."""
        try:
            first = await queued.job.events.get()
        except BaseException:
            queued.watch.stop()
            self.worker.cancel(queued.job)
            raise
        if isinstance(first, ErrorEvent) or (isinstance(first, DoneEvent) and first.finish_reason == "cancelled"):
            queued.watch.stop()
            raise NoTokens(first)
        return Run(queued.job, queued.responder, first, queued.watch, queued.prompt_tokens)

    async def chat(self, queued: Queued) -> AsyncGenerator[dict[str, Any], None]:
        """The one event stream every other surface translates: a request ``queue`` took
        (mapped from that surface's body) run as a streamed chat completion, its chunks in
        OpenAI's ``chat.completion.chunk`` shape (a text completion's carry
        ``choices[0].text``), the last one carrying ``usage``. Raises ``APIError`` for a
        request refused before its first token, and from the iterator for one that fails
        after; a client gone before its first token raises ``NoTokens``.
        Tests: tests/server/test_surfaces.py."""
        try:
            run = await self.first(queued)
        except NoTokens as e:
            if isinstance(e.event, ErrorEvent):
                raise e.event.error from None
            raise
        return self.chunks(run, include_usage=True)

    async def chunks(self, run: Run, include_usage: bool) -> AsyncGenerator[dict[str, Any], None]:
        """A started request's chunks; an error after the first token raises its
        ``APIError`` here. Leaving early (the client went away) cancels the job."""
        responder, event = run.responder, run.first
        try:
            opening = responder.first_chunk()
            if opening is not None:
                yield opening
            while isinstance(event, TokenEvent):
                for chunk in responder.token_chunks(event):
                    yield chunk
                event = await run.job.events.get()
            if isinstance(event, ErrorEvent):
                raise event.error
            if event.finish_reason != "cancelled":
                for chunk in responder.final_chunks(event):
                    yield chunk
                if include_usage:
                    yield responder.usage_chunk(event)
        finally:
            run.watch.stop()
            self.worker.cancel(run.job)  # the client left mid-stream (a no-op when finished)
