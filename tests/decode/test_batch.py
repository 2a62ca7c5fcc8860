"""Continuous batching with per-row speculation (``specdec.decode.batch``) against each request
decoded alone: rows join mid-run and leave when done, drafts differ per row, and the
per-row rollback (``batch_cache.trim_rows``) is checked against brute force."""


import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, cached_tiny, real_model, repetitive_prompt
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import KVCache

from specdec.decode import loop
from specdec.decode.batch import PARK_STEPS, Batch, batchable
from specdec.policy.block import choose_block, curve_cost, unknown_cost
from specdec.policy.pricing import BlockPrice, ema
from specdec.core.proposal import Proposal
from specdec.drafters import NgramDrafter, NoDrafter
from specdec.drafters.base import Drafter
from specdec.drafters.suffix import SuffixDrafter
from specdec.decode.request import Request, prefill_together
from specdec.engine import token_stream
from specdec.cache.prompt_cache import make_prompt_cache
from specdec.cache.batch_cache import RowsKVCache, trim_rows
from specdec.cache.rollback import RollbackError, make_cache
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
    req = Request(model, prompt, drafter=DRAFTERS[kind](), max_tokens=max_tokens,
                  num_draft_tokens=k, sampling=params, prompt_cache=cache)
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
    """SmolLM2-135M fp32: eight short chat questions (prompts of different lengths)
    prefilled in one batched forward, then decoded in one batch, plain rows and suffix
    rows (a flat cost: rows speculate): each row's tokens equal plain decoding alone."""
    model, tok = real_model("smollm2-135m")
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in short_questions(8)]
    reqs = [(0, p, "suffix" if i % 2 else "none", 24, SamplingParams()) for i, p in enumerate(prompts)]
    got, blocks = run_batch(model, reqs, lambda n: 1.0, together=True)
    for (_, prompt, _, m, _), toks in zip(reqs, got):
        assert toks == alone(model, prompt, "none", m)
    assert len({len(p) for p in prompts}) > 1 and max(blocks) > 1


def test_plain_rows_pipeline_and_join_and_leave_exactly():
    """Plain greedy rows: the next step is queued before one is read; a row leaving then
    gets back exactly its context but the last token, and a row joining gets its first
    token from the call after (the earlier rows keep theirs coming): all tokens equal
    each request alone."""
    model = cached_tiny("qwen2")
    prompts = [repetitive_prompt(s, n) for s, n in ((40, 30), (41, 22), (42, 35))]
    want = [alone(model, p, "none", 10) for p in prompts]
    batch, got, sizes = Batch(model, float, learn=False), [[], [], []], []
    join_all(model, batch, [(p, "none", 10, SamplingParams(), None) for p in prompts[:2]], True)
    for n in range(8):
        if n == 3:
            join_all(model, batch, [(prompts[2], "none", 10, SamplingParams(), None)], False)
        steps = loop.step(batch)
        sizes.append(len(steps))
        for i, s in enumerate(steps):
            got[i] += s.tokens
        assert batch.queued
    held = batch.leave(0)
    for _ in range(2):  # the others go on after it left
        for i, s in zip((1, 2), loop.step(batch)):
            got[i] += s.tokens
    assert sizes == [2, 2, 2, 2, 3, 3, 3, 3]  # the joining row's first token: one call later
    assert held[0].offset == len(prompts[0]) + len(got[0]) - 1
    assert [g == w[: len(g)] for g, w in zip(got, want)] == [True] * 3
    assert [len(g) for g in got] == [8, 10, 6]


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
    only if both rows' drafts held, and their acceptances sum to one), a row whose drafts
    would have been accepted is seen to have high acceptance, one whose drafts would not,
    low. (Where no block could pay even then, no drafter is asked: the next test.)"""
    model = cached_tiny("llama")
    batch = Batch(model, lambda n: 1.0 + n, learn=False)
    prompts = [repetitive_prompt(s, 20) for s in (30, 31)]
    for p, right in zip(prompts, (True, False)):
        req = Request(model, p, drafter=Scripted(p, alone(model, p, "none", 12), right), max_tokens=12)
        req.start()
        req.prefill()
        batch.join(req.row(), req.layers)
    for _ in range(10):
        assert [s.fed for s in loop.step(batch)] == [1, 1]
    assert batch.rows[0].alpha > 0.9 and batch.rows[1].alpha < 0.1


def test_paused_gates_let_a_batch_pipeline_and_watch_every_token():
    """Rows whose cost gates are paused (drafts that never hold) decode in pipelined
    plain steps, each gate watching every token it emits (its shadow guesses), as a
    single stream's plain stretch does; the tokens equal each request alone."""
    from specdec.drafters.gate import CostGate
    from specdec.measure import cost_curve_for

    model = cached_tiny("llama")
    cost = cost_curve_for(model, 5)
    prompts = [repetitive_prompt(s, 24) for s in (50, 51)]
    want = [alone(model, p, "none", 16) for p in prompts]
    batch, reqs, gates = Batch(model, curve_cost(cost), learn=False), [], []
    for p, w in zip(prompts, want):
        gates.append(CostGate(Scripted(p, w + [0] * 8, False), cost, k_max=4, timed=False))
        req = Request(model, p, drafter=gates[-1], max_tokens=16, num_draft_tokens=4)
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
    assert all(queued[:-1]) and all(g.paused and g.paused_tokens >= 15 for g in gates)


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


