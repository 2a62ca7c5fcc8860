"""``cache.replay``: the recorder's scope (no class swap or hook outlives it), which path
the installed mlx-lm gives (the per-step hook present: the fast path), and that records
live only within a verify block. Parity of hybrid generation: tests/cache/test_recurrent.py, tests/drafters/test_draft_model_hybrid.py."""

import logging
import types

import mlx.core as mx
from hybrid_tiny import cached

from specdec.cache import replay
from specdec.cache.rollback import make_cache, prefill
from specdec.core.proposal import Proposal
from specdec.decode.step import Greedy, Verify, verify_step
from specdec.drafters.spec import DraftSpec, build_drafter
from specdec.engine import token_stream

PROMPT = [(7 * i) % 13 + 3 for i in range(6)] * 4


def classes(model):
    return [type(m) for m in model.modules()]


def test_the_installed_mlx_lm_has_the_per_step_hook():
    """Pins the fast path: a rename in mlx-lm fails here instead of silently losing speed."""
    assert replay.fast_path()
    assert replay.step_hook() is not None


def test_an_absent_hook_warns_once_and_takes_the_slower_path(caplog):
    bare = types.SimpleNamespace()
    with caplog.at_level(logging.WARNING, logger=replay.__name__):
        assert not replay.fast_path(bare, "no_such_step")
        assert not replay.fast_path(bare, "no_such_step")
    assert len([r for r in caplog.records if "absent" in r.getMessage()]) == 1


def test_the_swap_is_scoped():
    model = cached("qwen3_next")
    before, hook = classes(model), replay.step_hook()
    recorder = replay.Recorder(model)
    with recorder:
        inside = classes(model)
        assert replay.step_hook() is hook  # ours wraps it; the unwrapped one is mlx-lm's
    assert inside != before and all(issubclass(a, b) for a, b in zip(inside, before))
    assert classes(model) == before and replay.step_hook() is hook


def test_no_swap_outlives_a_generation():
    for arch in ("qwen3_next", "mamba2"):
        model = cached(arch)
        before = classes(model)
        drafter = build_drafter(DraftSpec("ngram", ngram_min=1, gate=False))
        out = [e.token for e in token_stream(model, PROMPT, drafter=drafter, max_tokens=16,
                                             num_draft_tokens=4)]
        assert len(out) == 16
        assert classes(model) == before


def test_nothing_is_recorded_after_the_block():
    """Records live from ``begin`` to the end of the block's forward: forwards after it (a
    plain stretch under the gate, a prefill) record nothing, so nothing stays referenced."""
    model = cached("qwen3_next")
    truth = [e.token for e in token_stream(model, PROMPT, max_tokens=8)]
    cache = make_cache(model, recurrent=True)
    prefill(model, cache, PROMPT[:-1])
    step = verify_step(model, cache, [Verify(list(PROMPT), Proposal(list(truth[:3])), Greedy())])[0]
    assert step.accepted == 3
    for t in truth[3:6]:
        model(mx.array([[t]]), cache=cache)
    assert cache.recorder.stop() == {}
    cache.begin([truth[6]])
    model(mx.array([[truth[6]]]), cache=cache)
    assert cache.recorder.stop() != {}  # the control: inside a block, the modules do record
    cache.end_block()
