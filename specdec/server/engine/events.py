"""What travels between the asyncio side and the inference thread.

Contract: a ``GenRequest`` is one validated generation; a ``Job`` carries it through the
``JobQueue`` (bounded, FIFO, a waiting job can be withdrawn) to the inference thread, and
its events back to its asyncio side in order through ``Job.events``: one ``TokenEvent``
per generated token, then a ``DoneEvent`` (finish reason, usage, timings) or an
``ErrorEvent``. ``Job.emit`` is safe from any thread; inside ``coalesced()`` (the batcher's
round) a thread's events wait for the block's end and go in one wake of each event loop.
Tests: tests/server/test_events.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

from ...decode.generation import Generation
from ..http.errors import APIError

MAX_PENDING_EVENTS = 2048  # tokens a reader may fall behind before its job is cancelled


@dataclass(frozen=True)
class GenRequest:
    """One validated generation for the worker: its prompt, the ``Generation`` (passed
    unchanged to the row) and whose it is."""

    prompt_ids: list[int]
    gen: Generation
    tenant: str = ""  # whose request (an API key's tenant; "" with one key or none)
    cache_salt: str | None = None  # a further partition of the tenant's prefix cache
    store: bool = True  # False: its text stays out of the shared memory

    @property
    def reserved(self) -> int:
        """Tokens its row may grow to (the KV budget's reservation): prompt and max_tokens."""
        return len(self.prompt_ids) + self.gen.max_tokens

    @property
    def scope(self) -> str:
        """The prefix-cache partition this request reads and writes."""
        return f"{self.tenant}\x00{self.cache_salt or ''}"


@dataclass
class TokenEvent:
    text: str
    token: int
    logprob: float | None = None
    token_text: str | None = None  # only when logprobs were asked for
    top: list[tuple[str, float]] | None = None


@dataclass
class DoneEvent:
    finish_reason: str  # "stop", "length" or "cancelled"
    text: str = ""  # text the detokenizer or stop matcher held back until the end
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)


# what --decoder wedlm adds to a request's usage (``decode.wedlm.WedlmStats.as_dict``, less
# its token count): every API's answer reports them where its wire has room for usage fields
DECODER_STATS = ("decoder", "forwards", "tokens_per_forward", "commits_per_step", "p_cache",
                 "lossless")


def decoder_stats(usage: dict[str, Any]) -> dict[str, Any]:
    """The decoder's own stats in an OpenAI ``usage`` (none for speculative decoding)."""
    return {k: usage[k] for k in DECODER_STATS if k in usage}


@dataclass
class ErrorEvent:
    error: APIError


Event = TokenEvent | DoneEvent | ErrorEvent  # what a job emits, in order


class Job:
    """One request on its way through the worker; events go to ``self.events``."""

    def __init__(self, request: GenRequest, loop: asyncio.AbstractEventLoop):
        self.request, self.loop = request, loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.state = "queued"  # -> running -> finished | cancelled
        self.submitted = time.perf_counter()

    def emit(self, event: Event) -> None:
        pending = getattr(_held, "events", None)
        if pending is not None:  # inside ``coalesced``: sent with the rest at its end
            pending.append((self, event))
            return
        _send(self.loop, [(self, event)])

    def _put(self, event: Event) -> None:
        """On the event loop. A reader this far behind has stopped reading (a stalled SSE
        client): its job is cancelled, which frees its batch slot, and nothing more is
        kept for it (the queue stays bounded)."""
        if isinstance(event, TokenEvent) and self.events.qsize() >= MAX_PENDING_EVENTS:
            self.cancelled.set()
            return
        self.events.put_nowait(event)


_held = threading.local()  # ``events``: what ``coalesced`` holds on this thread (None: none)


@contextlib.contextmanager
def coalesced() -> Iterator[None]:
    """Every ``Job.emit`` on this thread inside the block is held and sent at its end, in
    order, with one ``call_soon_threadsafe`` per event loop. Why: the batcher emits a token
    per row each step, and each call wakes the loop through its self-pipe (32 writes and
    wakes a step at 32 rows); one per step does the same work. Held per thread, so a
    job's done or error event never overtakes its tokens. Nested blocks send at the outer end."""
    if getattr(_held, "events", None) is not None:
        yield
        return
    _held.events = []
    try:
        yield
    finally:
        pending, _held.events = _held.events, None
        loops: dict[asyncio.AbstractEventLoop, list[tuple[Job, Event]]] = {}
        for job, event in pending:
            loops.setdefault(job.loop, []).append((job, event))
        for loop, events in loops.items():
            _send(loop, events)


def _send(loop: asyncio.AbstractEventLoop, events: list[tuple[Job, Event]]) -> None:
    """Queue ``events`` on ``loop`` in one callback (from any thread)."""
    try:  # from the worker thread: asyncio queues are not thread-safe
        loop.call_soon_threadsafe(_put_all, events)
    except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
        pass


def _put_all(events: list[tuple[Job, Event]]) -> None:
    for job, event in events:
        job._put(event)


class JobQueue:
    """A bounded FIFO whose waiting jobs can be withdrawn (a client that leaves while
    queued frees its place at once, which ``queue.Queue`` cannot do)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()

    def __len__(self) -> int:
        return len(self._jobs)

    def put_nowait(self, job: Job) -> bool:
        with self._cv:
            if len(self._jobs) >= self.maxsize:
                return False
            self._jobs.append(job)
            self._cv.notify()
            return True

    def get(self, timeout: float) -> Job | None:
        with self._cv:
            if not self._jobs:
                self._cv.wait(timeout)
            return self._jobs.popleft() if self._jobs else None

    def remove(self, job: Job) -> bool:
        with self._cv:
            try:
                self._jobs.remove(job)
                return True
            except ValueError:
                return False

    def drain(self) -> list[Job]:
        with self._cv:
            jobs, self._jobs = list(self._jobs), deque()
            self._cv.notify_all()
            return jobs

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()


class NoTokens(Exception):
    """The request ended before its first token: ``event`` says how."""

    def __init__(self, event: ErrorEvent | DoneEvent):
        super().__init__(getattr(event, "finish_reason", "error"))
        self.event = event
