"""The ``grammar`` drafter: the tokens a request's grammar forces are free drafts.

Contract: ``GrammarDrafter()`` takes the request's grammar from ``constrain`` (the request
lifecycle calls it) and proposes ``grammar.forced(k)`` — the next tokens the
request's ``core.grammar.Grammar`` allows alone (keys, braces, ``"arguments": {`` …) —
and nothing where the grammar leaves a choice, so in a chain (``grammar,suffix``) the
next drafter proposes there. Without a grammar (a request with no ``response_format``)
it never proposes. Its proposals are also its ``forced`` ones, which the cost gate drafts
unpriced: the grammar admits no other text there, so only another split of that text into
tokens could reject them. The target still verifies every forced token: where the model would
have written the same text in other tokens, the draft is rejected and the output is
plain decoding's.
Tests: tests/drafters/test_grammar.py.
"""

from __future__ import annotations

from typing import Any, Sequence

from .base import EMPTY, Drafter, Proposal


class GrammarDrafter(Drafter):
    name = "grammar"

    def __init__(self, grammar: Any = None):
        self.grammar = grammar

    def constrain(self, grammar: Any) -> None:
        self.grammar = grammar

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if self.grammar is None:
            return EMPTY
        forced = self.grammar.forced(k)
        return Proposal(forced) if forced else EMPTY

    def forced(self, context: Sequence[int], k: int) -> Proposal:
        return self.propose(context, k)  # everything it proposes is forced
