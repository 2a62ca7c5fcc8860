"""The cost gate on a live clock: a recorded run of (offer, accepted, step time) fed to it
as the decode loop does decides as the replay's synthetic clock does (lab/gate-trace), and
what a paused token's ask costs stays inside the shadow budget."""

from specdec.drafters import Drafter, Proposal
from specdec.policy.drafting import StepTime
from specdec.policy.gate import SHADOW_SHARE, CostGate
from specdec.policy.learnt import KEPT_SEEN, Learnt, LearntCurves

CPU = {L: 1.0 + 0.12 * (L - 1) for L in range(1, 18)}  # this CPU: cost(5) ~ 1.5 x cost(1)


class Clock:
    """Simulated seconds: the machine advances it, the gate reads it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Offers(Drafter):
    """Offers one token, 5, every time (the suffix drafter's one-token match); each ask
    takes ``ask`` simulated seconds."""

    name = "offers"
    guesses_paused = True

    def __init__(self, clock, ask=0.0):
        self.clock, self.ask, self.calls = clock, ask, 0

    def propose(self, context, k):
        self.calls += 1
        self.clock.now += self.ask
        return Proposal([5][:k])


def truth(i):
    """The answer's token i: new text first (the offer is never right: the gate pauses and
    times plain tokens), then text the offer gets right at 3 of every 10 positions."""
    return 5 if i >= 150 and i % 10 in (0, 3, 6) else 9


def decode(gate, clock, live, tokens=600):
    """Drive ``gate`` as ``decode.loop`` does over the answer ``truth``: a verify step of L
    tokens takes CPU[L] seconds; a pipelined plain token CPU[1], of which the loop's own
    time (``live``) sees only the wait: the host's quarter (the offer's pricing, the
    caller's work) overlaps the forward, and the stretch's last token, already computed,
    lands in 0.05 s. Not ``live``: the step times are the seconds themselves (the replay's
    clock). Returns the verify steps that drafted."""
    ctx, drafted, landing = [1, 2, 3], 0, False
    gate.begin(ctx)
    while len(ctx) < tokens:
        if gate.paused or landing:  # a pipelined plain token (and the one in flight at resume)
            wait = 0.05 if landing else 0.75 * CPU[1]
            clock.now += CPU[1] - wait  # the host's work between tokens, overlapped
            clock.now += wait
            gate.took(StepTime(0, wait if live else CPU[1]))
            ctx.append(truth(len(ctx)))
            gate.watch(ctx)
            landing = not landing and not gate.paused
            continue
        proposal = gate.propose(ctx, 8)
        accepted = int(bool(proposal) and truth(len(ctx)) == proposal.tokens[0])
        clock.now += CPU[1 + len(proposal)]
        gate.took(StepTime(1 + len(proposal), CPU[1 + len(proposal)]))
        if proposal:  # an offer cut to nothing is a plain verify step: nothing to observe
            gate.observe(accepted)
        drafted += bool(proposal)
        ctx += [truth(len(ctx) + i) for i in range(accepted + 1)]
    return drafted


def test_live_step_times_decide_as_the_replays_clock():
    """One-token offers accepted 40 % of the time pay on this curve (1.4 tokens for 1.12 of
    a plain token's time). Timed on the loop's own clock, a plain token read 0.75 of its
    wall time (and 0.05 at each resume): the gate learnt a plain token at ~0.8 of a verify
    step and paused on them (issue #46: live 1.40 tokens per forward, replay 1.46). On the
    wall clock between steps it drafts as the replay's clock makes it."""
    clock = Clock()
    replay = CostGate(Offers(clock), CPU, k_max=8, clock=clock)
    want = decode(replay, clock, live=False)
    clock = Clock()
    gate = CostGate(Offers(clock), CPU, k_max=8, clock=clock)
    got = decode(gate, clock, live=True)
    assert want > 100, "the replay's gate should draft the offers that pay"
    assert abs(got - want) <= 0.05 * want, f"live drafted {got} steps, the replay {want}"
    assert abs(gate.plain_seconds() - replay.plain_seconds()) < 0.05 * CPU[1]


def test_a_paused_tokens_ask_stays_inside_the_shadow_budget():
    """Asking a host drafter for its offer and pricing it on every paused token is free
    beside a CPU's plain token, not beside a fast device's: at 0.2 of a plain token per ask
    (3.2x the budget) the gate asks about every fourth token, and the asks' time stays
    within ``SHADOW_SHARE`` of the plain decoding watched (one ask's time of slack); at
    1/1000 it asks every token."""
    for ask, every in ((0.2, False), (0.001, True)):
        clock = Clock()
        drafter = Offers(clock, ask=ask)
        gate = CostGate(drafter, CPU, k_max=8, clock=clock)
        ctx = [1, 2, 3]
        gate.begin(ctx)
        for _ in range(400):  # plain decoding never emits the offer: it pauses for good
            ctx.append(9)
            gate.watch(ctx)
        assert gate.paused
        spent = drafter.calls * ask
        if every:
            assert drafter.calls == 400
        else:
            assert spent <= SHADOW_SHARE * 400 * gate.plain_seconds() + ask
            assert drafter.calls >= 400 // 5  # still watching: every fourth token here


class Offering(Drafter):
    """Offers one token, 5, where the answer holds it (every fourth position from ``start``:
    a copy's scattered tokens), nothing elsewhere: every offer made is accepted."""

    name = "offering"
    guesses_paused = True

    def __init__(self, start):
        self.start = start

    def propose(self, context, k):
        return Proposal([5][:k] if right(len(context), self.start) else [])


def right(i, start):
    return i >= start and i % 4 == 0


def answer(gate, clock, start, tokens):
    """``decode``'s loop over an answer of ``tokens`` whose offers are all right; returns
    the verify steps that drafted one."""
    ctx, drafted, landing = [1, 2, 3], 0, False
    gate.begin(ctx)
    while len(ctx) < tokens:
        if gate.paused or landing:
            clock.now += CPU[1]
            gate.took(StepTime(0, CPU[1]))
            ctx.append(5 if right(len(ctx), start) else 9)
            gate.watch(ctx)
            landing = not landing and not gate.paused
            continue
        proposal = gate.propose(ctx, 8)
        clock.now += CPU[1 + len(proposal)]
        gate.took(StepTime(1 + len(proposal), CPU[1 + len(proposal)]))
        if proposal:
            gate.observe(1)
        drafted += bool(proposal)
        ctx += [5 if right(len(ctx), start) else 9 for _ in range(1 + bool(proposal))]
    return drafted


def test_a_resume_out_of_a_pipelined_stretch_is_not_a_token_late():
    """Issue #46, q281 (live 27 accepted, its replay 35): a pipelined stretch queues the next
    token's forward before the gate sees this one, so an offer seen while paused is drafted
    a token late, and a one-token offer never: here every offer is right, one token long,
    between tokens with nothing to offer. Where a pipelined token saves nothing over a
    one-token verify step (this clock: both take CPU[1]) the gate keeps to verify steps
    between drafts and drafts every offer from its first measured plain tokens on (before:
    it paused at every empty offer and drafted none of them)."""
    clock = Clock()
    gate = CostGate(Offering(150), CPU, k_max=8, clock=clock)
    drafted = answer(gate, clock, 150, 600)
    assert not gate.pipelines(), "a pipelined token saves nothing here: it should watch on verify steps"
    assert drafted >= (600 - 150) // 4 - 5, f"drafted {drafted} of ~{(600 - 150) // 4} offers that pay"


def test_a_short_answer_drafts_on_what_the_requests_before_learnt_of_pipelining():
    """Issue #46: a gate learnt per request what a pipelined token saves, and a short answer
    ends before it is measured: until then a resume out of a pipelined stretch is followed by
    a verify step, its first offer drafted late. Gates sharing ``Learnt`` (one per curve:
    ``build.policy_for``) start from what the request before measured: a 16-token answer then
    drafts 2 of its 3 offers (fresh: fewer); a gate without it learns alone."""
    memory, clock = Learnt(), Clock()
    answer(CostGate(Offering(150), CPU, k_max=8, clock=clock, memory=memory), clock, 150, 600)
    assert memory.seen > 0 and memory.ratio == 1.0  # a plain token took what a verify step does
    clock = Clock()
    fresh = answer(CostGate(Offering(4), CPU, k_max=8, clock=clock), clock, 4, 16)
    clock = Clock()
    carried = answer(CostGate(Offering(4), CPU, k_max=8, clock=clock, memory=memory), clock, 4, 16)
    assert carried == 2 and fresh < carried, (fresh, carried)


class Script(Drafter):
    """Offers ``offers[len(context)]`` (nothing elsewhere): an answer's offers, scripted."""

    name = "script"
    guesses_paused = True

    def __init__(self, offers):
        self.offers = offers

    def propose(self, context, k):
        return Proposal(self.offers.get(len(context), [])[:k])


def steps(gate, out, prompt=(1, 2, 3)):
    """The live loop over the answer ``out`` (``answer``'s: a resume out of a pipelined stretch
    emits the token in flight plain first, ``L``), as step strings: ``P`` a pipelined token,
    ``D{k}a{accepted}`` a verify step."""
    ctx, seen, landing, clock = list(prompt), [], False, gate.clock
    gate.begin(ctx)
    while len(ctx) < len(prompt) + len(out):
        t = len(ctx) - len(prompt)
        if gate.paused or landing:
            clock.now += CPU[1]
            gate.took(StepTime(0, CPU[1]))
            ctx.append(out[t])
            gate.watch(ctx)
            seen.append("L" if landing else "P")
            landing = not landing and not gate.paused
            continue
        draft = list(gate.propose(ctx, 8).tokens)
        accepted = next((i for i, (a, b) in enumerate(zip(draft, out[t:])) if a != b), len(draft))
        clock.now += CPU[1 + len(draft)]
        gate.took(StepTime(1 + len(draft), CPU[1 + len(draft)]))
        if draft:
            gate.observe(accepted)
        seen.append(f"D{len(draft)}a{accepted}")
        ctx += out[t:t + accepted + 1]
    return seen


def test_a_short_answer_whose_first_offer_is_right_drafts_it_at_its_first_step():
    """Issue #46 (translation-181): a host drafter's gate started paused, so the prompt's offer
    was never looked at and the first offers that paid were drafted a token late (``P P P L``)
    even where the requests before measured that a pipelined token saves ~nothing over a
    one-token verify step (this CPU: 0.99 of one). Where the carried saving is less than what
    drafting the prompt's offer late would lose, it is priced at ``begin`` (nothing is in flight
    yet) and drafted at the first step; where pipelining is not measured yet, or saves more (a
    pipelined token at 0.8 of a verify step), the start stays paused (a wrong first offer then
    fails for free)."""
    out = [7, 8, 9, 5, 6, 4, 3, 2]
    offers = {3: [7, 8, 9]}  # the prompt's offer: the answer's first three tokens
    for ratio in (1.0, 0.99):
        carried = CostGate(Script(offers), CPU, k_max=8, clock=Clock(), memory=Learnt(ratio=ratio, seen=6))
        first = steps(carried, out)[0]
        assert first in ("D1a1", "D2a2", "D3a3"), f"first step {first}: the right prompt offer not drafted"
    fresh = CostGate(Script(offers), CPU, k_max=8, clock=Clock())
    assert steps(fresh, out)[0] == "P"
    saves = CostGate(Script(offers), CPU, k_max=8, clock=Clock(), memory=Learnt(ratio=0.8, seen=6))
    assert steps(saves, out)[0] == "P"


def test_the_next_process_starts_from_the_kept_pipelined_saving(tmp_path):
    """A process's first request (every ``specdec generate`` call) started paused, the saving
    unmeasured (docs/gate.md, "Reading a trace": translation-181 15 steps, ungated 13). The
    library's ``LearntCurves`` keeps the measured saving beside the cached curves at each
    request's end (``CostGate.end``), so the next process's first request drafts the prompt's
    right offer at its first step, as a request after a measured one does; without the store,
    or before anything was measured, it still starts paused."""
    def store(name):
        return tmp_path / f"{name}.json"

    out, offers = [7, 8, 9, 5, 6, 4, 3, 2], {3: [7, 8, 9]}
    clock = Clock()
    measured = CostGate(Offering(150), CPU, k_max=8, clock=clock, memory=LearntCurves(store=store).on(CPU))
    assert steps(CostGate(Script(offers), CPU, k_max=8, clock=Clock(),
                          memory=LearntCurves(store=store).on(CPU)), out)[0] == "P"  # nothing kept yet
    answer(measured, clock, 150, 600)
    measured.end([1, 2, 3])
    assert measured.memory.seen > 0 and len(list(tmp_path.iterdir())) == 1
    after = LearntCurves(store=store).on(CPU)  # the next process, the same curve
    assert (after.ratio, after.seen) == (measured.memory.ratio, measured.memory.seen)
    assert steps(CostGate(Script(offers), CPU, k_max=8, clock=Clock(), memory=after), out)[0] in ("D1a1", "D2a2", "D3a3")
    assert steps(CostGate(Script(offers), CPU, k_max=8, clock=Clock(),
                          memory=LearntCurves().on(CPU)), out)[0] == "P"  # no store: nothing carried


def test_a_kept_saving_is_written_only_when_learnt_and_an_unreadable_one_is_measured_again(tmp_path, caplog):
    """``Learnt.keep`` writes nothing when nothing was learnt since the file was read; a torn or
    foreign file is said (a warning naming it) and measured again, never trusted."""
    def store(name):
        return tmp_path / f"{name}.json"

    first = LearntCurves(store=store).on(CPU)
    first.keep()
    assert not list(tmp_path.iterdir())  # nothing measured: nothing kept
    first.ratio, first.seen = 0.97, 37
    first.keep()
    (path,) = tmp_path.iterdir()
    again = LearntCurves(store=store).on(CPU)
    assert (again.ratio, again.seen) == (0.97, KEPT_SEEN)  # capped: live steps still move it
    path.write_text('{"ratio": 0.5}')  # not ours: no sample count
    again.keep()  # read, not learnt since: left alone
    assert path.read_text() == '{"ratio": 0.5}'
    with caplog.at_level("WARNING"):
        cold = LearntCurves(store=store).on(CPU)
    assert (cold.ratio, cold.seen) == (1.0, 0) and str(path) in caplog.text


def test_a_cache_that_cannot_be_written_is_said_and_the_request_ends(tmp_path, caplog):
    """A request's end keeps the saving; where the cost cache cannot be written (here its
    directory is a file) that is a warning naming the file, not an error of the request."""
    blocked = tmp_path / "cost"
    blocked.write_text("")
    memory = LearntCurves(store=lambda name: blocked / f"{name}.json").on(CPU)
    memory.ratio, memory.seen = 0.97, 4
    with caplog.at_level("WARNING"):
        CostGate(Offering(150), CPU, k_max=8, clock=Clock(), memory=memory).end([1, 2, 3])
    assert str(blocked) in caplog.text and memory.kept == 4
