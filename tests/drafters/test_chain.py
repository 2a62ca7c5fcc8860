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

    def end(self, tokens):
        self.ended = list(tokens)


def test_chain_first_nonempty_wins_and_keeps_stats():
    a, b = Fixed("a", []), Fixed("b", [1, 2, 3])
    chain = ChainDrafter([a, b])
    assert chain.propose([0], 2).tokens == (1, 2)
    chain.observe(1)
    assert b.seen == [1] and a.seen == []
    assert chain.stats == {"a": {"won": 0, "drafted": 0, "accepted": 0},
                           "b": {"won": 1, "drafted": 2, "accepted": 1}}
    CostGate(chain, {1: 1.0, 2: 1.1, 3: 1.2}, k_max=2).end([0, 1, 5])  # every member hears the end,
    assert a.ended == b.ended == [0, 1, 5]  # through a policy too (ngram-mod writes its tail)


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


HOST, HEAD = {"fixed": 0.0, "per_token": 0.0}, {"fixed": 0.001, "per_token": 0.5}
CURVE = {L: 1.0 + 0.02 * (L - 1) for L in range(1, 10)}  # verifying 9 costs 1.16 plain forwards


def priced_chain(first, second):
    """``suffix,eagle`` of two fixed offers, each member's measured cost given as
    ``measure.draft_cost_for`` gives a chain's (the sum, and "members")."""
    chain = ChainDrafter([Fixed("suffix", first), Fixed("eagle", second)])
    chain.draft_cost = {"fixed": 0.001, "per_token": 0.5, "members": {"suffix": HOST, "eagle": HEAD}}
    return chain, CostGate(chain, CURVE, k_max=8, draft_cost=chain.draft_cost, timed=False)


def test_the_gate_prices_a_chains_offer_by_the_member_that_made_it():
    """The head's 0.5 s per token summed into the chain's cost must not cut suffix's offer:
    priced as suffix's alone (a gate over suffix by itself cuts it the same), while the
    head's own offer, made when suffix has none, is priced with the head's cost (0: plain)."""
    offer = [1, 2, 3, 4, 5, 6, 7, 8]
    chain, gate = priced_chain(offer, [9, 9])
    alone = CostGate(Fixed("suffix", offer), CURVE, k_max=8, draft_cost=HOST, timed=False)
    got, want = gate.propose([0], 8), alone.propose([0], 8)
    assert chain.proposer is chain.drafters[0] and chain.proposer_cost == HOST and gate.peeks
    assert gate.interval() == alone.interval() == 1  # paused, asked every token as suffix alone
    assert got.tokens == want.tokens and len(got) > 0
    chain, gate = priced_chain([], [9, 9])
    assert not gate.propose([0], 8) and chain.proposer_cost == HEAD
    chain, gate = priced_chain([], [9, 9])
    chain.drafters[1].draft_cost = HOST  # the same offer, free: drafted
    assert gate.propose([0], 8).tokens == (9, 9)


class Alternate(Drafter):
    """Offers the text's next 4 tokens every other ask (``right``), else 4 wrong ones every
    ask it is given (``right=False``): a copy that always hits, or a head that always misses."""

    def __init__(self, name, text, right):
        self.name, self.text, self.right, self.asks = name, text, right, 0

    def propose(self, context, k):
        self.asks += 1
        if not self.right:
            return Proposal([999] * min(k, 4))
        n = len(context)
        return Proposal(self.text[n:n + min(k, 4)] if self.asks % 2 else [])


def test_each_member_of_a_chain_offers_on_its_own_model_and_state():
    """``suffix,eagle`` where the head's offers (made when suffix has none) always miss and
    suffix's always hit: suffix's offers are priced as a gate over suffix alone prices them,
    fed the same text (issue #47: with one offer model and state for the chain, the head's
    misses kept the state in a run of misses and cut suffix's offers, 1.17 tokens per forward
    against suffix alone's 1.36)."""
    cpu = {L: 1.0 + 0.12 * (L - 1) for L in range(1, 10)}
    text = list(range(100, 400))
    chain = ChainDrafter([Alternate("suffix", text, True), Alternate("eagle", text, False)])
    gates = [CostGate(chain, cpu, k_max=8, timed=False),
             CostGate(Alternate("suffix", text, True), cpu, k_max=8, timed=False)]
    contexts = [text[:10], text[:10]]
    for step in range(40):
        for gate, ctx in zip(gates, contexts):
            p = gate.propose(ctx, 8)
            truth = text[len(ctx):]
            accepted = next((i for i, t in enumerate(p.tokens) if t != truth[i]), len(p))
            if p:
                gate.observe(accepted)
            ctx[:] = text[:len(ctx) + accepted + 1]
        if step % 2 == 0:  # suffix offered: priced alike, on the same history
            (chained, alone) = (g.describe() for g in gates)
            assert chained["accept"] == alone["accept"] and chained["offer"] == alone["offer"] == 4
            assert gates[0].chosen[-1] == gates[1].chosen[-1] > 0
        assert len(contexts[0]) == len(contexts[1])
    assert chain.stats["eagle"]["won"] == 20 and chain.stats["eagle"]["accepted"] == 0
