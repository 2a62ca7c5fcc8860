"""Lossless WeDLM: the model's own mask predictions are the drafts (``--draft-type wedlm``).

The target IS the WeDLM model. To propose k tokens after ``context`` the drafter runs one
forward of the not-yet-cached context tokens followed by k mask tokens (all masks, so
their logical order is already the physical one) and takes each mask row's argmax as the
draft of that position (WeDLM predicts the token at a mask from the mask's own logits).
Only the leading run of confident masks is proposed (entropy + position penalty below the
threshold of its ``WedlmSettings``, WeDLM's own commit rule; at least one token), so a
low threshold drafts fewer, likelier tokens.
The engine's verifier then checks the drafts against the AR logits exactly as for every
other drafter (greedy: accept while equal; sampled: rejection sampling with the drafts
as point masses), so the output is token for token the AR decoding of the checkpoint.

Shared and not: the weights are shared with the target (same model object); the KV cache
is the drafter's own (a second mlx-lm cache of the same model, like the draft-model
drafter's), holding exactly the context it has seen: the k mask slots are trimmed after
every proposal. Tests: tests/decode/test_wedlm.py.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

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
        self.stats = {"proposals": 0, "drafted": 0, "accepted": 0, "forwards": 0}

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys/values the drafter's cache holds (a copy)."""
        return list(self._tokens)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Prefill the drafter's cache with the prompt (inside the engine's prefill)."""
        self._sync(prompt_ids)
        if len(prompt_ids) > len(self._tokens):
            mx.eval(self.model(mx.array(list(prompt_ids[len(self._tokens):]))[None], cache=self._cache))
            self._tokens = list(prompt_ids)

    def _sync(self, context: Sequence[int]) -> None:
        """Trim the cache back to its longest prefix shared with ``context``."""
        if self._cache is None:
            self._cache, self._tokens = make_prompt_cache(self.model), []
        keep = 0
        limit = min(len(self._tokens), len(context))
        while keep < limit and self._tokens[keep] == context[keep]:
            keep += 1
        if keep < len(self._tokens):
            trim_prompt_cache(self._cache, len(self._tokens) - keep)
            del self._tokens[keep:]

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
