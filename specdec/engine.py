"""The decoding engine: plain and speculative decoding (greedy or sampled) on any mlx-lm model.

Contract: ``stream_generate`` yields one ``GenerationResponse`` per emitted token, then one
with ``token=None`` and the ``finish_reason``; ``generate`` collects it. Greedy output equals
plain greedy decoding with any drafter; sampled output is distributed as plain sampling
(exact rejection sampling). Stops apply token by token. The lifecycle is
``decode.request.Request``; each step ``decode.step.verify_step``. Options beyond mlx-lm's:
``prompt_cache``, ``draft_tree_budget``, ``response_format``, ``logits_processors``.
Tests: tests/test_engine.py, tests/parity/test_parity_real.py. Details: docs/verify-and-rollback.md#the-library-entry-point."""

from __future__ import annotations

from dataclasses import dataclass, field
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
from .decode.generation import Generation
from .decode.request import Emitted, Request, TreePlan
from .drafters import Drafter, DraftSpec, NoDrafter
from .policy.drafting import DecodePolicy
from .policy.adaptive import draft_seconds
from .measure import resolve_tree_budget
from .resources import drafter_for


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


class _FromSpec:
    """``stream_generate``'s default drafter: the spec's (``generation.draft``, else
    ``DraftSpec()``: suffix drafting under the cost gate)."""

    def __repr__(self) -> str:
        return "FROM_SPEC"


FROM_SPEC: Any = _FromSpec()
DraftArg = Drafter | DecodePolicy | DraftSpec | str | None


def resolve_drafter(drafter: DraftArg, gen: Generation, model: Model | None,
                    tokenizer: Any) -> Drafter | DecodePolicy:
    """A request's drafter: an instance as it is, None plain, a ``DraftSpec`` or a
    draft-type string (already merged into ``gen.draft`` by the edge) built by the one
    ``resources.drafter_for`` on ``model`` (the cost gate prices drafts on its verify cost
    curve, measured once and cached; a spec naming ``draft_model`` loads it)."""
    if drafter is None:
        return NoDrafter()
    if isinstance(drafter, (str, DraftSpec)) or drafter is FROM_SPEC:
        return drafter_for(gen.draft, model, tokenizer, sampling=gen.sampling)
    if not isinstance(drafter, (Drafter, DecodePolicy)):
        raise TypeError(f"{drafter!r} is not a Drafter: subclass specdec.drafters.Drafter "
                        "(propose returns a Proposal)")
    return drafter


def spec_of(drafter: DraftArg, generation: Generation | None) -> DraftSpec:
    """The spec a call's ``drafter`` names (the default and an instance: ``DraftSpec()``'s
    k and tree budget; None: plain); with ``generation`` given its ``draft``, which a spec
    or string given beside it must agree with (two descriptions, never one dropped)."""
    if generation is not None:
        named = DraftSpec(drafter) if isinstance(drafter, str) else drafter
        if isinstance(named, DraftSpec) and named != generation.draft:
            raise ValueError(f"drafter={drafter!r} differs from generation.draft "
                             f"({generation.draft}): give the spec once, in the generation")
        return generation.draft
    if isinstance(drafter, str):
        return DraftSpec(drafter)
    return drafter if isinstance(drafter, DraftSpec) else DraftSpec("none") if drafter is None else DraftSpec()


def grammar_for(model: Model, tokenizer: Any, response_format: dict | Grammar | None) -> Grammar | None:
    """The request's grammar for an OpenAI ``response_format`` (None: unconstrained); a
    ``Grammar`` is used as it is (one request's: its state is that request's output)."""
    if isinstance(response_format, Grammar):
        return response_format
    grammar = response_grammar(response_format)
    if grammar is None:
        return None
    return Grammar(tokenizer, grammar, vocab_size(model, tokenizer))


