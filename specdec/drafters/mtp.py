"""Native MTP drafting (``--draft-type mtp [--draft-model DIR]``): the checkpoint's own
multi-token-prediction block (``eagle.mtp``) drafts from the target's last hidden state, read
from the forwards the target runs anyway (``core.proposal.Wants``: the output of the last
decoder layer, i.e. the final norm's input, normed here with the target's norm; no second
target forward).

The row bookkeeping is EAGLE-3's (``drafters.eagle``: one mechanism): every prefill chunk and
plain step feeds the block (``feed_wants``; a chunk's rows in its own sync, so the first step
drafts), every verify block's root and accepted drafts join it at the next proposal, each
position with the token that follows it, into the block's own KV cache (offset = the
target's); then it drafts k tokens greedily, each from its own previous output. Output never
changes: every draft is verified (hybrid targets roll back as always: ``cache.recurrent``).
Tests: tests/drafters/test_mtp.py.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ..core.proposal import Returned
from ..eagle.mtp import MtpHead, text_model
from .base import Drafter
from .eagle import EagleDrafter


class MtpDrafter(EagleDrafter):
    """Drafts with a checkpoint's MTP block fed from the target's forwards (module doc): EAGLE-3's
    drafter with the MTP block as its head and the target's normed last hidden state as the
    feature."""

    name = "mtp"
    # linear drafts only: EAGLE-2's tree (``eagle.tree``) reads an EAGLE-3 head's fc and draft
    # vocabulary, which an MTP block has not; a tree budget gets the linear draft (a one-branch tree)
    branches = False
    propose_tree = Drafter.propose_tree

    def __init__(self, head: MtpHead, target: Any, *, eos: frozenset = frozenset()):
        self.head, self.eos = head, eos
        self.layers = (len(text_model(target).model.layers),)  # capture id: the last layer's output
        self.begin(())

    def _features(self, returned: Returned) -> mx.array:
        return self.head.shared.norm(returned.hidden[self.layers[0]])
