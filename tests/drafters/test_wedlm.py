"""drafters.wedlm: the mask tail rides on the verify forward (issue #37). One target forward
and one host sync per step, the cache holds exactly the context after every step, batched
rows and a paused gate keep AR parity (tiny random-weight qwen3, fp32 on CPU)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from decode.test_wedlm import MASK, PROMPT, _assert_cache_is_prefill, _CountingMx, ar, tiny
from specdec.decode.generation import Generation
from specdec.core.proposal import Returned
from specdec.core.wedlm import WedlmSettings
from specdec.decode import loop
from specdec.decode.batch import Batch
from specdec.decode.request import Request
from specdec.drafters.chain import ChainDrafter
from specdec.policy.gate import CostGate
from specdec.drafters.ngram import NgramDrafter
from specdec.drafters.wedlm import WedlmDrafter
from specdec.engine import token_stream

EVERY = WedlmSettings(mask_token_id=MASK, entropy_threshold=float("inf"))  # whole windows


class Forwards:
    """The model, its forwards counted (what a step costs: the drafter adds none)."""

    def __init__(self, model):
        self.model, self.calls, self.fed = model, 0, []

    def __call__(self, x, *a, **kw):
        self.calls += 1
        self.fed.append(x.shape[1])
        return self.model(x, *a, **kw)

    def __getattr__(self, name):
        return getattr(self.model, name)


def started(model, prompt, drafter, n=24, k=4):
    r = Request(model, prompt, Generation.of(max_tokens=n, num_draft_tokens=k), drafter=drafter)
    r.start()
    assert r.prefill()
    return r


def test_one_forward_per_step_and_the_cache_holds_the_context():
    model = tiny()
    counted, d = Forwards(model), WedlmDrafter(EVERY)
    req = started(counted, PROMPT, d)
    batch, row = Batch(counted), req.row()
    batch.join(row, req.layers)
    out, steps = [], 0
    counted.calls = 0
    while len(out) < 20:
        s = loop.step(batch)[0]
        steps += 1
        out += s.tokens
        assert s.fed == 1 + s.drafted + 5  # the root, the drafts, k + 1 masks
        # the masks and rejected drafts are rolled back: the cache is a causal prefill
        _assert_cache_is_prefill(model, batch.cache, row.context[:-1])
    assert counted.calls == steps  # no forward of the drafter's own
    assert out[:20] == ar(model, PROMPT, n=20)
    assert d.stats["drafted"] > d.stats["proposals"] > 0 and d.stats["tails"] == steps


def test_the_tail_is_read_in_the_steps_one_host_sync(monkeypatch):
    import specdec.decode.step as step_module

    model, d = tiny(1), WedlmDrafter(EVERY)
    req = started(model, PROMPT, d)
    batch = Batch(model)
    batch.join(req.row(), req.layers)
    counting = _CountingMx()
    monkeypatch.setattr(step_module, "mx", counting)
    for _ in range(6):
        loop.step(batch)
    assert counting.evals == 6 and d.stats["proposals"] > 0


@pytest.mark.parametrize("k", [1, 4, 16])
def test_batched_rows_with_their_own_tails_equal_each_alone(k):
    model = tiny()
    prompts = [PROMPT, [9, 8, 7, 6], PROMPT[:3] + [50, 51, 52, 53, 54]]
    batch, drafters = Batch(model), []
    for p in prompts:
        d = WedlmDrafter(EVERY)
        req = started(model, p, d, n=30, k=k)
        batch.join(req.row(), req.layers)
        drafters.append(d)
    outs = [[] for _ in prompts]
    while min(map(len, outs)) < 16:
        for o, s in zip(outs, loop.step(batch)):
            o += s.tokens
    for p, o in zip(prompts, outs):
        assert o[:16] == ar(model, p, n=16), p
    assert all(d.stats["proposals"] > 0 for d in drafters)


def test_a_chain_with_wedlm_keeps_its_tail_in_a_batch_whose_other_members_have_nothing():
    """After a rejection WeDLM proposes nothing until its next tail: a batch must not take
    that for 'no row drafts' and pipeline plain steps, which carry no tail (it would never
    draft again while the chain's other member has nothing to copy)."""
    model = tiny()
    prompts = [PROMPT, [9, 8, 7, 6]]
    batch, wedlm = Batch(model), []
    for p in prompts:
        d = WedlmDrafter(EVERY)
        req = started(model, p, ChainDrafter([d, NgramDrafter(3, 3)]), n=40)
        batch.join(req.row(), req.layers)
        wedlm.append(d)
    outs = [[] for _ in prompts]
    for _ in range(16):
        for o, s in zip(outs, loop.step(batch)):
            o += s.tokens
    for p, o in zip(prompts, outs):
        assert o == ar(model, p, n=len(o)), p
    assert all(d.stats["tails"] == 16 for d in wedlm)  # a tail every step, rejections or not


def test_a_paused_gate_probes_and_keeps_parity():
    """WeDLM cannot guess while paused: the gate probes it with verify steps instead of shadow
    guesses, so it drafts again after a pause (here: a model it never pays for)."""
    model = tiny()
    cost = {L: 1.0 + 0.5 * (L - 1) for L in range(1, 10)}  # drafting barely pays
    gate = CostGate(WedlmDrafter(EVERY), cost, 8, draft_cost={"fixed": 0.0, "per_token": 0.0},
                    timed=False)
    assert not gate.paused  # it cannot guess paused: it starts by drafting
    out = [e.token for e in token_stream(model, PROMPT, drafter=gate, max_tokens=60,
                                         num_draft_tokens=8)]
    assert out == ar(model, PROMPT, n=60)
    assert gate.paused_tokens > 0  # it paused ...
    assert gate.inner.stats["tails"] > gate.inner.stats["proposals"] > 0  # ... and probed


def test_predictions_are_dropped_after_a_rejection():
    d = WedlmDrafter(EVERY)
    d.propose(PROMPT, 3)  # nothing predicted yet
    wants = d.wants(PROMPT, [7, 8])
    assert wants.tail == (MASK,) * 4 and wants.layers == ()
    mx.eval(*wants.read(Returned(tail_logits=mx.zeros((4, 64)))))
    assert not d.propose(PROMPT + [7, 9, 1], 3)  # 8 was rejected: the masks followed it
    wants = d.wants(PROMPT, [7, 8])
    mx.eval(*wants.read(Returned(tail_logits=mx.zeros((4, 64)))))
    assert len(d.propose(PROMPT + [7, 8, 1], 3)) >= 1  # all accepted: masks 2.. are drafts
