"""EAGLE-3 drafting (``--draft-type eagle --draft-model DIR``): a trained head (``eagle.head``)
drafts from the target's own features, read from the verify forward that checks its drafts —
it declares ``outputs`` and ``wants`` the inputs of the head's three target layers at every
block row (``core.proposal.Wants``): no second target forward, no host sync of its own there.

After a verify step the head is fed the positions the target kept (the block's root and its
accepted drafts) with the token that follows each, into its own small KV cache, and drafts k
tokens greedily (``Eagle3Head.draft``). A step with nothing to feed (the first, or after plain
tokens decoded without a verify step) drafts nothing. Output never changes: every draft is
verified. Tests: tests/drafters/test_eagle.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx

from ..core.proposal import Returned, Wants
from .base import EMPTY, Drafter, Proposal


@dataclass
class Verified:
    """A verify block the head asked features of: ``start`` = len(context) then, the ``drafts``
    in it, and the features (block rows, 3 * H) once the step's sync has run."""

    start: int
    drafts: tuple[int, ...]
    features: Any = None

    def kept(self, context: Sequence[int]) -> int:
        """How many of the block's rows the context kept (root + accepted drafts; 0: none)."""
        accepted = len(context) - self.start - 1
        if not 0 <= accepted <= len(self.drafts) or tuple(context[self.start:self.start + accepted]) \
                != self.drafts[:accepted]:
            return 0
        return accepted + 1


class EagleDrafter(Drafter):
    """Drafts with an EAGLE-3 head fed from the verify forward (module doc)."""

    name = "eagle"
    outputs = True
    guesses_paused = False  # its features come from verify steps

    def __init__(self, head: Any, *, eos: frozenset = frozenset()):
        self.head, self.eos = head, eos
        self.layers = tuple(head.config.aux_layer_ids)
        self._cache = head.make_cache()
        self._verified: Verified | None = None

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._cache, self._verified = self.head.make_cache(), None

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants:
        verified = Verified(len(context), tuple(drafts))

        def read(returned: Returned) -> list[Any]:
            verified.features = mx.concatenate([returned.hidden[i] for i in self.layers], axis=-1)
            self._verified = verified
            return [verified.features]

        self._verified = None  # until this block is read, nothing feeds the head
        return Wants(read, layers=self.layers)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        v, self._verified = self._verified, None
        if k < 1 or v is None or v.features is None or (n := v.kept(context)) < 1:
            return EMPTY
        follows = mx.array([list(context[v.start:v.start + n])])  # the token after each kept row
        drafts = self.head.draft(self._cache, v.features[None, :n], follows, k).tokens
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        return Proposal(drafts)
