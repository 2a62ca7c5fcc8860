"""What a request asked beyond its prompt and its length, over the server's defaults, each
checked (the request's own 400 naming the field): its drafting (``speculative``), its
sampling and its grammar (``response_format``, or a forced tool call's). ``admission`` builds
the ``Generation`` from them; none of them sees the request's ``max_tokens``.
Tests: tests/server/test_schemas.py, tests/server/test_structured.py, tests/server/test_app.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.concurrency import run_in_threadpool

from ...cache.errors import refuse_quantized_speculation
from ...cache.recurrent import trees_refused
from ...core.grammar import response_grammar
from ...core.sampling import SamplingParams
from ...drafters.spec import DraftSpec
from ...toolcall.prompt import forced_response_format
from ..config import ServerConfig
from ..http.errors import APIError
from .spec import Asked
from .spec.options import SpeculativeOptions
from .speculative import merge_speculative, refuse_unloaded
from .tool_calls import ToolPlan


def draft_spec(cfg: ServerConfig, worker: Any, options: SpeculativeOptions | None) -> DraftSpec:
    """The server's drafting with the request's ``speculative`` overrides, checked."""
    try:
        draft = merge_speculative(cfg.speculation, options)
        refuse_unloaded(draft, worker)
        refuse_quantized_speculation(cfg.kv_bits, draft.speculative, "this server quantizes its "
                                     "KV cache (--kv-bits): send speculative.draft_type 'none'")
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


def sampling(cfg: ServerConfig, worker: Any, a: Asked) -> SamplingParams:
    """The request's sampling over the server's defaults, checked."""
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


async def response_format(asked: Mapping[str, Any] | None, tools: ToolPlan | None) -> dict | None:
    """The grammar's format: ``response_format``, or the forced tool call's; compiled here
    so that a bad one is refused with its reason rather than mid-request."""
    fmt = dict(asked) if asked is not None else None
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


def _or(value: Any, default: Any) -> Any:
    """An omitted request parameter takes the server's default."""
    return default if value is None else value
