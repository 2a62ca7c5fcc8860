"""Issue #35 item 3 filled in for every hybrid family (lfm2, qwen3_next, qwen3_5, mamba2):
tests/drafters/test_draft_model_hybrid.py samples its cases over the families; here each family gets
every k in 1..8, each with one of the draft kinds (self draft: every block accepted in full plus
the bonus; near draft: partial; unrelated draft: rejected at position 0) so that every pair of
family, k and kind meets, a stop on a draft-proposed token inside an accepted block followed by
a request on the same drafter, seeded sampling with a coupled draft, and a hybrid target
drafted for by an attention-only model.
"""

from __future__ import annotations

import pytest
from hybrid_tiny import cached
from pairwise import missing_pairs
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


# (family, k, draft kind): every pair of two factors' values shares a row, not the 4 x 8 x 3
# product (96 runs, 41 s on CI): each family meets every k and every draft kind, each k every
# kind (kind = (family index + k) % 3; test_matrix_covers_every_pair checks it by brute force).
# A kind's rollback lengths do not hang on the family: self rolls back nothing, near a part of
# the block, unrelated all of it, and every k still runs on every family.
KINDS = ("self", "near", "unrelated")
LEVELS = {"arch": tuple(ARCHS), "k": tuple(range(1, 9)), "kind": KINDS}
MATRIX = [(arch, k, KINDS[(i + k) % 3]) for i, arch in enumerate(ARCHS) for k in LEVELS["k"]]


def test_matrix_covers_every_pair():
    rows = [dict(arch=a, k=k, kind=kind) for a, k, kind in MATRIX]
    assert missing_pairs(rows, LEVELS) == [] and len(set(MATRIX)) == len(MATRIX)


@pytest.mark.slow
@pytest.mark.parametrize("arch,k,kind", MATRIX, ids=[f"{a}-k{k}-{kind}" for a, k, kind in MATRIX])
def test_every_k_self_near_and_unrelated_drafts(arch, k, kind):
    target = cached(arch)
    draft = {"self": target, "near": near(arch), "unrelated": cached(arch, 1)}[kind]
    log, stats = _steps(target, draft, k)
    if kind == "self":  # every block: k drafts accepted plus the bonus (the last cut by max_tokens)
        assert all(acc == block - 1 for block, acc in log) and len(log) == -(-N // (k + 1)), log
    elif kind == "near":
        assert stats.accepted > 0
    else:
        assert stats.accepted_by_position[0] < stats.drafted_by_position[0]


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
