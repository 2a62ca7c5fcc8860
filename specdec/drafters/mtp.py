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

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx

from ..core.proposal import Returned, Wants
from ..eagle.mtp import MtpHead, text_model
from .base import EMPTY, Drafter, Proposal


@dataclass
class Verified:
    """A verify block the block asked hidden states of: ``start`` = len(context) then, the
    ``drafts`` in it, and its rows' normed hidden states once the step's sync has run."""

    start: int
    drafts: tuple[int, ...]
    features: Any = None


def kept(block: Verified, context: Sequence[int]) -> int:
    """How many of ``block``'s rows the target kept (its root and accepted drafts), read from
    any later ``context``: an accepted draft is in the context, a rejected one is not (the
    target's token there differs from it, greedy or sampled), so the matching prefix is exact."""
    tail, a = context[block.start:], 0
    while a < min(len(block.drafts), len(tail)) and tail[a] == block.drafts[a]:
        a += 1
    return min(a + 1, len(tail))


class MtpDrafter(Drafter):
    """Drafts with a checkpoint's MTP block fed from the verify forward (module doc). Blocks
    verified while it was not asked (a chain's other member won) are fed at its next turn."""

    name = "mtp"
    outputs = True
    guesses_paused = False  # its hidden states come from verify steps

    def __init__(self, head: MtpHead, target: Any, *, eos: frozenset = frozenset()):
        self.head, self.eos = head, eos
        self.layer = len(text_model(target).model.layers)  # capture id: the last layer's output
        self._cache = head.make_cache()
        self._pending: list[Verified] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._cache, self._pending = self.head.make_cache(), []

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants:
        verified = Verified(len(context), tuple(drafts))

        def read(returned: Returned) -> list[Any]:
            verified.features = self.head.shared.norm(returned.hidden[self.layer])
            return [verified.features]

        self._pending.append(verified)  # fed once read (a failed step's block never is)
        return Wants(read, layers=(self.layer,))

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if k < 1:  # not asked: what it was fed waits for its next turn
            return EMPTY
        blocks, self._pending = [v for v in self._pending if v.features is not None], []
        rows = [(v, n) for v in blocks if (n := kept(v, context)) > 0]
        if not rows:
            return EMPTY
        hidden = mx.concatenate([v.features[:n] for v, n in rows])[None]
        # the token after each kept row
        follows = mx.array([[t for v, n in rows for t in context[v.start:v.start + n]]])
        drafts = self.head.draft(self._cache, hidden, follows, k)
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        return Proposal(drafts)
