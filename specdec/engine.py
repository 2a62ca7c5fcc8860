"""The decoding engine: plain and speculative decoding (greedy or sampled) on any mlx-lm model.

Contract: ``stream_generate`` yields one ``GenerationResponse`` per emitted token, then one
with ``token=None`` and the ``finish_reason``; ``generate`` collects it. Greedy output equals
plain greedy decoding with any drafter; sampled output is distributed as plain sampling
(exact rejection sampling). Stops apply token by token. The lifecycle is
``decode.request.Request``; each step ``decode.step.verify_step``. Options beyond mlx-lm's:
``prompt_cache``, ``draft_tree_budget``, ``response_format``, ``logits_processors``.
Tests: tests/test_engine.py, tests/parity/test_parity_real.py. Details: docs/verify-and-rollback.md#the-library-entry-point."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from .cache.prompt_cache import PromptCache
from .cache.recurrent import refuse_trees
from .cache.rollback import make_cache
from .core.grammar import Grammar, response_grammar
from .core.model import Model
from .core.processors import LogitsProcessor
from .core.sampling import SamplingParams
from .core.vocab import vocab_size
from .core.stats import SpecStats
from .core.text import TextOut, encode_prompt
from .decode.request import Emitted, Request
from .drafters import Drafter, DraftResources, DraftSpec, NoDrafter, shared_ngram_mod_table
from .policy.build import build_policy
from .policy.drafting import DecodePolicy
from .policy.adaptive import draft_seconds
from .drafters.spec import DEFAULT_NUM_DRAFT_TOKENS
from .measure import resolve_tree_budget
from .resources import prepare_resources


@dataclass
class GenerationResponse:
    text: str
    token: int | None
    from_draft: bool
    stats: SpecStats
    finish_reason: str | None = None
    margin: float | None = None  # top-2 logit gap at this token (diagnostics only)
    logprob: float | None = None  # the target's log-probability of this token
    top_logprobs: list[tuple[int, float]] | None = None  # (token, logprob) best first, if asked
    prompt_ids: list[int] | None = None  # final response only
    step_log: list[tuple[int, int]] | None = None  # final response: (block length, accepted) per step


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str
    stats: SpecStats
    prompt_tokens: list[int]
    margins: list[float] = field(default_factory=list)  # top-2 logit gap per token (diagnostics)
    logprobs: list[float] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (block length, accepted)


def resolve_drafter(drafter: Drafter | DecodePolicy | DraftSpec | str | None, tokenizer: Any, *,
                    model: Model | None = None, num_draft_tokens: int | None = None,
                    ngram_min: int | None = None, ngram_max: int | None = None,
                    temperature: float = 0.0, seed: int | None = None) -> Drafter | DecodePolicy:
    """A Drafter (or one under its decode policy: the spec's cost gate) from an instance, a
    ``DraftSpec``, a draft-type string, or None (plain).

    A spec or string is built with ``prepare_resources`` on ``model`` (the cost gate, on
    by default, prices drafts on the model's verify cost curve, measured once and cached;
    a spec naming ``draft_model`` loads it). A string uses the process-wide ngram-mod
    table of this tokenizer (so library calls share one memory, as a server does).
    ``num_draft_tokens``, ``ngram_min`` and ``ngram_max`` (None: the spec's) replace a
    spec's: the cost gate's bound and the row's depth are then one value, never two that
    may disagree, and no keyword is dropped."""
    if drafter is None:
        return NoDrafter()
    if isinstance(drafter, str):
        drafter = DraftSpec(drafter)
    if isinstance(drafter, DraftSpec):
        drafter = replace(  # validated again by DraftSpec
            drafter, num_draft_tokens=drafter.num_draft_tokens if num_draft_tokens is None else num_draft_tokens,
            ngram_min=drafter.ngram_min if ngram_min is None else ngram_min,
            ngram_max=drafter.ngram_max if ngram_max is None else ngram_max)
        table = None  # a file the spec names is loaded by prepare_resources, never ignored
        if drafter.uses("ngram-mod") and not drafter.ngram_mod_file:
            table = shared_ngram_mod_table(tokenizer, drafter.ngram_mod_size, drafter.ngram_mod_n)
        if model is None and drafter.speculative and (drafter.gate or drafter.adaptive_k):
            raise ValueError("the cost gate needs the target model (resolve_drafter(..., model=))")
        res = prepare_resources(drafter, model, tokenizer, table=table) if model is not None \
            else DraftResources(tokenizer=tokenizer, table=table)
        return build_policy(drafter, res, temperature=temperature, seed=seed)
    if not isinstance(drafter, (Drafter, DecodePolicy)):
        raise TypeError(f"{drafter!r} is not a Drafter: subclass specdec.drafters.Drafter "
                        "(propose returns a Proposal)")
    return drafter


def grammar_for(model: Model, tokenizer: Any, response_format: dict | Grammar | None) -> Grammar | None:
    """The request's grammar for an OpenAI ``response_format`` (None: unconstrained); a
    ``Grammar`` is used as it is (one request's: its state is that request's output)."""
    if isinstance(response_format, Grammar):
        return response_format
    grammar = response_grammar(response_format)
    if grammar is None:
        return None
    return Grammar(tokenizer, grammar, vocab_size(model, tokenizer))


def tree_policy(model: Model, tree_budget: int | str, drafter: Drafter | DecodePolicy | None,
                num_draft_tokens: int) -> tuple[int, Any]:
    """(node budget, shaper or None) for a request: ``"auto"`` prices trees on the model's
    measured curves and the drafter's own cost per proposal (when ``build_drafter``
    measured it)."""
    if not tree_budget:
        return 0, None
    refuse_trees(make_cache(model, rollback=False), tree_budget)  # before "auto" measures trees
    propose_cost = draft_seconds(drafter.draft_cost if drafter is not None else None, num_draft_tokens)
    return resolve_tree_budget(model, tree_budget, propose_cost=propose_cost)


def make_request(model: Model, prompt_ids: Sequence[int], *,
                 drafter: Drafter | DecodePolicy | None = None,
                 max_tokens: int = 256, num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS,
                 tree_budget: int | str = 0,
                 **kwargs: Any) -> Request:
    """A started, prefilled ``decode.request.Request`` (see ``token_stream``)."""
    budget, shaper = tree_policy(model, tree_budget, drafter, num_draft_tokens)
    req = Request(model, prompt_ids, drafter=drafter, max_tokens=max_tokens,
                  num_draft_tokens=num_draft_tokens, tree_budget=budget, shaper=shaper, **kwargs)
    req.start()
    req.prefill()
    return req


def token_stream(
    model: Model,
    prompt_ids: Sequence[int],
    *,
    drafter: Drafter | None = None,
    max_tokens: int = 256,
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS,
    eos: Sequence[int] | set[int] = (),
    sampling: SamplingParams = SamplingParams(),
    prefill_step_size: int = 512,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    diagnostics: bool = False,
    top_logprobs: int = 0,
    stats: SpecStats | None = None,
    step_log: list[tuple[int, int]] | None = None,
    prompt_cache: PromptCache | None = None,
    tree_budget: int | str = 0,
) -> Iterator[Emitted]:
    """The token-level core: yields emitted tokens until EOS (not yielded) or max_tokens.

    Needs no tokenizer. The prompt is prefilled before this returns. ``stats`` (updated in
    place) and ``step_log`` (appended ``(block length, accepted)`` per step) are optional
    outputs. ``top_logprobs`` = n > 0 attaches the n most likely ``(token, logprob)``
    pairs, best first, to each token. ``prompt_cache`` (``make_prompt_cache``) is reused
    for the prompt's cached prefix and left holding exactly the prompt and the emitted
    tokens (see ``cache.prompt_cache``). ``tree_budget``: max token-tree nodes per step (0
    = linear drafts; ``"auto"``: chosen each step by a ``policy.tree_shape.TreeShaper`` on
    the model's verify cost curve). The lifecycle is ``decode.request.Request``'s.
    """
    return make_request(
        model, prompt_ids, drafter=drafter, max_tokens=max_tokens, num_draft_tokens=num_draft_tokens,
        tree_budget=tree_budget, eos=eos, sampling=sampling, prefill_step_size=prefill_step_size,
        kv_bits=kv_bits, kv_group_size=kv_group_size, diagnostics=diagnostics,
        top_logprobs=top_logprobs, stats=stats, step_log=step_log, prompt_cache=prompt_cache,
    ).run()


def stream_generate(
    model: Model,
    tokenizer: Any,
    prompt: str | Sequence[int] | Sequence[dict],
    *,
    drafter: Drafter | DraftSpec | str | None = DraftSpec.draft_type,
    max_tokens: int = 256,
    num_draft_tokens: int | None = None,
    ngram_min: int | None = None,
    ngram_max: int | None = None,
    stop: Sequence[str] | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    seed: int | None = None,
    repetition_penalty: float = 1.0,
    repetition_context_size: int = 20,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    logit_bias: dict[int, float] | None = None,
    system: str | None = None,
    chat: bool | None = None,
    prefill_step_size: int = 512,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    diagnostics: bool = False,
    top_logprobs: int = 0,
    prompt_cache: PromptCache | None = None,
    draft_tree_budget: int | str | None = None,
    response_format: dict | None = None,
    logits_processors: Sequence[LogitsProcessor] = (),
) -> Iterator[GenerationResponse]:
    """Generate from ``prompt``, speculating with ``drafter``; docs/verify-and-rollback.md#the-library-entry-point has the
    drafter, ``response_format``, ``prompt_cache`` and ``draft_tree_budget`` (None: the
    ``DraftSpec``'s, else 0; ``num_draft_tokens`` likewise, else ``DraftSpec``'s default)."""
    spec = drafter if isinstance(drafter, DraftSpec) else None
    tree = draft_tree_budget if draft_tree_budget is not None else spec.draft_tree_budget if spec else 0
    k = num_draft_tokens if num_draft_tokens is not None else \
        spec.num_draft_tokens if spec else DEFAULT_NUM_DRAFT_TOKENS
    tokens = encode_prompt(tokenizer, prompt, system=system, chat=chat)
    grammar = grammar_for(model, tokenizer, response_format)
    policy = resolve_drafter(drafter, tokenizer, model=model, num_draft_tokens=k, ngram_min=ngram_min,
                             ngram_max=ngram_max, temperature=temperature, seed=seed)
    step_log: list[tuple[int, int]] = []  # one tuple per step: cheap, and the bench's ceiling needs it
    sampling = SamplingParams(temperature, top_p, top_k, min_p, seed, repetition_penalty,
                              repetition_context_size, presence_penalty=presence_penalty,
                              frequency_penalty=frequency_penalty, logit_bias=logit_bias or ())
    req = make_request(
        model, tokens, drafter=policy, max_tokens=max_tokens, num_draft_tokens=k, tree_budget=tree,
        eos=tokenizer.eos_token_ids, sampling=sampling, prefill_step_size=prefill_step_size,
        kv_bits=kv_bits, kv_group_size=kv_group_size, diagnostics=diagnostics,
        top_logprobs=top_logprobs, step_log=step_log, prompt_cache=prompt_cache,
        text=TextOut(tokenizer, stop), processors=[*([grammar] if grammar else []), *logits_processors])
    stats = req.stats
    for e in req.run():
        yield GenerationResponse(e.text, e.token, e.from_draft, stats, margin=e.margin,
                                 logprob=e.logprob, top_logprobs=e.top)
    yield GenerationResponse(req.tail(), None, False, stats, req.finish_reason, prompt_ids=tokens,
                             step_log=step_log)


def generate(model: Model, tokenizer: Any, prompt: Any, **kwargs: Any) -> GenerationResult:
    """Run ``stream_generate`` to completion; same keyword arguments."""
    text: list[str] = []
    toks: list[int] = []
    margins: list[float] = []
    logprobs: list[float] = []
    for resp in stream_generate(model, tokenizer, prompt, **kwargs):
        text.append(resp.text)
        if resp.token is not None:
            toks.append(resp.token)
            if resp.logprob is not None:  # every token's response carries it
                logprobs.append(resp.logprob)
            if resp.margin is not None:
                margins.append(resp.margin)
    if resp.finish_reason is None or resp.prompt_ids is None:
        raise RuntimeError("stream_generate ended without its final response")
    return GenerationResult(
        text="".join(text),
        tokens=toks,
        finish_reason=resp.finish_reason,
        stats=resp.stats,
        prompt_tokens=resp.prompt_ids,
        margins=margins,
        logprobs=logprobs,
        steps=resp.step_log or [],
    )
