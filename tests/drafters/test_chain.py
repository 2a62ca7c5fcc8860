"""Chains, gates and adaptive k: behaviour against simple oracles, parity on tiny models."""

import random

import pytest
from conftest import assert_stats_speculated, cached_tiny

from specdec.drafters import Drafter, NgramDrafter, NoDrafter, Proposal
from specdec.policy.adaptive import AdaptiveK
from specdec.drafters.chain import ChainDrafter
from specdec.policy.gate import CostGate
from specdec.engine import token_stream
from specdec.core.stats import SpecStats


class Fixed(Drafter):
    """A real (if trivial) drafter: proposes a fixed list; used to observe wrappers."""

    def __init__(self, name, proposal):
        self.name, self.proposal, self.seen = name, proposal, []

    def propose(self, context, k):
        return Proposal(self.proposal[:k])

    def observe(self, n):
        self.seen.append(n)


def test_chain_first_nonempty_wins_and_keeps_stats():
    a, b = Fixed("a", []), Fixed("b", [1, 2, 3])
    chain = ChainDrafter([a, b])
    assert chain.propose([0], 2).tokens == (1, 2)
    chain.observe(1)
    assert b.seen == [1] and a.seen == []
    assert chain.stats == {"a": {"won": 0, "drafted": 0, "accepted": 0},
                           "b": {"won": 1, "drafted": 2, "accepted": 1}}


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_wrappers_keep_parity_on_tiny_models(arch):
    model = cached_tiny(arch)
    rng = random.Random(4)
    motif = [rng.randrange(64) for _ in range(4)]
    prompt = (motif * 10)[:37]
    ref = [e.token for e in token_stream(model, prompt, max_tokens=48)]
    cost = {L: 1.0 + 0.15 * (L - 1) for L in range(1, 18)}
    drafters = [
        ChainDrafter([NoDrafter(), NgramDrafter(2, 3), NgramDrafter(1, 1)]),
        CostGate(NgramDrafter(1, 3), cost, k_max=16, timed=False),  # the curve's units are not seconds
        AdaptiveK(NgramDrafter(1, 3), cost, k_max=16),
    ]
    for d in drafters:
        stats = SpecStats()
        out = [e.token for e in token_stream(model, prompt, drafter=d, max_tokens=48,
                                             num_draft_tokens=16, stats=stats)]
        assert out == ref, d.name
        assert_stats_speculated(stats, f"{arch} {d.name}")
