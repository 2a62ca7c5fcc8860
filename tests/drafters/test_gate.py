"""The cost gate: when it drafts, pauses and resumes, against the cost model it states, and
that a paused single stream decodes plain (pipelined) with output unchanged."""

import random

from conftest import cached_tiny

from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.drafters import Drafter, NgramDrafter, Proposal
from specdec.policy.adaptive import SlotCounts, expected_tokens
from specdec.policy.gate import SHADOW_SHARE, CostGate
from specdec.engine import token_stream
from specdec.measure import cost_curve_for

CPU = {L: 1.0 + 0.12 * (L - 1) for L in range(1, 18)}  # this CPU: cost(5) ~ 1.5 x cost(1)
FLAT = {L: 1.0 + 0.01 * (L - 1) for L in range(1, 18)}  # Metal/CUDA: nearly flat to 32


class Fixed(Drafter):
    """Proposes a fixed list (a real, trivial drafter)."""

    name = "fixed"

    def __init__(self, proposal):
        self.proposal, self.calls = proposal, 0

    def propose(self, context, k):
        self.calls += 1
        return Proposal(self.proposal[:k])


def settle(gate, rate):
    """Acceptance estimates settled at ``rate`` for every slot, whatever the last draft did."""
    gate.slots = {state: SlotCounts([1e6] * 4, [rate * 1e6] * 4) for state in (0, 1, 2)}
    return gate


def run_steps(gate, steps, accepted, ctx=(1, 2, 3)):
    """``steps`` drafted steps of which each accepts ``accepted`` tokens."""
    ctx = list(ctx)
    for _ in range(steps):
        p = gate.propose(ctx, 4)
        if p:
            gate.observe(min(accepted, len(p)))
        ctx.append(9)
    return ctx


def test_a_host_drafter_starts_paused_and_drafts_on_evidence():
    """A shadow guess costs a host drafter nothing, so the gate drafts only once the
    context shows it right: a prompt with nothing to copy costs no verify step at all."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    assert gate.paused and not gate.propose([1, 2, 3], 4)  # paused: a shadow guess instead
    gate.watch([1, 2, 3, 7])  # plain decoding emitted 7: the guess was wrong
    assert gate.paused and not gate.propose([1, 2, 3, 7], 4)
    gate.watch([1, 2, 3, 7, 5])  # the new guess's first token came true
    assert not gate.paused and gate.propose([1, 2, 3, 7, 5], 4)
    costly = CostGate(Fixed([5]), CPU, k_max=4, draft_cost={"fixed": 0.1, "per_token": 0.1})
    costly.begin([1])  # a draft model's cheapest probe is a verify step: it starts drafting
    assert not costly.paused and costly.propose([1], 4)


def test_gate_pauses_within_a_few_failed_steps():
    """Drafts accepted for a while, then every one rejected (a quote ends): the gate
    pauses within a few rejections, k shrinking on the way."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    gate.propose([1, 2, 3], 4)
    gate.watch([1, 2, 3, 5])  # evidence: it drafts
    run_steps(gate, 8, accepted=4)
    assert not gate.paused and gate.chosen[-1] == 4
    failed = 0
    while not gate.paused:
        assert failed < 6, "still drafting after 6 fully rejected steps"
        assert gate.propose([1, 2, 3, 5], 4)
        gate.observe(0)
        failed += 1
    assert not gate.propose([1, 2, 3, 5], 4)  # paused: nothing to verify
    assert gate.chosen[-failed:] == sorted(gate.chosen[-failed:], reverse=True)


