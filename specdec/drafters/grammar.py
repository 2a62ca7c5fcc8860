"""The ``grammar`` drafter: the tokens a request's grammar forces are free drafts.

Contract: ``GrammarDrafter()`` takes the request's grammar from ``constrain`` and proposes
``grammar.forced(k)`` (the tokens the grammar allows alone), nothing where the grammar leaves
a choice (so in a chain the next drafter proposes there), and never without a grammar. The
cost gate drafts these unpriced; the target still verifies every one, so the output stays
plain decoding's. Full contract: docs/agents-and-structured-output.md#the-grammar-drafter. Tests: tests/drafters/test_grammar.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .base import EMPTY, Drafter, Proposal

if TYPE_CHECKING:  # core.grammar imports mlx: for annotations only
    from ..core.grammar import Grammar


class GrammarDrafter(Drafter):
    name = "grammar"

    def __init__(self, grammar: Grammar | None = None):
        self.grammar = grammar

    def constrain(self, grammar: Grammar | None) -> None:
        self.grammar = grammar

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if self.grammar is None:
            return EMPTY
        forced = self.grammar.forced(k)
        return Proposal(forced) if forced else EMPTY

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        return self.propose(context, k)  # everything it proposes is forced
