"""The cost gate: when it drafts, pauses and resumes, against the cost model it states, and
that a paused single stream decodes plain (pipelined) with output unchanged."""

import random

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import cached_tiny, examples

from specdec.decode.generation import Generation
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


def stretch(gate, seconds, tokens):
    """A pipelined plain stretch of ``tokens`` tokens of ``seconds`` each, timed as the loop
    times it on this CPU: the gate paused, its first token also waiting for the one queued
    after it, its landing (the gate resumed) for none."""
    gate._paused = True
    gate.step_time(0, 2 * seconds)
    for _ in range(tokens):
        gate.step_time(0, seconds)
    gate._paused = False
    gate.step_time(0, 0.05 * seconds)


def settle(gate, rate):
    """Acceptance estimates settled at ``rate`` for every slot, whatever the last draft did."""
    gate.slots = {state: SlotCounts([1e6] * 4, [rate * 1e6] * 4) for state in (0, 1, 2)}
    return gate


def run_steps(gate, steps, accepted, ctx=(1, 2, 3)):
    """``steps`` steps where the next ``accepted`` tokens are the drafter's guess (5) and
    the one after is not; the context grows as decoding would (a verify step of d drafted
    tokens emits min(accepted, d) + 1 of them)."""
    ctx = list(ctx)
    for _ in range(steps):
        p = gate.propose(ctx, 4)
        if p:
            gate.observe(min(accepted, len(p)))
        ctx += ([5] * accepted + [9])[:min(accepted, len(p)) + 1]
    return ctx


def test_a_host_drafter_starts_paused_and_drafts_an_offer_that_pays():
    """A host drafter's offer costs nothing to ask for, so the gate asks every token and
    drafts an offer only where its price pays: with no evidence yet (1/2 a slot) it does;
    after its offers fail it pauses, and an offer of another length is priced afresh."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    assert gate.paused and gate.peeks  # pipelined plain until ``watch`` sees an offer pay
    gate.watch([1, 2, 3, 7])
    assert not gate.paused and gate.propose([1, 2, 3, 7], 4)
    ctx = [1, 2, 3, 7]
    for _ in range(12):  # every draft rejected
        if gate.propose(ctx, 4):
            gate.observe(0)
        ctx.append(7)
    assert gate.paused and not gate.propose(ctx, 4)
    costly = CostGate(Fixed([5]), CPU, k_max=4, draft_cost={"fixed": 0.1, "per_token": 0.1})
    costly.begin([1])  # a draft model's cheapest probe is a verify step: it starts drafting
    assert not costly.peeks and not costly.paused and costly.propose([1], 4)


def failed_until_paused(gate, ctx, limit):
    """Fully rejected drafts until the gate prices the offer out (its ``propose`` is the
    decision: empty, and paused)."""
    failed = 0
    while gate.propose(ctx, 4):
        assert failed < limit, f"still drafting after {limit} fully rejected steps"
        gate.observe(0)
        ctx.append(7)
        failed += 1
    assert gate.paused
    return failed


def test_gate_pauses_within_a_few_failed_steps():
    """Drafts accepted for a while, then every one rejected (a quote ends): the gate
    pauses within a few rejections (9 here, 6 before the offer model: with offers all of one
    length the run-of-misses model must first win its weight back from the length model,
    which predicted the first miss better; ``policy/offers.py``)."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    gate.watch([1, 2, 3, 5])
    ctx = run_steps(gate, 8, accepted=4, ctx=[1, 2, 3, 5])
    assert not gate.paused and gate.chosen[-1] == 4
    failed_until_paused(gate, ctx, 10)


def test_a_run_of_rejections_pauses_even_after_misses_that_were_followed_by_hits():
    """A quote with slips (each miss followed by hits: what follows one miss looks good),
    then new text where every draft fails: the gate tells a run of misses from one miss
    and pauses within a few (with one state for every miss: 31 rejected drafts here)."""
    gate = CostGate(Fixed([5, 5, 5, 5]), CPU, k_max=4)
    gate.begin([1, 2, 3])
    ctx = [1, 2, 3, 5]
    gate.watch(ctx)
    for _ in range(10):
        for accepted in (3, 3, 0):
            assert gate.propose(ctx, 4), "paused while most drafts were accepted"
            gate.observe(accepted)
            ctx += [5] * accepted + [7]
    failed_until_paused(gate, ctx, 12)


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
        stretch(gate, CPU[1], 3)
    # no one-token verify step to tell the machine's load from this length's own cost: the
    # two share what was seen, and a step of 5 is priced at it
    assert abs(gate.priced()[5] * gate.scale - 2.0 * CPU[5]) < 0.1 * CPU[5]
    assert abs(gate.plain_seconds() - CPU[1]) < 0.05
    assert gate.best(4) == 0


def test_a_drafted_step_dearer_than_the_curve_says_is_priced_as_seen():
    """The curve's line priced a one-token draft ~10 ms above a one-token verify step where the
    engine's drafted step took ~16 ms more, so one-token drafts accepted 13 % of the time looked
    worth it and lost (qa-338 at 0.91x plain: lab/specbench/full-recheck). Interleaved, the two
    lengths tell the machine's load (the scale: a one-token step's) from what a drafted step
    costs beside it (the shape); the marginal draft stops, one-token verify steps keep their
    price, and the next request on the curve starts from the shape learnt."""
    gate = settle(CostGate(Fixed([5] * 4), CPU, k_max=4), 0.15)
    assert gate.best(1) == 1  # 1.15 tokens for 1.12 of a step, on the line
    for _ in range(150):
        gate.step_time(1, 1.25 * CPU[1])
        gate.step_time(2, 1.25 * 1.08 * CPU[2])
    assert abs(gate.scale - 1.25) < 0.02 and abs(gate.memory.shape[2] - 1.08) < 0.02
    assert gate.priced()[1] == CPU[1] and gate.best(1) == 0
    assert settle(CostGate(Fixed([5] * 4), CPU, k_max=4, memory=gate.memory), 0.15).best(1) == 0


