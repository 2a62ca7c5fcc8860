"""True ceilings for a bench case: the oracle drafter and the all-matches tree bound.

Contract: ``OracleDrafter(turns)`` proposes exactly the next ``k`` tokens plain decoding
produced (every draft accepted: the bound of any drafter at that k on this hardware);
``replay_bound(prompt, plain, k, cost)`` replays the plain output offline and models the
speedup of linear prompt lookup against every earlier match's continuation as one tree.
Tests: tests/bench/test_oracle.py. Details: docs/bench.md#the-oracle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import sys

from ..drafters.base import Drafter, Proposal
from ..drafters.ngram import all_match_continuations
from ..drafters.trie import merge_paths, walk
from ..policy.tree_shape import cost_at


class OracleDrafter(Drafter):
    """Proposes the plain output's next tokens (docs/bench.md#the-oracle)."""

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
