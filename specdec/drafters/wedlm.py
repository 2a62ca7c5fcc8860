"""Lossless WeDLM: the model's own mask predictions are the drafts, made by the same forward
that verifies (``--draft-type wedlm``). Tests: tests/drafters/test_wedlm.py,
tests/decode/test_wedlm.py.

The target IS the WeDLM model. Each verify block ``[last, d1..dn]`` asks (``wants``) for a tail of
k + 1 mask tokens after it and their logits: causal attention keeps the block's AR logits exactly what they
are without it, and the masks predict the positions after ``dn``. If every draft is accepted
the first mask stands where the target's own token went, so masks 2..k+1 are the next
proposal (its leading confident run, at least one); after a rejection they followed a wrong
token and are dropped (the next block carries no drafts, only the tail). The tail is rolled
back with the rejected drafts: no second forward, no cache of its own. docs/wedlm.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..core.proposal import Returned, Wants
from ..core.wedlm import WedlmSettings, pick
from .base import EMPTY, Drafter, Proposal


@dataclass
class Predicted:
    """A tail's mask predictions (device arrays, evaluated by the step's host sync) and the
    block they followed: ``start`` = len(context) then, ``drafts`` verified in it."""

    start: int
    drafts: tuple[int, ...]
    tokens: Any = None  # mx.array (k + 1,): each mask's token
    fill: Any = None  # mx.array (k + 1,): whether WeDLM's rule would fill it

    def follows(self, context: Sequence[int]) -> bool:
        """Whether ``context`` is that block's context + all its drafts + one token."""
        n = len(self.drafts)
        return len(context) == self.start + n + 1 and tuple(context[self.start:self.start + n]) == self.drafts


class WedlmDrafter(Drafter):
    """Drafts from the mask tail of the last verify step (module doc)."""

    name = "wedlm"
    outputs = True
    guesses_paused = False  # no verify step, no predictions

    def __init__(self, settings: WedlmSettings, *, eos: frozenset = frozenset()):
        self.settings, self.eos = settings, eos
        self._k = 0  # the depth last asked: the next tail holds k + 1 masks
        self._predicted: Predicted | None = None
        self.stats = {"proposals": 0, "drafted": 0, "accepted": 0, "tails": 0}

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._predicted = None

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants | None:
        if self._k < 1:
            return None
        predicted = Predicted(len(context), tuple(drafts))

        def read(returned: Returned) -> list[Any]:  # (k + 1, V): mask i's distance from the first is i
            logits = returned.tail_logits
            predicted.tokens, predicted.fill = pick(logits, range(logits.shape[0]), self.settings)
            self._predicted = predicted
            return [predicted.tokens, predicted.fill]

        self._predicted = None  # until this tail is read, nothing predicts the next context
        self.stats["tails"] += 1
        return Wants(read, tail=(self.settings.mask_token_id,) * (self._k + 1))

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._k = k
        p, self._predicted = self._predicted, None
        if k < 1 or p is None or p.tokens is None or not p.follows(context):
            return EMPTY
        # mask 1 stood where the target's token now is: the drafts are the masks after it
        tokens, fill = p.tokens.tolist()[1:k + 1], p.fill.tolist()[1:k + 1]  # evaluated: no sync
        n = next((i for i, f in enumerate(fill) if not f), len(fill))  # the leading confident run
        drafts = tokens[:max(1, n)]
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        self.stats["proposals"] += 1
        self.stats["drafted"] += len(drafts)
        return Proposal(drafts)

    def observe(self, num_accepted: int) -> None:
        self.stats["accepted"] += num_accepted
