"""One generation, as one value: what to sample, how to draft, when to stop and what to
report. Every edge builds it once (the library's keywords in ``engine``, the CLI's
``RunConfig.generation``, the server's ``admission.gen_request``, the bench) and passes it
unchanged down to the row (``decode.request.Request``); each default is defined here once
(the draft length: ``DraftSpec``'s).

Invariant: a ``Generation`` that exists is valid (``ValueError`` naming the parameter).
Runtime objects (the drafter, a prompt cache, a detokenizer, the stats) travel beside it,
never in it. Tests: tests/decode/test_request.py, tests/test_engine.py, tests/test_config.py.

    >>> Generation(max_tokens=8).k == DraftSpec.num_draft_tokens
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Sequence

from ..core.sampling import SamplingParams
from ..drafters.spec import DraftSpec


@dataclass(frozen=True)
class Generation:
    """Sampling, drafting, limits and outputs of one generation (see the module)."""

    max_tokens: int = 256
    draft: DraftSpec = field(default_factory=DraftSpec)  # k, tree budget, gate, draft types
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()  # stop strings (need a detokenizer: ``core.text.TextOut``)
    prefill_step_size: int = 512
    kv_bits: int | None = None  # quantized KV cache (None: full precision)
    kv_group_size: int = 64
    logprobs: bool = False  # the server reports each token's log-probability
    top_logprobs: int = 0  # the n most likely (token, logprob) per token
    diagnostics: bool = False  # the top-2 logit margin per token (parity reports)
    response_format: dict | None = None  # OpenAI's: the output follows its grammar

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.prefill_step_size < 1:
            raise ValueError(f"prefill_step_size must be >= 1, got {self.prefill_step_size}")
        if not 0 <= self.top_logprobs <= 100:
            raise ValueError(f"top_logprobs must be in [0, 100], got {self.top_logprobs}")
        self.sampling.validate()

    @property
    def k(self) -> int:
        """The draft length asked (the most; a cost gate picks each step's): the spec's."""
        return self.draft.num_draft_tokens

    def with_options(self, **changes: Any) -> "Generation":
        """A copy with ``changes`` applied (``None`` values keep the current field), validated."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def of(cls, *, num_draft_tokens: int | None = None, ngram_min: int | None = None,
           ngram_max: int | None = None, draft_tree_budget: int | str | None = None,
           draft: DraftSpec | None = None, stop: Sequence[str] | None = None,
           **given: Any) -> "Generation":
        """The value of a library call's keywords: ``None`` takes the default (for the
        drafting ones: ``draft``'s, else ``DraftSpec``'s), so a keyword left out and one
        given as None mean the same, and each default stays defined once."""
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown generation option(s): {', '.join(sorted(unknown))}")
        spec = (draft or DraftSpec()).with_options(
            num_draft_tokens=num_draft_tokens, ngram_min=ngram_min, ngram_max=ngram_max,
            draft_tree_budget=draft_tree_budget)
        return cls().with_options(draft=spec, stop=tuple(stop) if stop else None, **given)