def test_choose_block_prefers_speculation_only_where_it_pays():
    rates = [0.9, 0.9, 0.9, 0.9]
    flat_then_steep = curve_cost({1: 1.0, 8: 1.0, 16: 2.0, 64: 8.0})
    assert choose_block([4] * 4, rates, flat_then_steep) == 2  # 4 rows x 2 = 8 tokens, still flat
    assert choose_block([0] * 4, rates, flat_then_steep) == 1  # nothing drafted: plain
    assert choose_block([4], [0.0], lambda n: 1.0 + n) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=4),
       st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_rows_cache_equals_brute_force(lengths, blocks, data):
    """Rows of different lengths join, then take blocks and keep a random prefix of each
    (``trim_rows``), rows leaving and joining on the way (``extract`` then ``filter``,
    ``extend``; holes and all):
    every row's unmasked keys equal exactly what it kept, in order, its RoPE offset counts
    them, and ``extract`` returns them as a KVCache."""
    B, tag = len(lengths), iter(range(1, 10_000))
    rows = [[float(next(tag)) for _ in range(n)] for n in lengths]
    cache = None
    def kv_of(r):
        kv = KVCache()
        if r:
            a = mx.array(r).reshape(1, 1, len(r), 1)
            kv.update_and_fetch(a, a)
        return kv

    for r in rows:
        one = RowsKVCache.from_kv(kv_of(r))
        cache = one if cache is None else (cache.extend(one) or cache)
    def extracted(i):
        got = cache.extract(i)
        assert got.offset == len(rows[i])
        assert (got.keys[0, 0, :, 0].tolist() if rows[i] else []) == rows[i]

    for fed in blocks:
        new = [[float(next(tag)) for _ in range(fed)] for _ in range(B)]
        keep = [data.draw(st.integers(0, fed)) for _ in range(B)]
        mask = cache.make_mask(fed, return_array=True)
        a = mx.array(new).reshape(B, 1, fed, 1)
        k, _ = cache.update_and_fetch(a, a)
        mask = mx.broadcast_to(mask, (B, 1, fed, k.shape[2]))  # (N, S) when nothing is masked
        # the last query of each row sees exactly that row's keys so far
        seen = [[v for v, m in zip(k[i, 0, :, 0].tolist(), mask[i, 0, -1].tolist()) if m]
                for i in range(B)]
        assert seen == [rows[i] + new[i] for i in range(B)]
        trim_rows([cache], fed, keep)
        rows = [rows[i] + new[i][: keep[i]] for i in range(B)]
        assert cache.offset.tolist() == [len(r) for r in rows]
        leaving = data.draw(st.sets(st.integers(0, B - 1), max_size=B - 1)) if B > 1 else set()
        for i in leaving:
            extracted(i)
        if leaving:
            stay = [i for i in range(B) if i not in leaving]
            cache.filter(stay)
            rows, B = [rows[i] for i in stay], len(stay)
            assert cache.offset.tolist() == [len(r) for r in rows]
        for n in data.draw(st.lists(st.integers(0, 9), max_size=2)):  # rows join the holes
            rows.append([float(next(tag)) for _ in range(n)])
            cache.extend(RowsKVCache.from_kv(kv_of(rows[-1])))
            B += 1
    for i in reversed(range(B)):
        extracted(i)


def test_trim_rows_refuses_what_it_cannot_do():
    c = RowsKVCache([0, 0])
    c.update_and_fetch(mx.zeros((2, 1, 3, 1)), mx.zeros((2, 1, 3, 1)))
    with pytest.raises(RollbackError, match="keep"):
        trim_rows([c], 2, [3, 0])
    with pytest.raises(RollbackError, match="cannot trim"):
        trim_rows([c], 4, [0, 0])
    with pytest.raises(RollbackError, match="not a RowsKVCache"):
        trim_rows(make_cache(cached_tiny("llama")), 1, [0])


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
    reqs = [Request(model, p, drafter=CountingSuffix(), max_tokens=m, num_draft_tokens=4)
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
        req = Request(model, p, drafter=Faulty() if i == 1 else NgramDrafter(1, 3),
                      max_tokens=20, num_draft_tokens=4)
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
