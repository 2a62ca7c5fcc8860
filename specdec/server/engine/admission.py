"""A request admitted: the one request value, a ``ChatSpec``, checked, rendered and tokenized
once, its ``max_tokens`` fitted to the room once, made into the worker's ``Job`` and put in
the queue the batcher takes from. ``Admission`` is ``api.Api``'s front half (``Api.queue``,
``Api.count``): every wire hands its spec here and nowhere else in ``api``.

Contract: ``Admission.queue`` validates completely before queueing (model name 404, the
queue's 503, ``check_spec``, the prompt under the worker's tokenizer lock against the context
length and the KV budget, drafting, sampling and grammar: ``asked``); ``encode`` renders a chat
(or takes a text completion's prompt), a 400 naming ``messages``/``prompt`` when it cannot;
``fit_max_tokens`` is the completion's length against the context and the KV budget;
``gen_request`` builds the one ``Generation`` passed unchanged to the row. Every refusal is the
request's own 400 (or 503 for a full queue).
Details: docs/server.md#one-request-value-max_tokens-from-an-anthropic-body-to-the-loop.
Tests: tests/server/test_api.py, tests/server/test_anthropic_wire.py, tests/server/test_golden.py."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from ...core.text import encode_prompt
from ...decode.generation import Generation
from ...toolcall.prompt import template_messages
from ..config import ServerConfig
from ..http.errors import APIError
from ..http.middleware import TENANT_SCOPE_KEY
from .asked import draft_spec, response_format, sampling
from .chunks import Responder
from .events import GenRequest, Job
from .reasoning import ReasoningSplitter, TemplateTraits, opens_thinking
from .run import DisconnectWatch, Queued
from .spec import ChatSpec, check_spec, speculative_options
from .tool_calls import ToolPlan, ToolResponder, ToolSupport, plan_tools
from .wedlm_rows import check as check_wedlm

CACHE_SALT_HEADER = "X-Cache-Salt"  # cache_salt for a client that cannot add body fields


class Admission:
    """A request checked, made into a job and queued, for one worker (``Api`` adds the
    event stream a queued request is read through)."""

    def __init__(self, cfg: ServerConfig, worker: Any):
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

    @functools.cached_property
    def traits(self) -> TemplateTraits:
        """The chat template's traits (reasoning models: a think block, a thinking switch)."""
        with self.worker.tokenizer_lock:
            return TemplateTraits.of(self.worker.tokenizer)

    def tool_plan(self, spec: ChatSpec) -> ToolPlan | None:
        """What the request's tools change (``tool_calls``); None for most requests."""
        return plan_tools(spec, self.tools, self.cfg.model_id) if spec.chat else None

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
        enqueue(self.cfg, self.worker, job)
        watch = DisconnectWatch(request.receive, lambda: self.worker.cancel(job))
        return Queued(job, self._responder(spec.chat, gen, tools), watch, len(gen.prompt_ids))

    def _responder(self, chat: bool, gen: GenRequest, tools: ToolPlan | None) -> Responder:
        """How the request's events become chunks: its tool calls read, its reasoning split."""
        reasoning = None
        if chat and self.traits.think:
            with self.worker.tokenizer_lock:  # a prompt that opens the block: R1's templates
                tail = self.worker.tokenizer.decode(gen.prompt_ids[-16:])
            reasoning = ReasoningSplitter(thinking=opens_thinking(tail))
        out = gen.gen  # what the answer reports: logprobs, top_logprobs
        if tools is not None and tools.format is not None:
            return ToolResponder(self.cfg.model_id, out.logprobs, out.top_logprobs, tools, reasoning=reasoning)
        return Responder(chat, self.cfg.model_id, out.logprobs, out.top_logprobs, reasoning=reasoning)

    async def count(self, spec: ChatSpec) -> int:
        """The prompt tokens ``spec`` renders to (a token-count route's answer)."""
        check_spec(spec)
        plan = self.tool_plan(spec)
        return len(await encode(self.worker, spec, plan.template_tools if plan else None))


def enqueue(cfg: ServerConfig, worker: Any, job: Job) -> None:
    """Put ``job`` in the worker's queue, which the batcher takes from: a 503 when it is full
    (or the server stops), a 400 for what ``--decoder wedlm`` cannot do."""
    worker.check_room()
    if cfg.decoder == "wedlm":
        check_wedlm(job.request)
    if not worker.queue.put_nowait(job):
        worker.queue_full()


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


