"""Continuous batching with per-row speculation (``specdec.decode.batch``) against each request
decoded alone: rows join mid-run and leave when done, drafts differ per row (the per-row
rollback itself: tests/cache/test_batch_cache.py)."""


import pytest
from conftest import TINY_VOCAB, cached_tiny, real_model, repetitive_prompt

from specdec.decode.generation import Generation
from specdec.decode import loop
from specdec.decode.batch import PARK_STEPS, Batch, batchable
from specdec.policy.block import curve_cost, unknown_cost
from specdec.policy.pricing import BlockPrice, ema
from specdec.core.proposal import Proposal
from specdec.drafters import NgramDrafter, NoDrafter
from specdec.drafters.base import Drafter
from specdec.drafters.suffix import SuffixDrafter
from specdec.decode.request import Request, prefill_together
from specdec.engine import token_stream
from specdec.cache.prompt_cache import make_prompt_cache
from specdec.core.sampling import SamplingParams
from specdec.prompts import short_questions


DRAFTERS = {"none": NoDrafter, "ngram": lambda: NgramDrafter(1, 3), "suffix": SuffixDrafter}


def alone(model, prompt, kind, max_tokens, params=SamplingParams(), k=4):
    drafter = DRAFTERS[kind]()
    return [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens,
                                          num_draft_tokens=k, sampling=params)]


def start(model, prompt, kind, max_tokens, params=SamplingParams(), k=4, prefill=True, cache=None):
    """A started request's (row, cache layers, request, stats), through the lifecycle the
    server uses (``decode.request.Request``), prefilled unless ``prefill`` is False."""
    req = Request(model, prompt, Generation.of(max_tokens=max_tokens, num_draft_tokens=k, sampling=params),
                  drafter=DRAFTERS[kind](), prompt_cache=cache)
    req.start()
    assert not prefill or req.prefill()
    return req.row(), req.layers, req, req.stats


def join_all(model, batch, joining, together):
    """Start ``joining`` [(prompt, kind, max_tokens, params, prompt cache)] and join them:
    one at a time, or prefilled in one batched forward (``prefill_together``) when
    ``together``; returns their requests."""
    started = [start(model, *j[:4], prefill=not together, cache=j[4]) for j in joining]
    reqs = [s[2] for s in started]
    if together:
        batch.join_rows([r.row() for r in reqs], prefill_together(model, reqs))
    else:
        for row, layers, _, _ in started:
            batch.join(row, layers)
    return reqs


def run_batch(model, requests, cost, together=False, caches=None, parked=None):
    """Decode ``requests`` [(join step, prompt, kind, max_tokens, params)] in one Batch
    (request i with prompt cache ``caches[i]`` when given); returns each request's tokens
    and the block lengths of the steps with several rows. Rows a step finishes leave
    together (``leave_rows``), or park (``park_rows``, as the server) when ``parked`` is
    a list: it gets the number of parked slots after each step."""
    batch, pending = Batch(model, cost, learn=False), sorted(enumerate(requests), key=lambda r: r[1][0])
    out, live, blocks, step = {}, [], [], 0
    while pending or any(live):
        joining = []
        while pending and pending[0][1][0] <= step:
            joining.append(pending.pop(0))
        if joining:
            reqs = join_all(model, batch, [(*r[1:], caches[i] if caches else None) for i, r in joining],
                            together and len(joining) > 1)
            if not any(r.parked for r in batch.rows[:len(live)]):  # a join lets parked rows go
                live = [x for x in live if x is not None]
            live += [(i, req) for (i, _), req in zip(joining, reqs)]
            out.update({i: [] for i, _ in joining})
        if any(live):
            steps = loop.step(batch)
            if None in live and not any(r.parked for r in batch.rows):  # left before the step
                live = [x for x in live if x is not None]
            if len(steps) > 1:
                blocks.append(max(s.fed for s in steps))
            for x, s in zip(live, steps):
                if x is not None:
                    out[x[0]] += [e.token for e in x[1].feed(s)]
            done = [j for j, x in enumerate(live) if x is not None and x[1].finish_reason]
            held, gone = batch.park_rows(done) if parked is not None else (batch.leave_rows(done), done)
            for j, layers in zip(done, held):
                i = live[j][0]
                assert [c.offset for c in layers] == [len(requests[i][1]) + len(out[i]) - 1] * len(layers)
                live[j] = None
            live = [x for j, x in enumerate(live) if j not in set(gone)]
            assert len(live) == len(batch.rows)
            if parked is not None:
                parked.append(sum(r.parked for r in batch.rows))
        step += 1
    return [out[i] for i in range(len(requests))], blocks


