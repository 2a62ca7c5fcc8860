"""EAGLE-3 drafting (``--draft-type eagle --draft-model DIR``): a trained head (``eagle.head``)
drafts from the target's own features, read from the forwards the target runs anyway — it
declares ``outputs``: ``wants`` the inputs of the head's three target layers at every verify
block row, ``feed_wants`` them at every position a prefill chunk or a plain step feeds
(``core.proposal.Wants``): no second target forward, no host sync of its own there.

Each captured row (target position p) is fed to the head's own small KV cache with the token
that follows it (``context[p + 1]``): a prefill chunk's in the chunk's own sync (the prompt
holds those tokens; so the first step drafts), a verify block's root and accepted drafts and a
plain step's row at the next proposal, once the context holds them (in order, at most
``FEED_CHUNK`` per head forward), then the head drafts k tokens greedily
(``Eagle3Head.draft``); with a tree budget, ``propose_tree`` grows EAGLE-2's dynamic tree from
its top-k (``eagle.tree``), and a tree block keeps the root's and the accepted path's rows
(``TreeRows``), as a linear block of that path would. Positions no forward returned to it
(a prompt cache's reused prefix) are missing from the head's cache: its drafts are then worse,
never wrong. In a chain it drafts at most ``max_k`` tokens (``eagle.io.chain_k``: the head's
config, from its measured acceptance by position). Output never changes: every draft is verified. Tests:
tests/drafters/test_eagle.py, tests/eagle/test_tree.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx

from ..core.proposal import Returned, Wants
from ..eagle.io import chain_k
from ..eagle.tree import TreeShape, accepted_path, tree_draft
from .base import EMPTY, Drafter, Proposal

FEED_CHUNK = 512  # head rows per forward while catching up
MAX_PENDING = 4096  # captured steps kept for the next proposal (a row long undrafted: oldest go)


@dataclass
class Rows:
    """Captured features of target positions ``pos..pos + n - 1`` (``features`` (n, 3H), set
    by the step's sync); a verify block's rows also carry its ``drafts``: only the root and
    the accepted ones are kept (``kept``)."""

    pos: int
    features: Any = None
    drafts: tuple[int, ...] | None = None
    held: bool = False  # a prompt chunk's last row: the next chunk's first, or the first draft's

    def kept(self, context: Sequence[int]) -> int:
        """How many rows the context confirms (those whose next token it holds): of a verify
        block only the root and the accepted drafts, the drafts the context repeats (a
        rejected draft is never what the target emits in its place, greedy or sampled)."""
        if self.features is None:
            return 0
        n = min(int(self.features.shape[0]), len(context) - 1 - self.pos)
        if self.drafts is not None:
            after = context[self.pos + 1:self.pos + 1 + len(self.drafts)]
            n = min(n, 1 + next((i for i, (a, b) in enumerate(zip(after, self.drafts)) if a != b),
                                len(after)))
        return max(n, 0)


@dataclass
class TreeRows(Rows):
    """A token tree's block rows (``parents``): once the context shows the accepted path, the
    root's and the path's rows, as the linear block of that path would have given."""

    parents: tuple[int, ...] = ()

    def kept(self, context: Sequence[int]) -> int:
        if self.features is not None and self.parents and self.drafts is not None:
            path = accepted_path(Proposal(self.drafts, parents=self.parents), context[self.pos + 1:])
            self.features = self.features[mx.array([0] + [j + 1 for j in path])]
            self.drafts, self.parents = tuple(self.drafts[j] for j in path), ()
        return super().kept(context)


class EagleDrafter(Drafter):
    """Drafts with an EAGLE-3 head fed from the target's forwards (module doc)."""

    name = "eagle"
    outputs = True
    branches = True  # EAGLE-2's dynamic tree from the head's top-k (``propose_tree``)
    tree = TreeShape()
    guesses_paused = False  # its features come from the target's forwards: a paused gate probes

    def __init__(self, head: Any, *, eos: frozenset = frozenset(), max_k: int | None = None):
        """``max_k``: its cap in a chain (None: the head config's, ``eagle.io.chain_k``)."""
        self.head, self.eos = head, eos
        self.max_k = max_k if max_k is not None else chain_k(head.config)
        self.layers = tuple(head.config.aux_layer_ids)
        self.begin(())

    @property
    def fed(self) -> int:
        """Target positions whose features the head's cache holds."""
        return self._cache[0].offset

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._pending: list[Rows] = []
        self._cache, self._next = self.head.make_cache(), 0
        self._prompt = list(prompt_ids)

    def _features(self, returned: Returned) -> mx.array:
        return mx.concatenate([returned.hidden[i] for i in self.layers], axis=-1)

    def _capture(self, rows: Rows) -> Wants:
        def read(returned: Returned) -> list[Any]:
            rows.features = self._features(returned)
            return [rows.features]

        self._pending = self._pending[1 - MAX_PENDING:] + [rows]
        return Wants(read, layers=self.layers)

    def feed_wants(self, start: int, n: int) -> Wants:
        """A prompt chunk next in order is fed to the head in the chunk's own sync (the prompt
        holds each row's next token: a long prompt's features are never kept) but its last row,
        held for the next chunk or the first draft; other rows wait for the context to show
        their next tokens."""
        held = self._pending[0] if len(self._pending) == 1 and self._pending[0].held else None
        first = held.pos if held is not None else start
        if first != self._next or (self._pending and held is None) or start + n >= len(self._prompt):
            return self._capture(Rows(start))
        last = Rows(start + n - 1, held=True)
        self._pending, self._next = [last], last.pos
        follows = mx.array([self._prompt[first + 1:last.pos + 1]])

        def read(returned: Returned) -> list[Any]:
            feats = self._features(returned)
            feats = mx.concatenate([held.features, feats]) if held is not None else feats
            last.features = feats[-1:]
            fed = self.head.feed(self._cache, feats[None, :-1], follows) if feats.shape[0] > 1 else []
            return [last.features, *fed]

        return Wants(read, layers=self.layers)

    def wants(self, context: Sequence[int], drafts: Sequence[int]) -> Wants:
        return self._capture(Rows(len(context) - 1, drafts=tuple(drafts)))

    def tree_wants(self, context: Sequence[int], tree: Proposal) -> Wants:
        return self._capture(TreeRows(len(context) - 1, drafts=tree.tokens, parents=tree.parent_ids))

    def _ready(self, context: Sequence[int]) -> tuple[Any, list[int]] | None:
        """The pending rows the context confirms, in position order past those fed: (features
        (n, 3H), the token after each); None when there are none."""
        feats, follows = [], []
        later = [r for r in self._pending if r.pos >= len(context) - 1]  # a queued step's: next time
        for rows in self._pending:
            skip = max(self._next - rows.pos, 0)  # a row fed already (a block re-read)
            n = rows.kept(context)
            if n > skip:
                feats.append(rows.features[skip:n])
                follows += list(context[rows.pos + 1 + skip:rows.pos + 1 + n])
                self._next = rows.pos + n
        self._pending = later
        return (mx.concatenate(feats, axis=0), follows) if follows else None

    def _caught_up(self, context: Sequence[int], k: int) -> tuple[Any, list[int]] | None:
        """The rows to feed with this step's draft (features (n, 3H), the token after each),
        older ones fed alone first; None: nothing to draft from (or k < 1)."""
        ready = self._ready(context)
        if ready is None:
            return None
        feats, follows = ready
        while len(follows) > FEED_CHUNK or (k < 1 and follows):  # catching up: feed, draft nothing
            mx.eval(self.head.feed(self._cache, feats[None, :FEED_CHUNK],
                                   mx.array([follows[:FEED_CHUNK]])))
            feats, follows = feats[FEED_CHUNK:], follows[FEED_CHUNK:]
        return (feats, follows) if k >= 1 else None

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        ready = self._caught_up(context, k)
        if ready is None:
            return EMPTY
        feats, follows = ready
        drafts = self.head.draft(self._cache, feats[None], mx.array([follows]), k).tokens
        for i, t in enumerate(drafts):  # nothing after an EOS can be emitted
            if t in self.eos:
                drafts = drafts[:i + 1]
                break
        return Proposal(drafts)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """EAGLE-2's dynamic tree of at most ``budget`` nodes, ``k`` deep (``eagle.tree``); its
        first-child path is ``propose``'s draft, the rest the head's next most likely paths."""
        if budget <= k:  # room for the chain only: the linear draft is that tree
            return self.propose(context, budget)
        ready = self._caught_up(context, k)
        if ready is None:
            return EMPTY
        feats, follows = ready
        return tree_draft(self.head, self._cache, feats[None], mx.array([follows]), k, budget,
                          self.tree, self.eos)
