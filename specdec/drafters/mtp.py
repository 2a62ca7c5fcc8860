"""Native MTP drafting (``--draft-type mtp [--draft-model DIR]``): the checkpoint's own
multi-token-prediction block (``eagle.mtp``) drafts from the target's last hidden state, read
from the verify forward that checks its drafts (``core.proposal.Wants``: the output of the last
decoder layer, i.e. the final norm's input, at every block row; no second target forward).

After a verify step the block is fed the positions the target kept (the block's root and its
accepted drafts) with the token that follows each, into its own KV cache, and drafts k tokens
greedily, each from its own previous output. A step with nothing to feed (the first, or after
plain tokens decoded without a verify step) drafts nothing. Output never changes: every draft
is verified (hybrid targets roll back as always: ``cache.recurrent``). Tests:
tests/drafters/test_mtp.py.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx

from ..core.proposal import Returned, Wants
from ..eagle.mtp import MtpHead, text_model
from .base import EMPTY, Drafter, Proposal
from .eagle import Verified


class MtpDrafter(Drafter):
    """Drafts with a checkpoint's MTP block fed from the verify forward (module doc)."""

    name = "mtp"
    outputs = True
    guesses_paused = False  # its hidden states come from verify steps

    def __init__(self, head: MtpHead, target: Any, *, eos: frozenset = frozenset()):
        self.head, self.eos = head, eos
        self.layer = len(text_model(target).model.layers)  # capture id: the last layer's output
        self._cache = head.make_cache()
        self._verified: Verified | None = None

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._cache, self._verified = self.head.make_cache(), None

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants:
        verified = Verified(len(context), tuple(drafts))

        def read(returned: Returned) -> list[Any]:
            verified.features = self.head.shared.norm(returned.hidden[self.layer])
            self._verified = verified
            return [verified.features]

        self._verified = None  # until this block is read, nothing feeds the head
        return Wants(read, layers=(self.layer,))

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        v, self._verified = self._verified, None
        n = v.kept(context) if v is not None and v.features is not None else 0
        if k < 1 or n < 1:
            return EMPTY
        follows = mx.array([list(context[v.start:v.start + n])])  # the token after each kept row
        drafts = self.head.draft(self._cache, v.features[None, :n], follows, k)
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        return Proposal(drafts)