MIXED = [  # (join step, prompt seed, prompt length, drafter, max tokens)
    (0, 0, 40, "ngram", 30), (0, 1, 25, "suffix", 24), (0, 2, 33, "none", 20),
    (3, 3, 50, "ngram", 28), (7, 4, 12, "suffix", 16), (9, 5, 40, "none", 12),
]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("cost", ["flat", "steep"])
def test_mixed_batch_equals_each_request_alone(arch, cost):
    """Greedy: every row's tokens equal plain decoding alone, with rows joining mid-run
    and leaving when done; a flat cost makes rows speculate (blocks > 1), a steep one (the
    server's price while no curve is known, ``unknown_cost``) makes the batch decode
    plainly (blocks of 1)."""
    model = cached_tiny(arch)
    reqs = [(j, repetitive_prompt(s, n), kind, m, SamplingParams()) for j, s, n, kind, m in MIXED]
    got, blocks = run_batch(model, reqs, (lambda n: 1.0) if cost == "flat" else unknown_cost)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    assert (max(blocks) > 1) if cost == "flat" else (set(blocks) == {1})


PARKING = [(0, s, 20 + 3 * s, kind, 6 + 3 * s) for s, kind in
           enumerate(["ngram", "suffix", "none", "ngram", "suffix", "none", "ngram", "suffix"])] \
    + [(14, 8, 30, "suffix", 12)]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_parked_rows_leave_together_and_change_no_output(arch):
    """Eight rows finishing on different steps, as the server runs them (``park_rows``):
    each finished row's cache is handed back exact at once, its slot stays parked until
    a quarter of the batch can leave in one copy (or a row joins, step 14), and every
    row's tokens equal plain decoding alone."""
    model = cached_tiny(arch)
    reqs = [(j, repetitive_prompt(s, n), kind, m, SamplingParams()) for j, s, n, kind, m in PARKING]
    parked = []
    got, blocks = run_batch(model, reqs, lambda n: 1.0, parked=parked)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    assert max(blocks) > 1 and max(parked) >= 1  # rows speculated, and slots were parked
    assert len([n for n in parked if n]) > 2  # parked slots rode along for several steps


def test_a_parked_row_leaves_once_it_has_cost_about_a_gather():
    """One of six rows finishes early (a sixth of the batch: under the quarter that
    leaves at once): its slot rides along for PARK_STEPS steps' worth of rows (12 steps
    here), then leaves while the others decode on, outputs unchanged."""
    model = cached_tiny("llama")
    reqs = [(0, repetitive_prompt(s, 20 + s), "none" if s else "ngram", 4 if s == 0 else 40,
             SamplingParams()) for s in range(6)]
    parked = []
    got, _ = run_batch(model, reqs, lambda n: 1.0, parked=parked)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    rode = [n for n in parked if n]
    assert rode and len(rode) <= PARK_STEPS * 6 and parked[parked.index(1) + len(rode)] == 0
    assert len(parked) > parked.index(1) + len(rode) + 10  # the others decoded on after it left


TOGETHER = [(0, 0, 40, "ngram", 30), (0, 1, 25, "suffix", 24), (0, 2, 33, "none", 20),
            (3, 3, 50, "ngram", 28), (3, 4, 12, "suffix", 16), (3, 5, 40, "none", 12)]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_rows_prefilled_together_equal_each_request_alone(arch):
    """Requests arriving together are prefilled in one batched forward (right-padded
    prompts of different lengths, one with a reused prefix from a prompt cache) and join
    at once, also into a running batch: every row's tokens equal plain decoding alone."""
    model = cached_tiny(arch)
    reqs = [(j, repetitive_prompt(s, n), kind, m, SamplingParams()) for j, s, n, kind, m in TOGETHER]
    cached = make_prompt_cache(model)
    for _ in token_stream(model, reqs[3][1][:30], max_tokens=1, prompt_cache=cached):
        pass  # the cache now holds a 30-token prefix of request 3's prompt
    caches = [None, None, None, cached, None, None]
    got, blocks = run_batch(model, reqs, lambda n: 1.0, together=True, caches=caches)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    assert max(blocks) > 1
    assert cached.tokens[:30] == reqs[3][1][:30]  # handed back holding the row


