"""Lossless WeDLM: the model's own mask predictions are the drafts (``--draft-type wedlm``).

The target IS the WeDLM model: one forward of the uncached context plus k mask tokens, each
mask row's argmax drafting its position; only the leading run of confident masks is proposed
(``WedlmSettings``' threshold, at least one). The verifier checks them like any drafter's, so
the output is token for token the AR decoding. Weights are shared with the target; the KV
cache is the drafter's own, holding exactly the context it has seen (mask slots trimmed
after every proposal). Full contract: docs/design-notes.md. Tests: tests/decode/test_wedlm.py,
tests/drafters/test_wedlm.py.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from ..cache.prompt_cache import common_prefix
from ..core.wedlm import WedlmSettings, pick
from .base import EMPTY, Drafter, Proposal


class WedlmDrafter(Drafter):
    """Drafts the next k tokens from one WeDLM mask-window forward (module doc)."""

    name = "wedlm"

    def __init__(self, model: Any, settings: WedlmSettings, *, eos: frozenset = frozenset()):
        self.model = model
        self.settings = settings
        self.mask_token_id = settings.mask_token_id
        self.eos = eos
        self._cache: list | None = None
        self._tokens: list[int] = []
        self._known = 0  # context[:_known] is known to equal _tokens[:_known]
        self.stats = {"proposals": 0, "drafted": 0, "accepted": 0, "forwards": 0}

    @property
    def cache(self) -> list | None:
        """The drafter's per-layer cache (None before ``begin``): read it, do not change it."""
        return self._cache

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys/values the drafter's cache holds (a copy)."""
        return list(self._tokens)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Prefill the drafter's cache with the prompt (inside the engine's prefill); a
        new request compares its prompt with what the cache holds once, from its start."""
        self._known = 0
        self._sync(prompt_ids)
        if len(prompt_ids) > len(self._tokens):
            mx.eval(self.model(mx.array(list(prompt_ids[len(self._tokens):]))[None], cache=self._cache))
            self._tokens = list(prompt_ids)
        self._known = len(self._tokens)

    def _sync(self, context: Sequence[int]) -> None:
        """Trim the cache back to its longest prefix shared with ``context``. Within a
        request the context only grows past what was fed (``_known``): only the tokens
        after it are compared, not the whole context at every step."""
        if self._cache is None:
            self._cache, self._tokens, self._known = make_prompt_cache(self.model), [], 0
        keep = common_prefix(self._tokens, context, self._known)
        if keep < len(self._tokens):
            trim_prompt_cache(self._cache, len(self._tokens) - keep)
            del self._tokens[keep:]
        self._known = keep

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if k < 1 or not context:
            return EMPTY
        self._sync(context)
        new = list(context[len(self._tokens):])
        block = mx.array(new + [self.mask_token_id] * k)[None]
        logits = self.model(block, cache=self._cache)[0, len(new):]
        tok, fill = pick(logits, range(k), self.settings)
        mx.eval(tok, fill)  # the one host sync of a proposal
        fill = fill.tolist()
        # the leading confident run (WeDLM's commit rule), at least the first slot
        n = next((i for i, f in enumerate(fill) if not f), k)
        drafts = tok.tolist()[:max(1, n)]
        trim_prompt_cache(self._cache, k)  # drop the mask slots: the cache holds the context
        self._tokens += new
        self._known = len(self._tokens)  # == len(context): it matches by construction
        self.stats["forwards"] += 1
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        self.stats["proposals"] += 1
        self.stats["drafted"] += len(drafts)
        return Proposal(drafts)

    def observe(self, num_accepted: int) -> None:
        self.stats["accepted"] += num_accepted
