"""Issue #35 item 3 filled in for every hybrid family (lfm2, qwen3_next, qwen3_5, mamba2):
tests/drafters/test_draft_model_hybrid.py samples its cases over the families; here each family gets
every k in 1..8 (self draft: every block accepted in full plus the bonus; near draft: partial;
unrelated draft: rejected at position 0), a stop on a draft-proposed token inside an
accepted block followed by a request on the same drafter, seeded sampling with a coupled
draft, and a hybrid target drafted for by an attention-only model.
"""

from __future__ import annotations

import pytest
from hybrid_tiny import cached
from drafters.test_draft_model_hybrid import ARCHS, N, PROMPT, near, plain, run
from drafters.test_draft_model_hybrid import test_hybrid_target_with_an_attention_draft as attention_draft
from drafters.test_draft_model_hybrid import test_seeded_sampling_with_a_coupled_draft as seeded_sampling

from specdec.core.stats import SpecStats
from specdec.drafters.draft_model import DraftModelDrafter


def _steps(target, draft, k: int) -> tuple[list[tuple[int, int]], SpecStats]:
    log, stats = [], SpecStats()
    out = run(target, drafter=DraftModelDrafter(draft), num_draft_tokens=k, stats=stats, step_log=log)
    assert out == plain(target), k
    return log, stats


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_k_self_near_and_unrelated_drafts(arch):
    target = cached(arch)
    for k in range(1, 9):
        log, _ = _steps(target, target, k)
        # every block: k drafts accepted plus the target's bonus (the last one cut by max_tokens)
        assert all(acc == block - 1 for block, acc in log) and len(log) == -(-N // (k + 1)), (k, log)
        _, s_near = _steps(target, near(arch), k)
        assert s_near.accepted > 0, k
        _, s_far = _steps(target, cached(arch, 1), k)
        assert s_far.accepted_by_position[0] < s_far.drafted_by_position[0], k


def _mid_block_stop(log: list[tuple[int, int]], truth: list[int]) -> int | None:
    """Index of the first new token that a step took from the draft and that is neither
    the block's first token nor its last emitted one: a stop there lands inside the block."""
    at = 0
    for _block, accepted in log:
        for j in range(1, accepted):
            if truth[at + j] not in truth[: at + j]:
                return at + j
        at += accepted + 1
    return None


@pytest.mark.parametrize("arch", ARCHS)
def test_stop_on_a_draft_token_inside_a_partly_accepted_block(arch):
    """An EOS the near draft proposed, mid-block, ends the request there; the same drafter
    (its cache holding drafts past the stop) then serves a follow-up exactly."""
    target, drafter = cached(arch), DraftModelDrafter(near(arch))
    truth, log = plain(target), []
    run(target, drafter=DraftModelDrafter(near(arch)), num_draft_tokens=6, step_log=log)
    stop = _mid_block_stop(log, truth)
    assert stop is not None, log
    out = run(target, drafter=drafter, num_draft_tokens=6, eos={truth[stop]})
    assert out == truth[:stop]
    follow = PROMPT + out + [1, 2]
    assert run(target, follow, drafter, num_draft_tokens=6) == plain(target, follow)


@pytest.mark.parametrize("arch", ["qwen3_next", "mamba2"])  # lfm2 and qwen3_5: test_hybrid_draft
def test_seeded_sampling_with_a_coupled_draft_other_families(arch):
    seeded_sampling(arch)


@pytest.mark.parametrize("arch", ["lfm2", "qwen3_5"])  # qwen3_next and mamba2: test_hybrid_draft
def test_hybrid_target_with_an_attention_draft_other_families(arch):
    attention_draft(arch)