@pytest.mark.slow
def test_real_questions_prefilled_together_equal_each_alone():
    """SmolLM2-135M fp32: four short chat questions (prompts of different lengths)
    prefilled in one batched forward, then decoded in one batch, plain rows and suffix
    rows (a flat cost: rows speculate): each row's tokens equal plain decoding alone."""
    model, tok = real_model("smollm2-135m")
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in short_questions(4)]
    # 16 tokens, not 24, and four rows, not eight: each row's plain reference alone is most of
    # the time (CPU 43.8 s -> 27.2 s for the test); two plain and two suffix rows of four
    # lengths still prefill in one forward, and blocks of both suffix rows' drafts
    # (max(blocks) > 1) come within 16 (measured)
    reqs = [(0, p, "suffix" if i % 2 else "none", 16, SamplingParams()) for i, p in enumerate(prompts)]
    got, blocks = run_batch(model, reqs, lambda n: 1.0, together=True)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    assert len({len(p) for p in prompts}) > 1 and max(blocks) > 1, blocks


class Scripted(Drafter):
    """Proposes the next token of a known continuation (``right``) or a wrong one."""
    name = "scripted"

    def __init__(self, prompt, continuation, right):
        self.n, self.cont, self.right = len(prompt), continuation, right

    def propose(self, context, k):
        tok = self.cont[len(context) - self.n]
        return Proposal([tok if self.right else (tok + 1) % TINY_VOCAB])


def test_acceptance_is_learnt_from_drafts_a_plain_step_cuts():
    """With blocks priced out at the rows' estimates (every step plain: a block would pay
    only if both rows' drafts held, and their acceptances sum to one; the rows are asked in
    turn, one a step), a row whose drafts would have been accepted is seen to have high
    acceptance, one whose drafts would not, low. (Where no block could pay even then, no
    drafter is asked: ``test_a_batch_where_no_block_can_pay_asks_no_drafter``.)"""
    model = cached_tiny("llama")
    batch = Batch(model, lambda n: 1.0 + n, learn=False)
    prompts = [repetitive_prompt(s, 20) for s in (30, 31)]
    for p, right in zip(prompts, (True, False)):
        req = Request(model, p, Generation(max_tokens=24), drafter=Scripted(p, alone(model, p, "none", 24), right))
        req.start()
        req.prefill()
        batch.join(req.row(), req.layers)
    for _ in range(20):
        assert [s.fed for s in loop.step(batch)] == [1, 1]
    assert batch.rows[0].alpha > 0.9 and batch.rows[1].alpha < 0.1


class CountingScripted(Scripted):
    """``Scripted``, counting its proposals."""

    def __init__(self, prompt, continuation, right):
        super().__init__(prompt, continuation, right)
        self.asked = 0

    def propose(self, context, k):
        self.asked += 1
        return super().propose(context, k)


def test_a_priced_out_batch_asks_one_row_a_step_in_turn_and_drafts_again_once_it_pays():
    """Where the price rules out every block even at the rows' full depths (three rows at
    acceptance 1/2 on this curve; an all-accepted draft would still pay: not hopeless),
    each pipelined step asks one row's drafter, the rows in turn; their drafts hold, so the
    probed acceptance rises until a block pays, and from then the batch verifies drafts
    (every drafter asked again). Every row's tokens equal plain decoding alone (the rows
    not asked catch up from their contexts)."""
    model = cached_tiny("llama")
    batch = Batch(model, lambda n: 1.0 + n, learn=False)
    prompts = [repetitive_prompt(s, 20) for s in (60, 61, 62)]
    want = [alone(model, p, "none", 30) for p in prompts]
    reqs = []
    for p, w in zip(prompts, want):
        reqs.append(Request(model, p, Generation.of(max_tokens=30, num_draft_tokens=4),
                            drafter=CountingScripted(p, w, True)))
        reqs[-1].start()
        reqs[-1].prefill()
        batch.join(reqs[-1].row(), reqs[-1].layers)
    assert not batch.price.hopeless(3, 4) and batch.price.priced_out([4] * 3, [0.5] * 3)
    got, asked, fed = [[], [], []], [], []
    while not any(r.finish_reason for r in reqs):
        before = [r.drafter.asked for r in reqs]
        steps = loop.step(batch)
        asked.append([i for i, (r, b) in enumerate(zip(reqs, before)) if r.drafter.asked > b])
        fed.append(max(s.fed for s in steps))
        for i, s in enumerate(steps):
            got[i] += [e.token for e in reqs[i].feed(s)]
    resumed = next(n for n, f in enumerate(fed) if f > 1)  # the first step verifying drafts
    probes = [a for a in asked[:resumed] if len(a) == 1]
    assert len(probes) >= 9 and [a[0] for a in probes[:9]] == [0, 1, 2] * 3
    assert asked[resumed] == [0, 1, 2] and sum(f > 1 for f in fed) >= 3
    assert [g == w[:len(g)] for g, w in zip(got, want)] == [True] * 3


