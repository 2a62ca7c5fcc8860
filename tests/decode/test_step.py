"""The one verify step's seams (``decode.step``): logits processors see each verified
position's own history, samplers decide, and one rollback contract keeps what was
accepted on every cache kind, refusing what it cannot do."""

import mlx.core as mx
import pytest
from conftest import TINY_VOCAB, cached_tiny, repetitive_prompt

from specdec.cache.batch_cache import RowsKVCache, roll_back
from specdec.cache.rollback import RollbackError, make_cache, prefill
from specdec.core.proposal import Proposal
from specdec.decode.step import Greedy, LogitsProcessor, Verify, verify_step


class Recorder(LogitsProcessor):
    def __init__(self):
        self.calls = []

    def __call__(self, logits, context, seen):
        self.calls.append((len(context), [list(s) for s in seen], logits.shape[0]))
        return logits


class Force(LogitsProcessor):
    """A logit bias that makes ``token`` the argmax at every position (as ``logit_bias``
    with a large value would)."""

    def __init__(self, token):
        self.token = token

    def __call__(self, logits, context, seen):
        return logits + 1e4 * (mx.arange(logits.shape[-1]) == self.token)


def prefilled(model, context):
    cache = make_cache(model, max_trim=16)
    prefill(model, cache, context[:-1])
    return cache


@pytest.mark.parametrize("parents", [None, (-1, 0, -1, 2)])
def test_processors_see_each_positions_own_history(parents):
    model, context = cached_tiny("llama"), repetitive_prompt(3, 20)
    rec = Recorder()
    proposal = Proposal([5, 6, 7, 8], parents=parents)
    verify_step(model, prefilled(model, context), [Verify(context, proposal, Greedy(), [rec])])
    want = [[], [5], [5, 6], [5, 6, 7], [5, 6, 7, 8]] if parents is None else \
        [[], [5], [5, 6], [7], [7, 8]]
    assert rec.calls == [(len(context), want, 5)]


def test_a_processor_applies_at_every_verified_position():
    """Forcing token 9 everywhere: a draft of 9s is accepted whole plus a forced bonus; a
    draft that leaves 9 is cut at once and corrected to 9; the cache keeps exactly that."""
    model, context = cached_tiny("llama"), repetitive_prompt(4, 20)
    for draft, emitted in (([9, 9], [9, 9, 9]), ([3, 9], [9])):
        cache = prefilled(model, context)
        step, = verify_step(model, cache, [Verify(context, Proposal(draft), Greedy(), [Force(9)])])
        assert step.tokens == emitted and step.accepted == len(emitted) - 1
        assert cache[0].offset == len(context) - 1 + len(emitted)


def test_the_rollback_contract_refuses_what_it_cannot_keep():
    model, context = cached_tiny("llama"), repetitive_prompt(5, 12)
    cache = prefilled(model, context)
    verify_step(model, cache, [Verify(context, Proposal([1, 2]), Greedy())])
    with pytest.raises(RollbackError, match="single-request cache"):
        roll_back(cache, 1, [[0], [0]])
    rows = [RowsKVCache.from_kv(c) for c in prefilled(model, context)]
    model(mx.array([[context[-1], 1, 2]]), cache=rows)
    with pytest.raises(RollbackError, match="prefixes"):
        roll_back(rows, 3, [[0, 2]])
    roll_back(rows, 3, [[0, 1]])
    assert rows[0].size() == len(context) - 1 + 2


def test_greedy_rows_decided_together_equal_rows_decided_one_by_one():
    """Greedy rows without extras are decided in one set of batched ops; the same rows
    with diagnostics on (each decided alone) get the same tokens and logprobs, drafts
    accepted, rejected, absent and out of the vocabulary alike."""
    from specdec.cache.batch_cache import prefill_rows

    model = cached_tiny("llama")
    contexts = [repetitive_prompt(s, n) for s, n in ((6, 20), (7, 14), (8, 25))]
    greedy = [s.tokens for s in verify_step(model, prefilled(model, contexts[0]), [
        Verify(contexts[0], Proposal([]), Greedy())])]
    drafts = [greedy[0] + [3, 4], [TINY_VOCAB + 5, 1], []]  # accepted then rejected; OOV; none
    steps = {}
    for diagnostics in (False, True):
        cache = prefill_rows(model, [make_cache(model) for _ in contexts], [c[:-1] for c in contexts])
        steps[diagnostics] = verify_step(model, cache, [
            Verify(c, Proposal(d), Greedy(), diagnostics=diagnostics) for c, d in zip(contexts, drafts)],
            vocab=TINY_VOCAB)
    for a, b in zip(steps[False], steps[True]):
        assert (a.tokens, a.accepted, a.logprobs) == (b.tokens, b.accepted, b.logprobs)
    assert steps[False][0].accepted >= 1 and steps[False][1].accepted == 0