def tree_policy(model: Model, spec: DraftSpec, drafter: Drafter | DecodePolicy | None) -> TreePlan:
    """A request's token trees: ``spec.draft_tree_budget`` nodes, or ``"auto"`` priced on
    the model's measured curves and the drafter's own cost per proposal (when
    ``drafter_for`` measured it)."""
    if not spec.draft_tree_budget:
        return TreePlan()
    refuse_trees(make_cache(model, rollback=False), spec.draft_tree_budget)  # before "auto" measures
    cost = getattr(drafter, "draft_cost", None)
    budget, shaper = resolve_tree_budget(model, spec.draft_tree_budget,
                                         propose_cost=draft_seconds(cost, spec.num_draft_tokens))
    return TreePlan(budget, shaper)


def make_request(model: Model, prompt_ids: Sequence[int], gen: Generation, *,
                 drafter: Drafter | DecodePolicy | None = None, **runtime: Any) -> Request:
    """A started, prefilled ``decode.request.Request`` of ``gen`` (its trees resolved:
    ``tree_policy``); ``runtime``: ``Request``'s keywords beside the value."""
    req = Request(model, prompt_ids, gen, drafter=drafter, tree=tree_policy(model, gen.draft, drafter),
                  **runtime)
    req.start()
    req.prefill()
    return req


def _one_value(generation: Generation | None, given: dict[str, Any]) -> Generation:
    """The call's ``Generation``: ``generation``, or its keywords (None: the default)."""
    if generation is None:
        return Generation.of(**given)
    named = sorted(k for k, v in given.items() if v is not None and k != "draft")
    if named:
        raise TypeError(f"{', '.join(named)} given beside generation=: set them in the Generation")
    return generation


def token_stream(
    model: Model,
    prompt_ids: Sequence[int],
    generation: Generation | None = None,
    *,
    drafter: Drafter | DecodePolicy | None = None,
    max_tokens: int | None = None,
    num_draft_tokens: int | None = None,
    eos: Sequence[int] | set[int] = (),
    sampling: SamplingParams | None = None,
    prefill_step_size: int | None = None,
    kv_bits: int | None = None,
    kv_group_size: int | None = None,
    diagnostics: bool | None = None,
    top_logprobs: int | None = None,
    stats: SpecStats | None = None,
    step_log: list[tuple[int, int]] | None = None,
    prompt_cache: PromptCache | None = None,
    tree_budget: int | str | None = None,
) -> Iterator[Emitted]:
    """The token-level core: yields emitted tokens until EOS (not yielded) or max_tokens.

    Needs no tokenizer. The prompt is prefilled before this returns. ``generation`` (or its
    keywords, None taking ``Generation``'s defaults: k is ``DraftSpec``'s) is the request;
    ``drafter`` drafts (None: plain). ``stats`` (updated in place) and ``step_log``
    (appended ``(block length, accepted)`` per step) are optional outputs.
    ``top_logprobs`` = n > 0 attaches the n most likely ``(token, logprob)`` pairs, best
    first, to each token. ``prompt_cache`` (``make_prompt_cache``) is reused for the
    prompt's cached prefix and left holding exactly the prompt and the emitted tokens (see
    ``cache.prompt_cache``). ``tree_budget``: max token-tree nodes per step (0 = linear
    drafts; ``"auto"``: chosen each step by a ``policy.tree_shape.TreeShaper`` on the
    model's verify cost curve). The lifecycle is ``decode.request.Request``'s.
    """
    gen = _one_value(generation, dict(
        max_tokens=max_tokens, num_draft_tokens=num_draft_tokens, sampling=sampling,
        prefill_step_size=prefill_step_size, kv_bits=kv_bits, kv_group_size=kv_group_size,
        diagnostics=diagnostics, top_logprobs=top_logprobs, draft_tree_budget=tree_budget))
    return make_request(model, prompt_ids, gen, drafter=drafter, eos=eos, stats=stats,
                        step_log=step_log, prompt_cache=prompt_cache).run()