def test_paused_gates_let_a_batch_pipeline_and_watch_every_token():
    """Rows whose drafts never hold: their cost gates (a host drafter's, priced on its
    offers) pause within a few drafts and then decode in pipelined plain steps, each gate
    watching every token it emits (its shadow guesses), as a single stream's plain
    stretch does; the tokens equal each request alone. (A few: on this flat curve a
    one-token draft costs 1.06 plain steps, so it pays down to 6 % acceptance, which one
    pseudo-count at 1/2 reaches after a handful of misses: 5 drafted steps, 3 before the
    offer model counted the same misses at three levels; policy/offers.py.)"""
    from specdec.policy.gate import CostGate
    from specdec.measure import cost_curve_for

    model = cached_tiny("llama")
    cost = cost_curve_for(model, 5)
    prompts = [repetitive_prompt(s, 24) for s in (50, 51)]
    want = [alone(model, p, "none", 16) for p in prompts]
    batch, reqs, gates = Batch(model, curve_cost(cost), learn=False), [], []
    for p, w in zip(prompts, want):
        gates.append(CostGate(Scripted(p, w + [0] * 8, False), cost, k_max=4, timed=False))
        req = Request(model, p, Generation.of(max_tokens=16, num_draft_tokens=4), drafter=gates[-1])
        req.start()
        req.prefill()
        batch.join(req.row(), req.layers)
        reqs.append(req)
    got, live, queued = [[], []], [0, 1], []
    while live:
        steps = loop.step(batch)
        queued.append(batch.queued)
        for i, s in zip(live, steps):
            got[i] += [e.token for e in reqs[i].feed(s)]
        done = [j for j, i in enumerate(live) if reqs[i].finish_reason]
        batch.leave_rows(done)
        live = [i for j, i in enumerate(live) if j not in done]
    assert got == want
    unpiped = [i for i, q in enumerate(queued[:-1]) if not q]  # steps that verified drafts
    assert len(unpiped) <= 5 and len(queued) - len(unpiped) > 10
    assert all(g.paused and g.paused_tokens >= 10 and sum(map(bool, g.chosen)) <= 5 for g in gates)


def test_seeded_sampling_under_batching_reproduces_alone():
    """A seeded sampled row draws the same tokens in a batch as alone (same drafter
    kind and state), for a speculative and a plain row."""
    model = cached_tiny("llama")
    params = [SamplingParams(temperature=0.8, seed=s) for s in (3, 4)]
    reqs = [(0, repetitive_prompt(10, 30), "ngram", 24, params[0]), (0, repetitive_prompt(11, 20), "none", 24, params[1]),
            (2, repetitive_prompt(12, 30), "none", 10, SamplingParams())]
    got, _ = run_batch(model, reqs, lambda n: 1.0)
    for (_, prompt, kind, m, p), toks in zip(reqs, got):
        assert toks == alone(model, prompt, kind, m, p)


def test_observed_step_times_correct_the_curve():
    """A block length whose steps took twice what the curve said costs twice as much."""
    price = BlockPrice(lambda n: float(n), ratio={(3, 1): 1.0, (3, 3): 2.0, (2, 1): 5.0})
    cost = price.cost(4)  # 4 rows: size class 3
    assert (cost(4), cost(8), cost(12), cost(20)) == (4.0, 8.0, 24.0, 40.0)
    assert price.cost(3)(3) == 15.0 and price.cost(8)(8) == 8.0  # other classes


def test_a_price_learns_from_batched_steps_only():
    """``observe`` moves the ratio of a (size class, L) toward observed / predicted time,
    by ``ema``; a lone row's or an unlearning price's steps change nothing."""
    price = BlockPrice(lambda n: float(n))
    price.observe(4, 3, 24.0)  # twice the curve's 12
    price.observe(4, 3, 24.0)
    price.observe(1, 3, 100.0)
    assert price.ratio == {(3, 3): 2.0}
    frozen = BlockPrice(lambda n: float(n), learn=False)
    frozen.observe(4, 3, 24.0)
    assert frozen.ratio == {} and ema(2.0, 1.0) == pytest.approx(1.8)


def test_batchable_names_what_cannot_batch():
    assert batchable(cached_tiny("llama"), None) is None
    assert "KVCache" in batchable(cached_tiny("gemma3"), None)
    assert "kv-bits" in batchable(cached_tiny("llama"), 8)


