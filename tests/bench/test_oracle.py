"""The bench's true ceilings: the oracle drafter and the offline replay bounds.

The replay of linear prompt lookup must reproduce the engine's own steps exactly (it is
the model the all-matches bound is an extension of), and the oracle must accept every
draft while leaving the output unchanged.
"""

import pytest
from conftest import SHARED_TOKENS, examples, plain_reference, real_model
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.bench.oracle import OracleDrafter, replay_bound
from specdec.policy.tree_shape import cost_at
from specdec.drafters.spec import DraftSpec
from specdec.engine import generate
from specdec.prompts import parity_prompts
from specdec.core.text import encode_prompt

@settings(max_examples=examples(100))
@given(st.lists(st.floats(0.5, 3.0), min_size=2, max_size=6), st.integers(1, 40))
def test_cost_at_is_exact_on_measured_points_and_monotone_between(vals, L):
    curve = {i + 1: v for i, v in enumerate(sorted(vals))}
    for x, v in curve.items():
        assert cost_at(curve, x) == v
    assert cost_at(curve, L + 1) >= cost_at(curve, L) - 1e-12


def test_replay_counts_on_a_worked_example():
    prompt, plain = [1, 2, 3, 1, 2, 4], [1, 2, 3, 9]
    b = replay_bound(prompt, plain, 3, {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    # linear: after "4" no match -> [1]; then "4 1" -> 1-gram 1 matched most recently at
    # index 3 -> [2, 4, 1]: accepts 2 then corrects to 3 -> [2, 3]; then "3" -> [1, 2, 4]
    # against [9]: 0 accepted -> [9]. Three steps for four tokens.
    assert b["linear"]["steps"] == 3 and b["linear"]["tokens"] == 4
    # the tree also holds the older match's "2 3 1" after "1": it accepts [2, 3], then
    # corrects to 9 in the same step. Two steps.
    assert b["all_matches"]["steps"] == 2 and b["all_matches"]["tokens"] == 4
    assert b["linear"]["speedup_flat"] == pytest.approx(4 / 3)


@pytest.mark.slow
def test_linear_replay_reproduces_the_engines_steps_and_the_oracle_accepts_everything():
    """48 tokens (the shared reference tests/parity's rows decode): the replay's steps and
    the oracle's show at any length; 96 decoded twice as many tokens for the same checks."""
    model, tok = real_model("smollm2-135m")
    prompt = parity_prompts()["code_statistics_hints"]
    n = SHARED_TOKENS
    plain = plain_reference("smollm2-135m", prompt, n)
    assert len(plain.tokens) == n  # no EOS: the replay and the engine see the same end
    ids = encode_prompt(tok, prompt)
    # the gate off: the replay models a drafter that drafts at every step
    ngram = generate(model, tok, prompt, drafter=DraftSpec("ngram", num_draft_tokens=4, gate=False),
                     max_tokens=n)
    assert ngram.tokens == plain.tokens
    bound = replay_bound(ids, plain.tokens, 4, {1: 1.0, 5: 1.0})
    assert bound["linear"]["steps"] == len(ngram.steps)
    assert bound["all_matches"]["tokens_per_step"] >= bound["linear"]["tokens_per_step"] > 1.0

    oracle = generate(model, tok, prompt, drafter=OracleDrafter([plain.tokens]), max_tokens=n,
                      num_draft_tokens=4)
    assert oracle.tokens == plain.tokens
    assert all(acc == L - 1 for L, acc in oracle.steps[:-1])  # every draft accepted
    assert len(oracle.steps) == -(-n // 5)
