"""The engine's front door: one request checked, queued and its events streamed, for every wire.

Contract: ``Api.queue`` validates a chat or text completion completely before queueing it
(model name 404, the queue's 503, the prompt rendered and tokenized once under the worker's
tokenizer lock against the context length and the KV budget, speculation and sampling
options); ``first`` waits for its first event; ``chat`` is the one event stream
(``chat.completion.chunk`` dicts, usage last) every wire (``wires/``) translates. A client
that disconnects, queued or generating, has its job cancelled.
Tests: tests/server/test_api.py, tests/server/test_surfaces.py."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from ...cache.recurrent import trees_refused
from ...core.grammar import response_grammar
from ...core.sampling import SamplingParams
from ...core.text import encode_prompt
from ...decode.generation import Generation
from ...toolcall.prompt import forced_response_format
from ..config import ServerConfig
from ..http.errors import APIError
from ..http.middleware import TENANT_SCOPE_KEY
from .events import DoneEvent, ErrorEvent, GenRequest, Job, NoTokens, TokenEvent
from .chunks import Responder
from .reasoning import ReasoningSplitter, TemplateTraits, opens_thinking
from .run import DisconnectWatch, Queued, Run
from .schemas import ChatCompletionRequest, CompletionRequest
from .speculative import merge_speculative, refuse_unloaded
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

    def tool_plan(self, body: ChatCompletionRequest | CompletionRequest) -> ToolPlan | None:
        """What the request's tools change (``tool_calls``); None for most requests."""
        if not isinstance(body, ChatCompletionRequest):
            return None
        return plan_tools(body, self.tools, self.cfg.model_id)

    async def prompt_ids(self, body: ChatCompletionRequest | CompletionRequest,
                         tools: list[dict] | None = None) -> list[int]:
        prompt: str | list[int] | list[dict[str, Any]]
        if isinstance(body, ChatCompletionRequest):
            chat, param, prompt = True, "messages", body.chat_messages()
            template = body.template_kwargs(self.traits.thinking_switch)
        else:
            chat, param, template, given = False, "prompt", None, body.prompt
            if isinstance(given, list) and given and isinstance(given[0], int):
                ids = [t for t in given if isinstance(t, int)]
                if bad := [t for t in ids if not 0 <= t < self.worker.vocab_size]:
                    raise APIError(400, f"prompt token ids must lie in [0, {self.worker.vocab_size}); "
                                   f"got {bad[0]}", param=param)
                return ids
            prompt = given if isinstance(given, str) else str(given[0])  # one text in a list

        def encode() -> list[int]:
            with self.worker.tokenizer_lock:
                return encode_prompt(self.worker.tokenizer, prompt, chat=chat,
                                     template_kwargs=template, tools=tools)

        try:
            ids = await run_in_threadpool(encode)
        except ValueError as e:
            raise APIError(400, str(e), param=param) from e
        except Exception as e:  # noqa: BLE001 - a template failing on the client's messages
            raise APIError(400, f"the model's chat template cannot render these {param} "
                           f"({type(e).__name__}: {e}); check the roles, their order and "
                           "the content types", param=param) from e
        if not ids:
            raise APIError(400, f"the {param} encode to no tokens; send some text", param=param)
        return ids

    def room(self, n_prompt: int) -> int:
        """Completion tokens a prompt of ``n_prompt`` leaves: in the context, and in the KV
        budget for one request alone (``kv_budget``)."""
        kv = self.worker.kv
        return min(self.worker.context_length, kv.longest if kv is not None else 1 << 62) - n_prompt

    def max_tokens(self, asked: int | None, n_prompt: int, param: str, fit: bool = False) -> int:
        """The completion's length: ``asked`` (``fit``: at most the room), else to the room;
        a 400 when it does not fit the context or the KV budget."""
        ctx = self.worker.context_length
        room, cap = self.room(n_prompt), self.cfg.max_tokens  # no max_tokens: to EOS or the room
        if fit and asked is not None and room >= 1:
            asked = min(asked, room)
        want = asked if asked is not None else room if cap is None else min(cap, room)
        if n_prompt + max(want, 1) > ctx:
            raise APIError(
                400, f"This model's maximum context length is {ctx} tokens. However, you "
                f"requested {n_prompt + max(want, 1)} tokens ({n_prompt} in the {param}, "
                f"{max(want, 1)} in the completion). Please reduce the length of the {param} "
                "or the completion (max_tokens).", param=param, code="context_length_exceeded")
        want = want if cap is None else min(want, cap)  # --max-tokens bounds every request
        kv, n = self.worker.kv, n_prompt + max(want, 1)
        if kv is not None and n > kv.longest:
            mib = kv.footprint.row_bytes(n) / 2**20
            raise APIError(
                400, f"This request needs the KV cache of {n} tokens ({n_prompt} in the "
                f"{param}, {max(want, 1)} in the completion: {mib:.0f} MiB), more than this "
                f"server's KV budget holds for one request ({kv.longest} tokens, --kv-budget "
                f"{kv.budget / 2**20:.0f} MiB). Lower max_tokens or shorten the {param}.",
                param=param, code="kv_budget_exceeded")
        return want

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

    def token_bias(self, body: ChatCompletionRequest | CompletionRequest) -> dict[int, float]:
        bias = body.token_bias()
        bad = [t for t in bias if t >= self.worker.vocab_size]
        if bad:
            raise APIError(400, f"logit_bias: token id {bad[0]} is not in the vocabulary (ids lie in "
                           f"[0, {self.worker.vocab_size}))", param="logit_bias")
        return bias

    async def gen_request(self, body: ChatCompletionRequest | CompletionRequest,
                          tools: ToolPlan | None = None, tenant: str = "",
                          fit: bool = False) -> GenRequest:
        chat, cfg = body if isinstance(body, ChatCompletionRequest) else None, self.cfg
        ids = await self.prompt_ids(body, tools.template_tools if tools else None)
        max_tokens = self.max_tokens(body.requested_max_tokens(), len(ids),
                                     "messages" if chat is not None else "prompt", fit)
        try:
            spec = merge_speculative(cfg.speculation, body.speculative)
            refuse_unloaded(spec, self.worker)
        except ValueError as e:
            raise APIError(400, str(e), param="speculative") from e
        if spec.draft_tree_budget and self.worker.recurrent:
            raise APIError(400, trees_refused("send speculative.draft_tree_budget 0 (linear drafts)"),
                           param="speculative.draft_tree_budget")
        if spec.draft_tree_budget and self.worker.max_batch > 1:
            raise APIError(400, "token trees (draft_tree_budget) are verified one request at a "
                           "time: this server batches requests (start it with --max-batch 1 "
                           "for trees)", param="speculative.draft_tree_budget")
        logprobs = chat.logprobs if chat is not None else body.logprobs is not None
        top = (chat.top_logprobs or 0) if chat is not None else (body.logprobs or 0)
        sampling = SamplingParams(
            temperature=_or(body.temperature, cfg.temp), top_p=_or(body.top_p, cfg.top_p),
            top_k=_or(body.top_k, cfg.top_k), min_p=_or(body.min_p, cfg.min_p), seed=body.seed,
            repetition_penalty=_or(body.repetition_penalty, 1.0),
            presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
            logit_bias=self.token_bias(body))
        try:
            sampling.validate()
        except ValueError as e:
            raise APIError(400, str(e)) from e
        fmt = chat.response_format.as_dict() if chat is not None and chat.response_format else None
        if tools is not None and tools.forced_schema is not None:
            if fmt is not None:
                raise APIError(400, "tool_choice 'required' or a named function already "
                               "constrains the reply to a tool call: send response_format "
                               "or that tool_choice, not both", param="response_format")
            fmt = forced_response_format(tools.forced_schema)  # the call, grammar-forced
        if fmt is not None:
            try:  # refused here, with its reason, rather than mid-request; off the event loop
                await run_in_threadpool(response_grammar, fmt)
            except ValueError as e:
                raise APIError(400, str(e), param="response_format") from e
        gen = Generation(max_tokens, spec, sampling, tuple(body.stops or ()), kv_bits=cfg.kv_bits,
                         logprobs=bool(logprobs), top_logprobs=top, response_format=fmt)  # the one value
        return GenRequest(ids, gen, tenant, body.cache_salt, getattr(body, "store", None) is not False)

    async def queue(self, request: Request, body: ChatCompletionRequest | CompletionRequest,
                    fit: bool = False) -> Queued:
        """Validate ``body`` completely (rendered and tokenized here, once) and queue it.
        ``fit``: ``max_tokens`` is a ceiling clamped to the room the prompt leaves
        (Anthropic's clients always send one), not a demand refused when it does not fit."""
        self.check_model(body.model)
        body = with_header_salt(request, body)
        self.worker.check_room()  # a full queue refuses before tokenizing or compiling
        tools = self.tool_plan(body)
        # set by the key check: which API key's tenant sent it ("" with one key or none)
        gen = await self.gen_request(body, tools, request.scope.get(TENANT_SCOPE_KEY, ""), fit)
        job = Job(gen, asyncio.get_running_loop())
        self.worker.submit(job)
        watch = DisconnectWatch(request.receive, lambda: self.worker.cancel(job))
        chat = isinstance(body, ChatCompletionRequest)
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

    async def count(self, body: ChatCompletionRequest) -> int:
        """The prompt tokens ``body`` renders to (a token-count route's answer)."""
        plan = self.tool_plan(body)
        return len(await self.prompt_ids(body, plan.template_tools if plan else None))

    async def chat(self, request: Request, body: ChatCompletionRequest | CompletionRequest,
                   queued: Queued | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """The one event stream every other surface translates: ``body`` (already mapped
        from that surface's request) run as a streamed chat completion, its chunks in
        OpenAI's ``chat.completion.chunk`` shape (a raw ``CompletionRequest``'s carry
        ``choices[0].text``), the last one carrying ``usage``. Raises
        ``APIError`` for a request refused before its first token, and from the iterator
        for one that fails after; a client gone before its first token raises
        ``NoTokens``. ``queued``: a request ``queue`` took already (a wire that needs its
        prompt size before the first token). Tests: tests/server/test_surfaces.py."""
        try:
            run = await self.first(queued or await self.queue(request, body))
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


def with_header_salt(request: Request, body: ChatCompletionRequest | CompletionRequest
                     ) -> ChatCompletionRequest | CompletionRequest:
    """``body`` with the ``X-Cache-Salt`` header as its ``cache_salt`` (for clients that
    cannot add body fields: Claude Code, Codex, Ollama's); the body field wins."""
    salt = request.headers.get(CACHE_SALT_HEADER)
    if salt is None or body.cache_salt is not None:
        return body
    if not 1 <= len(salt) <= 256:
        raise APIError(400, f"the {CACHE_SALT_HEADER} header takes 1 to 256 characters",
                       param=CACHE_SALT_HEADER)
    return body.model_copy(update={"cache_salt": salt})


def _or(value: Any, default: Any) -> Any:
    """An omitted request parameter takes the server's default."""
    return default if value is None else value