def test_a_step_without_speculation_feeds_one_token_per_row():
    model = cached_tiny("llama")
    batch = Batch(model, lambda n: 1.0, learn=False)
    prompts = [repetitive_prompt(20, 30), repetitive_prompt(21, 24)]
    for p in prompts:
        row, layers, _, _ = start(model, p, "ngram", 12)
        batch.join(row, layers)
    steps = loop.step(batch, speculate=False)
    assert [s.fed for s in steps] == [1, 1]
    assert [s.tokens for s in steps] == [alone(model, p, "none", 1) for p in prompts]


class CountingSuffix(SuffixDrafter):
    """A suffix drafter that counts its proposals (the host work a batch step asks for)."""

    def __init__(self):
        super().__init__()
        self.proposals = 0

    def propose(self, context, k):
        self.proposals += 1
        return super().propose(context, k)


@pytest.mark.parametrize("cost", ["flat", "unknown"])
def test_a_batch_where_no_block_can_pay_asks_no_drafter(cost):
    """Where even drafts all accepted could not pay at the batch's size (the server's price
    while no curve is known), a batch step asks no drafter: the proposals would only feed an
    acceptance estimate that no step can use. A lone row asks again; output unchanged."""
    model = cached_tiny("llama")
    prompts = [repetitive_prompt(s, 30) for s in range(3)]
    reqs = [Request(model, p, Generation.of(max_tokens=m, num_draft_tokens=4), drafter=CountingSuffix())
            for p, m in zip(prompts, (12, 12, 20))]
    for r in reqs:
        r.start()
        assert r.prefill()
    batch = Batch(model, (lambda n: 1.0) if cost == "flat" else unknown_cost, learn=False)
    for r in reqs:
        batch.join(r.row(), r.layers)
    out, live, asked = {i: [] for i in range(3)}, list(range(3)), []
    while live:
        before = sum(r.drafter.proposals for r in reqs)
        steps = loop.step(batch)
        asked.append((len(live), sum(r.drafter.proposals for r in reqs) - before))
        for i, s in zip(live, steps):
            out[i] += [e.token for e in reqs[i].feed(s)]
        done = [j for j, i in enumerate(live) if reqs[i].finish_reason]
        batch.leave_rows(done)
        live = [i for j, i in enumerate(live) if j not in done]
    for i, p in enumerate(prompts):
        assert out[i] == alone(model, p, "none", (12, 12, 20)[i])
    several = [n for rows, n in asked if rows > 1]
    assert (sum(several) == 0) if cost == "unknown" else (sum(several) > 0)
    assert any(n > 0 for rows, n in asked if rows == 1)  # the lone row drafts again


class Faulty(NgramDrafter):
    """An n-gram drafter that raises on its third proposal (a drafter bug in one row)."""

    def __init__(self):
        super().__init__(1, 3)
        self.calls = 0

    def propose(self, context, k):
        self.calls += 1
        if self.calls == 3:
            raise KeyError("drafter bug")
        return super().propose(context, k)


def test_a_row_whose_drafter_fails_leaves_alone_and_the_others_are_unchanged():
    """The failure is that row's (``RowFailed`` names it, raised before the cache is
    touched); the rows left in the batch decode exactly as they would alone."""
    from specdec.decode.batch import RowFailed

    model = cached_tiny("llama")
    prompts = [repetitive_prompt(s, 30) for s in range(3)]
    reqs = []
    for i, p in enumerate(prompts):
        req = Request(model, p, Generation.of(max_tokens=20, num_draft_tokens=4),
                      drafter=Faulty() if i == 1 else NgramDrafter(1, 3))
        req.start()
        assert req.prefill()
        reqs.append(req)
    batch = Batch(model, lambda n: 1.0, learn=False)  # a flat cost: every row drafts
    for r in reqs:
        batch.join(r.row(), r.layers)
    live, out, failed = list(range(3)), {i: [] for i in range(3)}, []
    while live:
        try:
            steps = loop.step(batch)
        except RowFailed as e:
            failed.append(live[e.row])
            batch.leave_rows([e.row])
            live.pop(e.row)
            continue
        for i, s in zip(live, steps):
            out[i] += [e.token for e in reqs[i].feed(s)]
        done = [j for j, i in enumerate(live) if reqs[i].finish_reason]
        batch.leave_rows(done)
        live = [i for j, i in enumerate(live) if j not in done]
    assert failed == [1]
    for i in (0, 2):
        assert out[i] == alone(model, prompts[i], "none", 20)
