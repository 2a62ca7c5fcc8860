"""True ceilings for a bench case: the oracle drafter and the all-matches tree bound.

Contract:
- ``OracleDrafter(turns)`` replays the plain (greedy) output of each turn of a case: at
  every step it proposes exactly the next ``k`` tokens plain decoding produced, so every
  draft is accepted. Measured like any config, it is the upper bound of *any* drafter at
  that k on this hardware: what is left between a config and the oracle is the drafter's
  misses and its own cost. One drafter serves a whole conversation (``begin`` moves to
  the next turn), as the bench's configs do.
- ``replay_bound(prompt, plain, k, cost, n_min=1, n_max=3)`` replays the plain output
  offline and counts, per verify step, the tokens two prompt-lookup strategies would
  emit (``ngram.all_match_continuations`` merged by ``trie.merge_paths``, walked by
  ``trie.walk``): the most recent match's continuation (today's linear ``ngram``), and the union
  of *every* earlier match's continuation verified as one token tree (the all-matches
  bound). With the verify cost curve it gives each one's modelled speedup, and the same
  under a flat curve (Metal/CUDA to ~32 tokens), so a CPU where trees do not pay still
  shows what the same trees would give where verifying is nearly free.

      prompt "a b c a b d", plain "a b c a b d": after "d" the suffix "d" has no earlier
      match; after "a" both "a b c" and "a b d" continue it, and the tree holds both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import sys

from ..drafters.base import Drafter, Proposal
from ..drafters.ngram import all_match_continuations
from ..drafters.trie import merge_paths, walk
from ..policy.tree_shape import cost_at


class OracleDrafter(Drafter):
    """Proposes the plain output's next tokens (see module doc)."""

    name = "oracle"

    def __init__(self, turns: Sequence[Sequence[int]]):
        self.turns = [list(t) for t in turns]
        self.turn = -1
        self.start = 0

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.turn += 1
        self.start = len(prompt_ids)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if self.turn >= len(self.turns):
            return Proposal()
        i = len(context) - self.start
        return Proposal(self.turns[self.turn][i : i + k])


@dataclass
class Bound:
    """Per-step replay totals of one strategy: tokens emitted, verify steps, the cost of
    those steps in plain-step units (measured curve and flat curve)."""

    tokens: int = 0
    steps: int = 0
    nodes: int = 0
    cost_units: float = 0.0

    def add(self, emitted: int, nodes: int, cost: Mapping[int, float]) -> None:
        self.tokens += emitted
        self.steps += 1
        self.nodes += nodes
        self.cost_units += cost_at(cost, nodes + 1) / cost[1]

    def summary(self) -> dict:
        return dict(tokens=self.tokens, steps=self.steps, nodes=self.nodes,
                    cost_units=self.cost_units, tokens_per_step=self.tokens / self.steps if self.steps else 0.0,
                    nodes_per_step=self.nodes / self.steps if self.steps else 0.0,
                    speedup=self.tokens / self.cost_units if self.cost_units else 0.0,
                    speedup_flat=self.tokens / self.steps if self.steps else 0.0)


def replay_bound(prompt: Sequence[int], plain: Sequence[int], k: int, cost: Mapping[int, float],
                 n_min: int = 1, n_max: int = 3) -> dict[str, dict]:
    """Replay ``plain`` after ``prompt``: {"linear": ..., "all_matches": ...} summaries
    (tokens per step, nodes verified per step, modelled speedup with ``cost`` and with a
    flat curve). A flat curve makes a step cost one plain step whatever its size."""
    linear, tree = Bound(), Bound()
    for strategy, bound in (("linear", linear), ("tree", tree)):
        pos = 0
        while pos < len(plain):
            context = list(prompt) + list(plain[:pos])
            conts = all_match_continuations(context, n_min, n_max, k)
            trie = merge_paths(conts[:1] if strategy == "linear" else conts, sys.maxsize, k)
            emitted = min(walk(trie, plain[pos : pos + k]) + 1, len(plain) - pos)
            bound.add(emitted, len(trie), cost)
            pos += emitted
    return {"linear": linear.summary(), "all_matches": tree.summary()}
