"""``specdec.core.grammar``: each verified position's mask equals a fresh matcher's for its
own history (the oracle), forbidden tokens get no probability, and a bad response format
says what to fix (the tiny byte-level tokenizer of tests/drafters/test_grammar.py)."""

import mlx.core as mx
import numpy as np
import pytest
from conftest import TINY_VOCAB, examples
from drafters.test_grammar import FORMAT, grammar, tiny_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.core.grammar import response_grammar


@settings(max_examples=examples(25), deadline=None)
@given(st.data())
def test_masks_equal_a_fresh_matcher_per_position(data):
    """``Grammar.masks`` for a tree of paths equals, row by row, the mask of a new
    matcher fed the output and that row's own path (or everything, behind a forbidden
    token); the matcher ends where it began."""
    import llguidance

    g = grammar()
    out = []
    for _ in range(data.draw(st.integers(0, 6))):
        f = g.forced(1) or [data.draw(st.integers(1, 52))]
        if g.matcher.validate_tokens(f) == 1:
            g.accept(f)
            out += f
    paths = [[]] + [data.draw(st.lists(st.integers(1, 52), min_size=1, max_size=4)) for _ in range(4)]
    masks = g.masks(paths)
    for r, path in enumerate(paths):
        fresh = llguidance.LLMatcher(g.ll_tokenizer, response_grammar(FORMAT))
        assert fresh.validate_tokens(out) == len(out)
        for t in out:
            fresh.consume_token(t)
        want = np.full((1, g.words), -1, dtype=np.int32)
        if fresh.validate_tokens(path) == len(path):
            for t in path:
                fresh.consume_token(t)
            fresh.unsafe_compute_mask_ptr(want[0].ctypes.data, g.words * 4)
        assert (masks[r] == want[0]).all(), (out, path)
    assert g.forced(8) == grammar_after(out).forced(8)


def grammar_after(tokens):
    g = grammar()
    g.accept(tokens)
    return g


def test_a_forbidden_token_gets_no_probability():
    g = grammar()
    logits = mx.zeros((1, TINY_VOCAB))
    masked = g(logits, [], [[]])
    allowed = [i for i in range(TINY_VOCAB) if masked[0, i].item() > -1e9]
    assert tiny_tokenizer().decode(allowed).startswith("{") and 0 not in allowed


def test_a_bad_response_format_says_what_to_fix():
    with pytest.raises(ValueError, match="json_schema"):
        response_grammar({"type": "xml"})
    with pytest.raises(ValueError, match="not supported"):
        response_grammar({"type": "json_schema", "json_schema": {"schema": {"type": "objectx"}}})