def stream_generate(
    model: Model,
    tokenizer: Any,
    prompt: str | Sequence[int] | Sequence[dict],
    *,
    drafter: DraftArg = FROM_SPEC,
    generation: Generation | None = None,
    max_tokens: int | None = None,
    num_draft_tokens: int | None = None,
    ngram_min: int | None = None,
    ngram_max: int | None = None,
    stop: Sequence[str] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    repetition_penalty: float | None = None,
    repetition_context_size: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    logit_bias: dict[int, float] | None = None,
    system: str | None = None,
    chat: bool | None = None,
    prefill_step_size: int | None = None,
    kv_bits: int | None = None,
    kv_group_size: int | None = None,
    diagnostics: bool | None = None,
    top_logprobs: int | None = None,
    prompt_cache: PromptCache | None = None,
    draft_tree_budget: int | str | None = None,
    response_format: dict | None = None,
    logits_processors: Sequence[LogitsProcessor] = (),
) -> Iterator[GenerationResponse]:
    """Generate from ``prompt``, speculating with ``drafter`` (default: the spec's, suffix
    drafting under the cost gate); docs/verify-and-rollback.md#the-library-entry-point has the drafter,
    ``response_format``, ``prompt_cache`` and ``draft_tree_budget``. The generation is one
    value, ``generation`` or built here once from the keywords (None: ``Generation``'s
    default; the drafting ones: the ``DraftSpec`` given as ``drafter``, else
    ``DraftSpec``'s), and reaches the row unchanged."""
    sampled = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed,
                   repetition_penalty=repetition_penalty,
                   repetition_context_size=repetition_context_size,
                   presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                   logit_bias=logit_bias)
    given: dict[str, Any] = {k: v for k, v in sampled.items() if v is not None}
    gen = _one_value(generation, dict(
        draft=spec_of(drafter, generation), max_tokens=max_tokens, num_draft_tokens=num_draft_tokens,
        ngram_min=ngram_min, ngram_max=ngram_max, draft_tree_budget=draft_tree_budget, stop=stop,
        sampling=SamplingParams(**given) if given else None, prefill_step_size=prefill_step_size,
        kv_bits=kv_bits, kv_group_size=kv_group_size, diagnostics=diagnostics,
        top_logprobs=top_logprobs, response_format=response_format))
    yield from generation_stream(model, tokenizer, prompt, gen, drafter=drafter, system=system,
                                 chat=chat, prompt_cache=prompt_cache,
                                 logits_processors=logits_processors)


def generation_stream(model: Model, tokenizer: Any, prompt: str | Sequence[int] | Sequence[dict],
                      gen: Generation, *, drafter: DraftArg = FROM_SPEC, system: str | None = None,
                      chat: bool | None = None, prompt_cache: PromptCache | None = None,
                      logits_processors: Sequence[LogitsProcessor] = ()
                      ) -> Iterator[GenerationResponse]:
    """``stream_generate`` of one ``Generation``: the prompt encoded, the drafter resolved
    (``resolve_drafter``), the request run; one response per token, then the final one."""
    tokens = encode_prompt(tokenizer, prompt, system=system, chat=chat)
    grammar = grammar_for(model, tokenizer, gen.response_format)
    policy = resolve_drafter(drafter, gen, model, tokenizer)
    step_log: list[tuple[int, int]] = []  # one tuple per step: cheap, and the bench's ceiling needs it
    req = make_request(
        model, tokens, gen, drafter=policy, eos=tokenizer.eos_token_ids, step_log=step_log,
        prompt_cache=prompt_cache, text=TextOut(tokenizer, gen.stop),
        processors=[*([grammar] if grammar else []), *logits_processors])
    stats = req.stats
    for e in req.run():
        yield GenerationResponse(e.text, e.token, e.from_draft, stats, margin=e.margin,
                                 logprob=e.logprob, top_logprobs=e.top)
    yield GenerationResponse(req.tail(), None, False, stats, req.finish_reason, prompt_ids=tokens,
                             step_log=step_log)


def generate(model: Model, tokenizer: Any, prompt: Any, **kwargs: Any) -> GenerationResult:
    """Run ``stream_generate`` to completion; same keyword arguments."""
    return collect(stream_generate(model, tokenizer, prompt, **kwargs))


def collect(responses: Iterator[GenerationResponse]) -> GenerationResult:
    """A ``stream_generate`` (or ``generation_stream``) run to completion."""
    text: list[str] = []
    toks: list[int] = []
    margins: list[float] = []
    logprobs: list[float] = []
    for resp in responses:
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
