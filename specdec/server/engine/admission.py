"""A ``ChatSpec`` made into the worker's ``GenRequest``: rendered and tokenized once, its
``max_tokens`` fitted to the room once, its drafting, sampling and grammar checked.

Contract: ``encode`` renders a chat (or takes a text completion's prompt) under the worker's
tokenizer lock, a 400 naming ``messages``/``prompt`` when it cannot; ``fit_max_tokens`` is the
completion's length against the context and the KV budget; ``gen_request`` builds the one
``Generation`` passed unchanged to the row. Every refusal is the request's own 400.
Tests: tests/server/test_api.py, tests/server/test_anthropic_wire.py, tests/server/test_golden.py."""

from __future__ import annotations

from typing import Any

from fastapi.concurrency import run_in_threadpool

from ...cache.recurrent import trees_refused
from ...core.grammar import response_grammar
from ...core.sampling import SamplingParams
from ...core.text import encode_prompt
from ...decode.generation import Generation
from ...drafters.spec import DraftSpec
from ...toolcall.prompt import forced_response_format, template_messages
from ..config import ServerConfig
from ..http.errors import APIError
from .events import GenRequest
from .spec import ChatSpec, speculative_options
from .speculative import merge_speculative, refuse_unloaded
from .tool_calls import ToolPlan


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


def draft_spec(cfg: ServerConfig, worker: Any, spec: ChatSpec) -> DraftSpec:
    """The server's drafting with the request's ``speculative`` overrides, checked."""
    try:
        draft = merge_speculative(cfg.speculation, speculative_options(spec))
        refuse_unloaded(draft, worker)
    except ValueError as e:
        raise APIError(400, str(e), param="speculative") from e
    if draft.draft_tree_budget and worker.recurrent:
        raise APIError(400, trees_refused("send speculative.draft_tree_budget 0 (linear drafts)"),
                       param="speculative.draft_tree_budget")
    if draft.draft_tree_budget and worker.max_batch > 1:
        raise APIError(400, "token trees (draft_tree_budget) are verified one request at a "
                       "time: this server batches requests (start it with --max-batch 1 "
                       "for trees)", param="speculative.draft_tree_budget")
    return draft


def sampling(cfg: ServerConfig, worker: Any, spec: ChatSpec) -> SamplingParams:
    """The request's sampling over the server's defaults, checked."""
    a = spec.sampling
    if bad := [t for t in a.logit_bias if t >= worker.vocab_size]:
        raise APIError(400, f"logit_bias: token id {bad[0]} is not in the vocabulary (ids lie in "
                       f"[0, {worker.vocab_size}))", param="logit_bias")
    out = SamplingParams(
        temperature=_or(a.temperature, cfg.temp), top_p=_or(a.top_p, cfg.top_p),
        top_k=_or(a.top_k, cfg.top_k), min_p=_or(a.min_p, cfg.min_p), seed=a.seed,
        repetition_penalty=_or(a.repetition_penalty, 1.0), presence_penalty=a.presence_penalty,
        frequency_penalty=a.frequency_penalty, logit_bias=dict(a.logit_bias))
    try:
        out.validate()
    except ValueError as e:
        raise APIError(400, str(e)) from e
    return out


async def response_format(spec: ChatSpec, tools: ToolPlan | None) -> dict | None:
    """The grammar's format: ``response_format``, or the forced tool call's; compiled here
    so that a bad one is refused with its reason rather than mid-request."""
    fmt = dict(spec.response_format) if spec.response_format is not None else None
    if tools is not None and tools.forced_schema is not None:
        if fmt is not None:
            raise APIError(400, "tool_choice 'required' or a named function already "
                           "constrains the reply to a tool call: send response_format "
                           "or that tool_choice, not both", param="response_format")
        fmt = forced_response_format(tools.forced_schema)  # the call, grammar-forced
    if fmt is not None:
        try:  # off the event loop
            await run_in_threadpool(response_grammar, fmt)
        except ValueError as e:
            raise APIError(400, str(e), param="response_format") from e
    return fmt


async def gen_request(cfg: ServerConfig, worker: Any, spec: ChatSpec, tools: ToolPlan | None,
                      tenant: str) -> GenRequest:
    """``spec`` as the worker's request: the prompt tokenized once, the room computed once."""
    ids = await encode(worker, spec, tools.template_tools if tools else None)
    max_tokens = fit_max_tokens(worker, cfg.max_tokens, spec.max_tokens, len(ids),
                                "messages" if spec.chat else "prompt", spec.fit)
    draft, sampled = draft_spec(cfg, worker, spec), sampling(cfg, worker, spec)
    gen = Generation(max_tokens, draft, sampled, spec.stop, kv_bits=cfg.kv_bits,
                     logprobs=spec.logprobs, top_logprobs=spec.top_logprobs,
                     response_format=await response_format(spec, tools))  # the one value
    return GenRequest(ids, gen, tenant, spec.cache_salt, spec.store)


def _or(value: Any, default: Any) -> Any:
    """An omitted request parameter takes the server's default."""
    return default if value is None else value