async def encode(worker: Any, spec: ChatSpec, tools: list[dict] | None) -> list[int]:
    """The prompt's token ids: a chat rendered by the template, a text tokenized, ids checked."""
    param = "messages" if spec.chat else "prompt"
    if isinstance(spec.prompt, tuple):
        if bad := [t for t in spec.prompt if not 0 <= t < worker.vocab_size]:
            raise APIError(400, f"prompt token ids must lie in [0, {worker.vocab_size}); "
                           f"got {bad[0]}", param=param)
        return list(spec.prompt)
    prompt: str | list[dict[str, Any]] = (
        _template_messages(spec.messages) if spec.messages is not None else spec.prompt or "")
    template = dict(spec.template_kwargs) if spec.chat else None

    def run() -> list[int]:
        with worker.tokenizer_lock:
            return encode_prompt(worker.tokenizer, prompt, chat=spec.chat,
                                 template_kwargs=template, tools=tools)

    try:
        ids = await run_in_threadpool(run)
    except ValueError as e:
        raise APIError(400, str(e), param=param) from e
    except Exception as e:  # noqa: BLE001 - a template failing on the client's messages
        raise APIError(400, f"the model's chat template cannot render these {param} "
                       f"({type(e).__name__}: {e}); check the roles, their order and "
                       "the content types", param=param) from e
    if not ids:
        raise APIError(400, f"the {param} encode to no tokens; send some text", param=param)
    return ids


def _template_messages(messages: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Messages as the template reads them ("developer" is OpenAI's newer name for system)."""
    return template_messages([{**m, "role": "system"} if m.get("role") == "developer" else dict(m)
                              for m in messages])


def room(worker: Any, n_prompt: int) -> int:
    """Completion tokens a prompt of ``n_prompt`` leaves: in the context, and in the KV
    budget for one request alone (``kv_budget``)."""
    kv = worker.kv
    return min(worker.context_length, kv.longest if kv is not None else 1 << 62) - n_prompt


def fit_max_tokens(worker: Any, cap: int | None, asked: int | None, n_prompt: int, param: str,
                   fit: bool = False) -> int:
    """The completion's length: ``asked`` (``fit``: at most the room), else to the room
    (``cap``: the server's ``--max-tokens``, bounding every request); a 400 when it does
    not fit the context or the KV budget."""
    ctx, left = worker.context_length, room(worker, n_prompt)
    if fit and asked is not None and left >= 1:
        asked = min(asked, left)
    want = asked if asked is not None else left if cap is None else min(cap, left)
    if n_prompt + max(want, 1) > ctx:
        raise APIError(
            400, f"This model's maximum context length is {ctx} tokens. However, you "
            f"requested {n_prompt + max(want, 1)} tokens ({n_prompt} in the {param}, "
            f"{max(want, 1)} in the completion). Please reduce the length of the {param} "
            "or the completion (max_tokens).", param=param, code="context_length_exceeded")
    want = want if cap is None else min(want, cap)
    kv, n = worker.kv, n_prompt + max(want, 1)
    if kv is not None and n > kv.longest:
        mib = kv.footprint.row_bytes(n) / 2**20
        raise APIError(
            400, f"This request needs the KV cache of {n} tokens ({n_prompt} in the "
            f"{param}, {max(want, 1)} in the completion: {mib:.0f} MiB), more than this "
            f"server's KV budget holds for one request ({kv.longest} tokens, --kv-budget "
            f"{kv.budget / 2**20:.0f} MiB). Lower max_tokens or shorten the {param}.",
            param=param, code="kv_budget_exceeded")
    return want


async def gen_request(cfg: ServerConfig, worker: Any, spec: ChatSpec, tools: ToolPlan | None,
                      tenant: str) -> GenRequest:
    """``spec`` as the worker's request: the prompt tokenized once, the room computed once."""
    ids = await encode(worker, spec, tools.template_tools if tools else None)
    max_tokens = fit_max_tokens(worker, cfg.max_tokens, spec.max_tokens, len(ids),
                                "messages" if spec.chat else "prompt", spec.fit)
    draft = draft_spec(cfg, worker, speculative_options(spec))
    gen = Generation(max_tokens, draft, sampling(cfg, worker, spec.sampling), spec.stop,
                     kv_bits=cfg.kv_bits, logprobs=spec.logprobs, top_logprobs=spec.top_logprobs,
                     response_format=await response_format(spec.response_format, tools))  # the one value
    return GenRequest(ids, gen, tenant, spec.cache_salt, spec.store)
