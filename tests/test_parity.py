"""The parity diagnosis tells a logic bug from a kernel near-tie.

A deliberately broken rollback (it trims one position too few) must be reported as a logic
bug at the first position it corrupts; the real engine must be reported identical.
"""

import pytest

import specdec.cache.batch_cache as steps  # the verify step rolls back through it
from specdec.drafters.spec import DraftSpec
from specdec.parity import check_parity
from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow  # real model
# each check decodes plain and speculative: 32 tokens hold drafts accepted and rejected (the
# broken trim corrupts the first rollback, well inside them), measured
N_TOKENS = 32


def test_real_engine_is_identical(smollm):
    model, tok = smollm
    rep = check_parity(model, tok, parity_prompts()["json_records"], drafter="ngram",
                       max_tokens=N_TOKENS, num_draft_tokens=4)
    assert rep.identical and rep.verdict == "identical"


def test_broken_rollback_is_diagnosed_as_a_logic_bug(smollm, monkeypatch):
    """Ungated: every step drafts and rolls back through the broken trim. Gated, a stream
    the gate pauses first leaves for plain decoding, whose join check then refuses the
    corrupted cache with a ValueError before any token diverges; the gate is timed, so
    whether it pauses there depends on the machine's step times."""
    real_trim = steps.trim
    monkeypatch.setattr(steps, "trim", lambda cache, n: real_trim(cache, max(n - 1, 0)))
    model, tok = smollm
    # a 120-token prompt and 16 tokens: a broken trim diverges within the first steps (the
    # 476-token demo prompt and 32 tokens cost twice the CPU)
    rep = check_parity(model, tok, parity_prompts()["code_fnmatch_translate"],
                       drafter=DraftSpec("ngram", num_draft_tokens=4, gate=False),
                       max_tokens=16, num_draft_tokens=4)
    assert not rep.identical
    assert rep.verdict.startswith("logic bug"), rep.verdict
    assert rep.reference_position is not None and rep.reference_position <= rep.position
