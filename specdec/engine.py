"""The decoding engine: plain and speculative decoding (greedy or sampled) on any mlx-lm model.

Contract: ``stream_generate`` yields one ``GenerationResponse`` per emitted token (token id,
text segment, whether it came from an accepted draft, running stats), then one final
response with ``token=None``, the ``finish_reason`` ("stop" or "length"), any remaining
text and the final stats. ``generate`` collects it into a ``GenerationResult``.

Greedy: with any drafter the emitted tokens equal plain greedy decoding. Each step feeds
``[last] + draft`` through the target once, keeps the leading run the target agrees with
plus one target token (``verify.greedy_accept``), and rolls the cache back past the rest
(``rollback.trim``). Stops (EOS, ``max_tokens``, stop strings) are applied token by token,
so one inside an accepted block ends the output there.

Temperature > 0 uses exact rejection sampling (``verify.rejection_sample``): each token is
distributed as plain sampling from the target's processed distribution would give.
Decode steps themselves live in ``steps``: one host synchronisation per step (a draft
model adds one per proposal). ``drafter`` is a ``Drafter``, a draft-type string (built
with ``DraftSpec``/``build_drafter`` and this call's n-gram and sampling options), or
None for plain decoding; the engine calls its ``begin`` once per request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from .drafters import Drafter, DraftResources, DraftSpec, NoDrafter, build_drafter
from .cache.prompt_cache import PromptCache
from .cache.rollback import make_cache
from .core.sampling import Rng, SamplingParams
from .core.stats import SpecStats
from .decode.step import plain_steps, prefill, spec_steps
from .core.text import TextOut, encode_prompt
from .drafters.adaptive import draft_seconds
from .decode.tree import resolve_tree_budget


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


def resolve_drafter(drafter: Drafter | DraftSpec | str | None, tokenizer: Any, *,
                    num_draft_tokens: int = 4, ngram_min: int = 1, ngram_max: int = 3,
                    temperature: float = 0.0, seed: int | None = None) -> Drafter:
    """A Drafter from an instance, a ``DraftSpec``, a draft-type string, or None (plain).

    A string uses the process-wide ngram-mod table of this tokenizer (so library calls
    share one memory, as a server does) and cannot name ``model`` (it needs a loaded
    draft model: build a ``DraftModelDrafter`` or use ``prepare_resources``)."""
    if drafter is None:
        return NoDrafter()
    if isinstance(drafter, str):
        drafter = DraftSpec(drafter, num_draft_tokens=num_draft_tokens, ngram_min=ngram_min,
                            ngram_max=ngram_max)
    if isinstance(drafter, DraftSpec):
        from .drafters import ngram_mod_table, shared_ngram_mod_table

        table = None
        if drafter.uses("ngram-mod"):  # a file the spec names is loaded, never ignored
            table = ngram_mod_table(drafter, tokenizer) if drafter.ngram_mod_file else \
                shared_ngram_mod_table(tokenizer, drafter.ngram_mod_size, drafter.ngram_mod_n)
        res = DraftResources(tokenizer=tokenizer, table=table)
        return build_drafter(drafter, res, temperature=temperature, seed=seed)
    if not isinstance(drafter, Drafter):
        raise TypeError(f"{drafter!r} is not a Drafter: subclass specdec.drafters.Drafter "
                        "(propose returns a Proposal)")
    return drafter


def _check_args(max_tokens: int, num_draft_tokens: int, prefill_step_size: int) -> None:
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if num_draft_tokens < 1:
        raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
    if prefill_step_size < 1:
        raise ValueError(f"prefill_step_size must be >= 1, got {prefill_step_size}")


@dataclass
class _Emitted:
    token: int
    from_draft: bool
    margin: float | None
    logprob: float
    top: list[tuple[int, float]] | None = None


def token_stream(
    model: Any,
    prompt_ids: Sequence[int],
    *,
    drafter: Drafter | None = None,
    max_tokens: int = 256,
    num_draft_tokens: int = 4,
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
) -> Iterator[_Emitted]:
    """The token-level core: yields emitted tokens until EOS (not yielded) or max_tokens.

    Needs no tokenizer. ``stats`` (updated in place) and ``step_log`` (appended
    ``(block length, accepted)`` per step) are optional outputs. ``top_logprobs`` = n > 0
    attaches the n most likely ``(token, logprob)`` pairs, best first, to each token.
    ``prompt_cache`` (``make_prompt_cache``) is reused for the prompt's cached prefix and
    left holding exactly the prompt and the emitted tokens (see ``prompt_cache``).
    ``tree_budget``: max token-tree nodes per step (0 = linear drafts; ``"auto"``: chosen
    each step by a ``tree_shape.TreeShaper`` on the model's verify cost curve); see
    ``steps.spec_steps``.
    """
    _check_args(max_tokens, num_draft_tokens, prefill_step_size)
    if tree_budget and not getattr(model, "verifies_trees", True):
        raise ValueError("token trees (--draft-tree-budget) do not work on a sharded target "
                         "(--distributed) yet: use linear drafts (--draft-tree-budget 0)")
    # the drafter's own cost per proposal (when build_drafter measured it) counts in "auto"
    propose_cost = draft_seconds(getattr(drafter, "draft_cost", None), num_draft_tokens)
    tree_budget, shaper = (resolve_tree_budget(model, tree_budget, propose_cost=propose_cost)
                           if tree_budget else (0, None))
    if not 0 <= top_logprobs <= 100:
        raise ValueError(f"top_logprobs must be in [0, 100], got {top_logprobs}")
    if not prompt_ids:
        raise ValueError("the prompt encodes to no tokens")
    drafter = drafter or NoDrafter()
    speculative = not isinstance(drafter, NoDrafter)
    if prompt_cache is None:
        cache, reused = make_cache(model, max_trim=num_draft_tokens + 1, rollback=speculative,
                                   kv_bits=kv_bits, kv_group_size=kv_group_size), 0
    else:
        reused = prompt_cache.reuse(model, prompt_ids, num_draft_tokens, kv_bits)
        cache = prompt_cache.layers
    stats = stats if stats is not None else SpecStats()
    stats.drafter, stats.prompt_tokens, stats.cached_tokens = drafter.name, len(prompt_ids), reused

    sampling.validate()
    rng = None if sampling.greedy else Rng(sampling.seed)
    t0 = time.perf_counter()
    drafter.begin(list(prompt_ids))  # per-request state (a draft model prefills here)
    prefill(model, cache, prompt_ids[reused:-1], prefill_step_size)
    if prompt_cache is not None:
        prompt_cache.fed(prompt_ids[reused:-1])
    stats.prefill_s = time.perf_counter() - t0
    budget = [max_tokens]  # tokens still wanted: spec_steps drafts no further than that
    if speculative:
        steps = spec_steps(model, cache, list(prompt_ids), drafter, num_draft_tokens, budget,
                           sampling, rng, diagnostics, top_logprobs, tree_budget, shaper)
    else:
        steps = plain_steps(model, cache, prompt_ids, sampling, rng, diagnostics, top_logprobs)
    emitted = _emit(steps, budget, set(eos), stats, step_log, t0)
    if prompt_cache is None:
        return emitted
    return _settling(emitted, prompt_cache, list(prompt_ids))


class Emitter:
    """Turns steps into emitted tokens for one request: stops at EOS (not emitted) or when
    ``budget[0]`` (the tokens still wanted, kept up to date here for the drafter) reaches
    0, and keeps ``stats`` and ``step_log``. ``feed(step)`` returns (tokens, done)."""

    def __init__(self, budget: list[int], eos: set[int], stats: SpecStats,
                 step_log: list[tuple[int, int]] | None, t0: float):
        self.budget, self.eos, self.stats, self.step_log, self.t0 = budget, eos, stats, step_log, t0
        self.max_tokens = budget[0]

    def feed(self, step: Any) -> tuple[list[_Emitted], bool]:
        stats, out = self.stats, []
        stats.record_step(step.drafted, step.accepted, step.fed, step.depth)
        if self.step_log is not None:
            self.step_log.append((step.fed, step.accepted))
        for i, tok in enumerate(step.tokens):
            if tok in self.eos:
                return out, True
            now = time.perf_counter()
            stats.generated_tokens += 1
            self.budget[0] = self.max_tokens - stats.generated_tokens
            stats.ttft_s = stats.ttft_s or now - self.t0
            stats.decode_s = now - self.t0 - stats.prefill_s
            margin = step.margins[i] if step.margins else None
            top = step.top[i] if step.top else None
            out.append(_Emitted(tok, i < step.accepted, margin, step.logprobs[i], top))
            if self.budget[0] <= 0:
                return out, True
        return out, False


def _emit(steps: Iterator[Any], budget: list[int], eos: set[int], stats: SpecStats,
          step_log: list[tuple[int, int]] | None, t0: float) -> Iterator[_Emitted]:
    """The tokens of ``steps`` one by one, through an ``Emitter``."""
    emitter = Emitter(budget, eos, stats, step_log, t0)
    for step in steps:
        out, done = emitter.feed(step)
        yield from out
        if done:
            return


def _settling(emitted: Iterator[_Emitted], prompt_cache: PromptCache,
              prompt_ids: list[int]) -> Iterator[_Emitted]:
    """Pass ``emitted`` through; afterwards (finished, or closed early) the prompt cache
    holds exactly the prompt and the emitted tokens. After an error its contents are
    unknown, so it is emptied."""
    tokens, ok = [], False
    try:
        for e in emitted:
            tokens.append(e.token)
            yield e
        ok = True
    except GeneratorExit:
        ok = True
        raise
    finally:
        if ok:
            prompt_cache.settle(prompt_ids + tokens)
        else:
            prompt_cache.reset()


def stream_generate(
    model: Any,
    tokenizer: Any,
    prompt: str | Sequence[int] | Sequence[dict],
    *,
    drafter: Drafter | DraftSpec | str | None = "ngram",
    max_tokens: int = 256,
    num_draft_tokens: int | None = None,
    ngram_min: int = 1,
    ngram_max: int = 3,
    stop: Sequence[str] | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    seed: int | None = None,
    repetition_penalty: float = 1.0,
    repetition_context_size: int = 20,
    system: str | None = None,
    chat: bool | None = None,
    prefill_step_size: int = 512,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    diagnostics: bool = False,
    top_logprobs: int = 0,
    prompt_cache: PromptCache | None = None,
    draft_tree_budget: int | str | None = None,
) -> Iterator[GenerationResponse]:
    """Generate from ``prompt``, speculating with ``drafter``; see module doc.
    ``prompt_cache``: reuse and extend a conversation's cache (``make_prompt_cache``).
    ``draft_tree_budget``: max token-tree nodes per step, or ``"auto"`` (None: the
    ``DraftSpec``'s when ``drafter`` is one, else 0 = linear drafts); ``num_draft_tokens``
    likewise defaults to the spec's k (else 4)."""
    spec = drafter if isinstance(drafter, DraftSpec) else None
    if draft_tree_budget is None:
        draft_tree_budget = spec.draft_tree_budget if spec else 0
    if num_draft_tokens is None:
        num_draft_tokens = spec.num_draft_tokens if spec else 4
    tokens = encode_prompt(tokenizer, prompt, system=system, chat=chat)
    drafter = resolve_drafter(drafter, tokenizer, num_draft_tokens=num_draft_tokens,
                              ngram_min=ngram_min, ngram_max=ngram_max,
                              temperature=temperature, seed=seed)
    stats = SpecStats()
    step_log: list[tuple[int, int]] = []  # one tuple per step: cheap, and the bench's ceiling needs it
    out = TextOut(tokenizer, stop)
    finish, n = "stop", 0
    stream = token_stream(
        model,
        tokens,
        drafter=drafter,
        max_tokens=max_tokens,
        num_draft_tokens=num_draft_tokens,
        eos=tokenizer.eos_token_ids,
        sampling=SamplingParams(
            temperature, top_p, top_k, min_p, seed, repetition_penalty, repetition_context_size
        ),
        prefill_step_size=prefill_step_size,
        kv_bits=kv_bits,
        kv_group_size=kv_group_size,
        diagnostics=diagnostics,
        top_logprobs=top_logprobs,
        stats=stats,
        step_log=step_log,
        prompt_cache=prompt_cache,
        tree_budget=draft_tree_budget,
    )
    for e in stream:
        n += 1
        text, hit = out.feed(e.token)
        yield GenerationResponse(
            text, e.token, e.from_draft, stats, margin=e.margin, logprob=e.logprob,
            top_logprobs=e.top,
        )
        if hit:
            finish = "stop_string"
            stream.close()  # now, not at garbage collection: a prompt cache settles here
            break
        if n >= max_tokens:
            finish = "length"
    tail = out.tail() if finish != "stop_string" else ""
    reason = "length" if finish == "length" else "stop"
    yield GenerationResponse(tail, None, False, stats, reason, prompt_ids=tokens, step_log=step_log)


def generate(model: Any, tokenizer: Any, prompt: Any, **kwargs: Any) -> GenerationResult:
    """Run ``stream_generate`` to completion; same keyword arguments."""
    text, toks, margins, logprobs = [], [], [], []
    for resp in stream_generate(model, tokenizer, prompt, **kwargs):
        text.append(resp.text)
        if resp.token is not None:
            toks.append(resp.token)
            logprobs.append(resp.logprob)
            if resp.margin is not None:
                margins.append(resp.margin)
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