def test_a_pipelined_stretchs_first_token_is_priced_with_its_landing():
    """Where the queue runs at once (this CPU) a pipelined stretch's first token waits for two
    forwards and its landing for none. The saving was learnt from the ten tokens after a verify
    step: the first counted, the landing (later) not, and a pipelined token read 10 % dearer than
    it is, as dear as a one-token verify step (qa-338 kept to verify steps). Counted as a pair at
    the landing, a stretch prices it at what its tokens take: 0.9 of a verify step."""
    gate = settle(CostGate(Fixed([5] * 4), CPU, k_max=4), 0.1)
    for _ in range(20):
        for _ in range(3):
            gate.step_time(1, CPU[1])
        stretch(gate, 0.9 * CPU[1], 20)
    assert abs(gate.plain_seconds() - 0.9 * CPU[1]) < 0.02


def test_a_paused_gate_prices_verify_steps_at_todays_speed():
    """The curve was timed while the machine ran at half today's speed, and the gate has
    only seen plain tokens (paused from its start): today's speed is the machine's, for
    verify steps as for plain ones, so drafts accepted 60 % of the time pay again
    (k = 3: 2.18 tokens for 1.36 plain tokens' time). Priced on the curve's load (verify)
    against today's (plain), they never did: the gate stayed paused all answer long
    (lab/gate-trace)."""
    slow = {L: 2.0 * c for L, c in CPU.items()}
    gate = settle(CostGate(Fixed([5] * 4), slow, k_max=4), 0.6)
    stretch(gate, CPU[1], 60)  # plain tokens today
    assert abs(gate.plain_seconds() - CPU[1]) < 0.05 and gate.scale < 0.55
    assert gate.best(4) == 3


def test_a_drafter_that_rarely_finds_anything_costs_no_verify_step_without_an_offer():
    """Each step without a proposal would be a one-token verify step, dearer than a
    pipelined plain token: a host drafter with no offer pauses at once, and resumes on the
    token where it finds one (a perfect offer, 1 step in 20)."""
    class Every(Fixed):
        def __init__(self, period):
            super().__init__([])
            self.period = period

        def propose(self, context, k):
            self.calls += 1
            return Proposal([5] * k if len(context) % self.period == 0 else [])

    gate = CostGate(Every(20), CPU, k_max=4)
    gate.begin([1])
    ctx, verify, drafted = [1], 0, 0
    while len(ctx) < 400:
        if gate.paused:
            ctx.append(5)
            gate.watch(ctx)
            continue
        verify += 1
        proposal = gate.propose(ctx, 4)
        if proposal:
            drafted += 1
            gate.observe(4)
        ctx += [5] * (1 + len(proposal))
    assert drafted >= 18 and verify - drafted <= drafted + 1  # one verify step per find, at most


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
        req = Request(model, p, Generation.of(max_tokens=48, num_draft_tokens=4), drafter=gate)
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


def drafted_share(p, n, cost, seed, tokens=600):
    """A world where every token is the drafter's guess (5) with probability ``p``, on
    its own: a host drafter offering ``n`` fives, gated. The share of the last half's
    tokens decoded in verify steps that drafted (the rest: plain, paused)."""
    rng = random.Random(seed)
    truth = [5 if rng.random() < p else 7 for _ in range(tokens + n + 1)]
    gate = CostGate(Fixed([5] * n), cost, k_max=n, timed=False)
    gate.begin([1])
    ctx, t, drafted = [1], 0, 0
    while t < tokens:
        if gate.paused:
            ctx.append(truth[t])
            t += 1
            gate.watch(ctx)
            continue
        proposal = gate.propose(ctx, n)
        a = next((i for i, g in enumerate(proposal.tokens) if g != truth[t + i]), len(proposal))
        if proposal:
            gate.observe(a)
            drafted += (a + 1) * (t >= tokens // 2)
        ctx += truth[t:t + a + 1]
        t += a + 1
    return drafted / (tokens - tokens // 2)


@settings(max_examples=examples(40), deadline=None)
@given(p=st.floats(0.0, 1.0), n=st.integers(1, 4), slope=st.floats(0.0, 0.4),
       seed=st.integers(0, 2**16))
def test_a_drafter_of_known_acceptance_is_kept_drafting_iff_drafting_pays(p, n, slope, seed):
    """Oracle: with each guess right with probability p, drafting k <= n of an offer of n
    tokens yields 1 + p + ... + p^k tokens for cost(k + 1), against 1 token for cost(1)
    plain. Where the best k pays by a fifth, the gate drafts nearly all along; where every
    k loses by a fifth, it stays paused nearly all along (the curve decides, no threshold
    by hand; the old gate's run-of-misses counts failed this, e.g. p = 0.3, n = 1)."""
    cost = {L: 1.0 + slope * (L - 1) for L in range(1, 6)}
    gain = max(sum(p ** i for i in range(k + 1)) / cost[k + 1] for k in range(1, n + 1))
    assume(abs(gain - 1.0) > 0.2)
    share = drafted_share(p, n, cost, seed)
    assert share > 0.8 if gain > 1 else share < 0.2