def test_a_run_of_rejections_pauses_even_after_misses_that_were_followed_by_hits():
    """A quote with slips (each miss followed by hits: what follows one miss looks good),
    then new text where every draft fails: the gate tells a run of misses from one miss
    and pauses within a few (with one state for every miss: 31 rejected drafts here)."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    gate.propose([1, 2, 3], 4)
    ctx = [1, 2, 3, 5]
    gate.watch(ctx)  # evidence: it drafts
    for _ in range(10):
        for accepted in (3, 3, 0):
            assert gate.propose(ctx, 4), "paused while most drafts were accepted"
            gate.observe(accepted)
    assert not gate.paused  # a miss after a quote's hits: the next draft is still worth it
    failed = 0
    while not gate.paused:
        assert failed < 12, "still drafting after 12 fully rejected steps in a row"
        assert gate.propose(ctx, 4)
        gate.observe(0)
        failed += 1


def test_gate_resumes_when_shadow_guesses_come_true():
    inner = Fixed([5, 5])
    gate = CostGate(inner, CPU, k_max=2)
    gate.begin([1])
    ctx = run_steps(gate, 8, accepted=0)
    assert gate.paused
    watched = 0
    while gate.paused:  # plain decoding emits what the drafter guesses
        ctx.append(5)
        gate.watch(ctx)
        watched += 1
        assert watched < 40, "never resumed although every shadow guess came true"
    assert gate.propose(ctx, 2).tokens[:1] == (5,)  # drafting again (k from the estimates)


def test_the_threshold_comes_from_the_cost_curve():
    """Drafts accepted 10 % of the time pay where verified tokens are nearly free (k = 1:
    1.1 tokens for 1.01 of a forward), not where each costs 12 % of a forward (1.1 for
    1.12): no threshold is set by hand, the curve decides."""
    def settled(cost, rate):
        return settle(CostGate(Fixed([5] * 4), cost, k_max=4), rate)

    for cost in (FLAT, CPU):
        for rate in (0.05, 0.1, 0.3, 0.6, 0.9):
            acc = [rate] * 4
            want = max(range(5), key=lambda k: (expected_tokens(acc, k) / cost[k + 1], -k))
            assert settled(cost, rate).best(4) == want
    assert settled(CPU, 0.1).best(4) == 0 < settled(FLAT, 0.1).best(4)


def test_observed_step_overhead_turns_marginal_drafts_off():
    """Where a verify step really takes twice what the curve says (per-step host work on
    a fast device), drafts accepted 30 % of the time no longer pay."""
    gate = settle(CostGate(Fixed([5] * 4), CPU, k_max=4), 0.3)
    assert gate.best(4) > 0
    for _ in range(60):
        gate.step_time(5, 2.0 * CPU[5])
        gate.step_time(0, CPU[1])
    assert gate.scale > 1.8 and abs(gate.plain_seconds() - CPU[1]) < 0.05
    assert gate.best(4) == 0


def test_a_paused_gate_prices_verify_steps_at_todays_speed():
    """The curve was timed while the machine ran at half today's speed, and the gate has
    only seen plain tokens (paused from its start): today's speed is the machine's, for
    verify steps as for plain ones, so drafts accepted 60 % of the time pay again
    (k = 3: 2.18 tokens for 1.36 plain tokens' time). Priced on the curve's load (verify)
    against today's (plain), they never did: the gate stayed paused all answer long
    (docs/bench/gate-trace)."""
    slow = {L: 2.0 * c for L, c in CPU.items()}
    gate = settle(CostGate(Fixed([5] * 4), slow, k_max=4), 0.6)
    for _ in range(60):
        gate.step_time(0, CPU[1])  # a plain token today
    assert abs(gate.plain_seconds() - CPU[1]) < 0.05 and gate.scale < 0.55
    assert gate.best(4) == 3


def test_a_drafter_that_rarely_finds_anything_is_not_worth_its_steps():
    """Each step without a proposal is a one-token verify step, dearer than a pipelined
    plain token: a drafter that finds a (perfect) proposal in 1 step of 20 loses, one that
    finds it every time wins."""
    class Every(Fixed):
        def __init__(self, period):
            super().__init__([])
            self.period = period

        def propose(self, context, k):
            self.calls += 1
            return Proposal([5] * k if self.calls % self.period == 0 else [])

    def paused_after(period):
        gate = CostGate(Every(period), CPU, k_max=4)
        for _ in range(100):
            gate.step_time(1, 1.3 * CPU[1])  # a verify step: the host sync on top of the forward
            gate.step_time(0, CPU[1])
        ctx = [1]
        for _ in range(200):
            if gate.propose(ctx, 4):
                gate.observe(4)
            ctx.append(5)
        return gate.paused, gate.hit

    paused, hit = paused_after(20)
    assert paused and hit < 0.5
    assert paused_after(1) == (False, 1.0)


def test_shadow_guesses_of_a_costly_drafter_are_spaced():
    host = CostGate(Fixed([5]), CPU, k_max=4)
    assert host.interval() == 1
    model = CostGate(Fixed([5]), CPU, k_max=4, draft_cost={"fixed": 0.05, "per_token": 0.1})
    # a 4-token guess costs 0.45 of a forward: one guess per 0.45 / (1/16) = 7.2 -> 8 tokens
    assert model.interval() == 8 == -(-0.45 // SHADOW_SHARE)
    model.begin([1])
    run_steps(model, 10, accepted=0)
    assert model.paused
    calls, ctx = model.inner.calls, [1] * 20
    for _ in range(32):
        ctx.append(7)
        model.watch(ctx)
    assert model.inner.calls - calls == 4  # 32 watched tokens / 8


class Phased(Drafter):
    """Knows the reference output: right during even phases of ``span`` output tokens,
    wrong (every token shifted) during odd ones, so a gate must pause and resume."""

    name = "phased"

    def __init__(self, prompt, reference, span, vocab):
        self.n, self.ref, self.span, self.vocab = len(prompt), reference, span, vocab

    def propose(self, context, k):
        pos = len(context) - self.n
        truth = self.ref[pos:pos + k]
        if (pos // self.span) % 2 == 0:
            return Proposal(truth)
        return Proposal([(t + 1) % self.vocab for t in truth])


def gated_run(model, prompt, ref, sampling=SamplingParams(), span=16, tokens=96):
    # this CPU's curve shape at the tiny model's measured scale (its own curve is flat:
    # a tiny model's forward is all overhead, which would make any draft free)
    one = cost_curve_for(model, 5)[1]
    gate = CostGate(Phased(prompt, ref, span, 64), {L: one * c for L, c in CPU.items()}, k_max=4,
                    timed=False)  # a tiny model's step times are all host noise
    stats = SpecStats()
    out = [e.token for e in token_stream(model, prompt, drafter=gate, max_tokens=tokens,
                                         num_draft_tokens=4, stats=stats, sampling=sampling)]
    return out, stats, gate


def test_paused_stretches_decode_plain_and_resume_with_output_unchanged():
    model = cached_tiny("llama")
    prompt = [random.Random(3).randrange(64) for _ in range(20)]
    ref = [e.token for e in token_stream(model, prompt, max_tokens=96)]
    out, stats, gate = gated_run(model, prompt, ref + [0] * 8)
    assert out == ref
    # it drafted (good phases), paused into plain stretches (bad ones) and came back
    assert stats.accepted > 20 and gate.paused_tokens > 10
    assert 0 < stats.draft_steps and stats.verify_steps - stats.draft_steps > 10


def test_seeded_sampling_through_paused_stretches_equals_plain_seeded_sampling():
    model = cached_tiny("gemma3")
    prompt = [random.Random(5).randrange(64) for _ in range(20)]
    params = SamplingParams(temperature=0.8, seed=11)
    ref = [e.token for e in token_stream(model, prompt, max_tokens=96, sampling=params)]
    out, stats, gate = gated_run(model, prompt, ref + [0] * 8, sampling=params)
    assert out == ref
    assert stats.accepted > 10 and gate.paused_tokens > 10


def test_each_batched_row_is_gated_on_its_own():
    """Two rows in one batch (the server's path): the row whose drafts keep failing
    pauses and proposes nothing more, the other keeps drafting; both equal plain."""
    from specdec.decode import loop
    from specdec.decode.batch import Batch
    from specdec.decode.request import Request

    model = cached_tiny("llama")
    one = cost_curve_for(model, 5)[1]
    cost = {L: one * c for L, c in CPU.items()}
    prompts = [[random.Random(s).randrange(64) for _ in range(20)] for s in (7, 8)]
    refs = [[e.token for e in token_stream(model, p, max_tokens=48)] for p in prompts]
    gates, reqs = [], []
    for p, ref, right in zip(prompts, refs, (True, False)):
        drafter = Phased(p, ref + [0] * 8, 1000, 64)  # one phase longer than the output
        if not right:  # the same proposals, every token shifted: every draft rejected
            drafter.ref = [(t + 1) % 64 for t in drafter.ref]
        gate = CostGate(drafter, cost, k_max=4, timed=False)
        req = Request(model, p, drafter=gate, max_tokens=48, num_draft_tokens=4)
        req.start()
        assert req.prefill()
        gates.append(gate)
        reqs.append(req)
    batch, out = Batch(model, None, learn=False), [[], []]
    for req in reqs:
        batch.join(req.row(), req.layers)
    while batch.rows:
        steps = loop.step(batch)
        for j in reversed(range(len(batch.rows))):
            i = reqs.index(next(r for r in reqs if r.row() is batch.rows[j]))
            out[i] += [e.token for e in reqs[i].feed(steps[j])]
            if reqs[i].finish_reason:
                batch.leave(j)
    assert out == refs
    good, bad = reqs[0].stats, reqs[1].stats
    assert gates[1].paused_tokens > 10 and bad.draft_steps < good.draft_steps
    assert good.accepted > 30 and gates[0].paused_tokens <= 2  # the first shadow guess
