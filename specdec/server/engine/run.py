"""A request between the queue and its reader: the disconnect watch, a queued request
and a started one (its first event in hand).

Contract: ``DisconnectWatch`` cancels a job whose client went away, queued or generating;
``Queued`` and ``Run`` carry a request's job, its ``Responder`` and its prompt size from
``Api.queue`` (``admission``) and ``api.Api.first`` to the wire reading it. Tests: tests/server/test_api.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from .chunks import Responder
from .events import DoneEvent, Job, TokenEvent


class DisconnectWatch:
    """Calls ``on_disconnect`` when the client goes away (a queued request sends nothing,
    so waiting for a failed write would never notice)."""

    def __init__(self, receive: Callable, on_disconnect: Callable[[], None]):
        self._task = asyncio.create_task(self._watch(receive, on_disconnect))

    @staticmethod
    async def _watch(receive: Callable, on_disconnect: Callable[[], None]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        on_disconnect()

    def stop(self) -> None:
        self._task.cancel()


@dataclass
class Queued:
    """A request validated and queued: its job, how its events are rendered, its size."""

    job: Job
    responder: Responder
    watch: DisconnectWatch
    prompt_tokens: int


@dataclass
class Run:
    """A request the worker has started: its job, how its events are rendered, and the
    first event (a token, or the end of a request that produced none)."""

    job: Job
    responder: Responder
    first: TokenEvent | DoneEvent
    watch: DisconnectWatch
    prompt_tokens: int
