"""The engine's front door: one request checked, queued and its events streamed, for every wire.

Contract: ``Api.queue`` takes the one request value, a ``spec.ChatSpec`` (every wire maps its
body to it), and validates it completely before queueing it (model name 404, the queue's 503,
``check_spec``, then ``admission``: the prompt rendered and tokenized once under the worker's
tokenizer lock against the context length and the KV budget, speculation and sampling
options); ``first`` waits for its first event; ``chat`` is the one event stream
(``chat.completion.chunk`` dicts, usage last) every wire (``wires/``) translates. A client
that disconnects, queued or generating, has its job cancelled.
Tests: tests/server/test_api.py, tests/server/test_surfaces.py."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request

from ..config import ServerConfig
from ..http.errors import APIError
from ..http.middleware import TENANT_SCOPE_KEY
from .admission import encode, gen_request
from .events import DoneEvent, ErrorEvent, GenRequest, Job, NoTokens, TokenEvent
from .chunks import Responder
from .reasoning import ReasoningSplitter, TemplateTraits, opens_thinking
from .run import DisconnectWatch, Queued, Run
from .spec import ChatSpec, check_spec
from .tool_calls import ToolPlan, ToolResponder, ToolSupport, plan_tools
from .worker import InferenceWorker

CACHE_SALT_HEADER = "X-Cache-Salt"  # cache_salt for a client that cannot add body fields


class Api:
    """The routes' logic, bound to one worker (kept out of closures so it reads top-down)."""

    def __init__(self, cfg: ServerConfig, worker: InferenceWorker):
        self.cfg, self.worker = cfg, worker
        with worker.tokenizer_lock:  # the template's tool support, found once (two renders)
            self.tools = ToolSupport.of(worker.tokenizer, cfg.tool_call_parser)

    def check_model(self, name: str) -> None:
        """404 unless ``name`` is the served model's id or matches one of its aliases
        (``--model-alias``, shell-style patterns such as ``claude-*``)."""
        if not self.cfg.serves(name):
            raise APIError(404, f"The model {name!r} does not exist here; this server serves "
                           f"{self.cfg.model_id!r} (GET /v1/models).", param="model",
                           code="model_not_found")

    def tool_plan(self, spec: ChatSpec) -> ToolPlan | None:
        """What the request's tools change (``tool_calls``); None for most requests."""
        return plan_tools(spec, self.tools, self.cfg.model_id) if spec.chat else None

    async def prompt_ids(self, spec: ChatSpec, tools: list[dict] | None = None) -> list[int]:
        """``spec``'s prompt rendered and tokenized (under the tokenizer lock, off the loop)."""
        return await encode(self.worker, spec, tools)

    # -- the chat template's traits: reasoning models -------------------------------------

    @functools.cached_property
    def traits(self) -> TemplateTraits:
        with self.worker.tokenizer_lock:
            return TemplateTraits.of(self.worker.tokenizer)

    def reasoning(self, gen: GenRequest) -> ReasoningSplitter | None:
        """A think template's splitter for one chat answer (None: the text as it is)."""
        if not self.traits.think:
            return None
        with self.worker.tokenizer_lock:  # a prompt that opens the block: R1's templates
            tail = self.worker.tokenizer.decode(gen.prompt_ids[-16:])
        return ReasoningSplitter(thinking=opens_thinking(tail))

    async def queue(self, request: Request, spec: ChatSpec) -> Queued:
        """Validate ``spec`` completely (rendered and tokenized here, once) and queue it.
        ``spec.fit``: ``max_tokens`` is a ceiling clamped to the room the prompt leaves
        (Anthropic's clients always send one), not a demand refused when it does not fit."""
        self.check_model(spec.model)
        check_spec(spec)
        spec = with_header_salt(request, spec)
        self.worker.check_room()  # a full queue refuses before tokenizing or compiling
        tools = self.tool_plan(spec)
        # set by the key check: which API key's tenant sent it ("" with one key or none)
        gen = await gen_request(self.cfg, self.worker, spec, tools, request.scope.get(TENANT_SCOPE_KEY, ""))
        job = Job(gen, asyncio.get_running_loop())
        self.worker.submit(job)
        watch = DisconnectWatch(request.receive, lambda: self.worker.cancel(job))
        chat = spec.chat
        reasoning = self.reasoning(gen) if chat else None
        out = gen.gen  # what the answer reports: logprobs, top_logprobs
        responder = (ToolResponder(self.cfg.model_id, out.logprobs, out.top_logprobs, tools, reasoning=reasoning)
                     if tools is not None and tools.format is not None else
                     Responder(chat, self.cfg.model_id, out.logprobs, out.top_logprobs, reasoning=reasoning))
        return Queued(job, responder, watch, len(gen.prompt_ids))

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

    async def count(self, spec: ChatSpec) -> int:
        """The prompt tokens ``spec`` renders to (a token-count route's answer)."""
        check_spec(spec)
        plan = self.tool_plan(spec)
        return len(await self.prompt_ids(spec, plan.template_tools if plan else None))

    async def chat(self, request: Request, spec: ChatSpec,
                   queued: Queued | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """The one event stream every other surface translates: ``spec`` (mapped from that
        surface's request) run as a streamed chat completion, its chunks in OpenAI's
        ``chat.completion.chunk`` shape (a text completion's carry ``choices[0].text``),
        the last one carrying ``usage``. Raises
        ``APIError`` for a request refused before its first token, and from the iterator
        for one that fails after; a client gone before its first token raises
        ``NoTokens``. ``queued``: a request ``queue`` took already (a wire that needs its
        prompt size before the first token). Tests: tests/server/test_surfaces.py."""
        try:
            run = await self.first(queued or await self.queue(request, spec))
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


def with_header_salt(request: Request, spec: ChatSpec) -> ChatSpec:
    """``spec`` with the ``X-Cache-Salt`` header as its ``cache_salt`` (for clients that
    cannot add body fields: Claude Code, Codex, Ollama's); the body field wins."""
    salt = request.headers.get(CACHE_SALT_HEADER)
    if salt is None or spec.cache_salt is not None:
        return spec
    if not 1 <= len(salt) <= 256:
        raise APIError(400, f"the {CACHE_SALT_HEADER} header takes 1 to 256 characters",
                       param=CACHE_SALT_HEADER)
    return dataclasses.replace(spec, cache_salt=salt)
